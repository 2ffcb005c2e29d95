//! The orthogonal polynomial families of `torch.special` at a given degree (the `n_scalar`
//! overloads): Chebyshev `T`, `U`, `V`, `W`, Hermite `H` and `He`, Laguerre `L` and Legendre `P`,
//! each by its three-term recurrence unrolled to the degree, with PyTorch's special cases: a
//! negative degree gives 0, `|x| = 1` (`x = 0` for Laguerre) its closed value, and the Chebyshev
//! families of high degree inside `(-1, 1)` their trigonometric forms, as its kernels compute them.
//!
//! The overloads whose degree is a tensor (each element its own) run the recurrence in one loop
//! that steps every element still below its degree.

use ttpu_ir::{BinaryOp, CompareDirection, DType, ReduceKind, Scalar, TensorType, UnaryOp, ValueId};

use super::elementwise::{apply_float, tensor};
use super::loops::loop_graph;
use crate::args::Args;
use crate::ctx::{Cx, Imported};
use crate::error::Result;

/// A polynomial family.
#[derive(Copy, Clone, PartialEq)]
pub(super) enum Family {
    ChebyshevT,
    ChebyshevU,
    ChebyshevV,
    ChebyshevW,
    HermiteH,
    HermiteHe,
    LaguerreL,
    LegendreP,
}

fn constant(cx: &mut Cx<'_>, like: ValueId, value: f64) -> Result<ValueId> {
    cx.splat_like(like, Scalar::Float(value))
}

/// `where(mask, value, rest)` for a constant `value`.
fn override_with(cx: &mut Cx<'_>, mask: ValueId, value: f64, rest: ValueId) -> Result<ValueId> {
    let value = constant(cx, rest, value)?;
    cx.select(mask, value, rest)
}

/// `P[1]` of `family` at `x`.
fn first(cx: &mut Cx<'_>, family: Family, x: ValueId) -> Result<ValueId> {
    let one = constant(cx, x, 1.0)?;
    let two_x = cx.binary(BinaryOp::Add, x, x)?;
    Ok(match family {
        Family::ChebyshevT | Family::HermiteHe | Family::LegendreP => x,
        Family::ChebyshevU | Family::HermiteH => two_x,
        Family::ChebyshevV => cx.binary(BinaryOp::Subtract, two_x, one)?,
        Family::ChebyshevW => cx.binary(BinaryOp::Add, two_x, one)?,
        Family::LaguerreL => cx.binary(BinaryOp::Subtract, one, x)?,
    })
}

/// One step of `family`'s recurrence, from `(p, q) = (P[k-1], P[k])` to `P[k+1]`, in PyTorch's
/// operation order; `k` is a tensor of `x`'s type (a constant, or each element's own step).
fn step(cx: &mut Cx<'_>, family: Family, x: ValueId, p: ValueId, q: ValueId, k: ValueId) -> Result<ValueId> {
    let two_x = cx.binary(BinaryOp::Add, x, x)?;
    let two_k = cx.binary(BinaryOp::Add, k, k)?;
    Ok(match family {
        Family::ChebyshevT | Family::ChebyshevU | Family::ChebyshevV | Family::ChebyshevW => {
            let product = cx.binary(BinaryOp::Multiply, two_x, q)?;
            cx.binary(BinaryOp::Subtract, product, p)?
        }
        Family::HermiteH => {
            // r = (x + x) * q - k * p with its k = 2, 4, ...
            let product = cx.binary(BinaryOp::Multiply, two_x, q)?;
            let scaled = cx.binary(BinaryOp::Multiply, p, two_k)?;
            cx.binary(BinaryOp::Subtract, product, scaled)?
        }
        Family::HermiteHe => {
            let product = cx.binary(BinaryOp::Multiply, x, q)?;
            let scaled = cx.binary(BinaryOp::Multiply, p, k)?;
            cx.binary(BinaryOp::Subtract, product, scaled)?
        }
        Family::LaguerreL => {
            // ((2k + (1 - x)) * q - k * p) / (k + 1)
            let one = constant(cx, x, 1.0)?;
            let one_minus_x = cx.binary(BinaryOp::Subtract, one, x)?;
            let factor = cx.binary(BinaryOp::Add, one_minus_x, two_k)?;
            let product = cx.binary(BinaryOp::Multiply, factor, q)?;
            let scaled = cx.binary(BinaryOp::Multiply, p, k)?;
            let difference = cx.binary(BinaryOp::Subtract, product, scaled)?;
            let next = cx.binary(BinaryOp::Add, k, one)?;
            cx.binary(BinaryOp::Divide, difference, next)?
        }
        Family::LegendreP => {
            // ((2k + 1) * x * q - k * p) / (k + 1)
            let one = constant(cx, x, 1.0)?;
            let odd = cx.binary(BinaryOp::Add, two_k, one)?;
            let factor = cx.binary(BinaryOp::Multiply, x, odd)?;
            let product = cx.binary(BinaryOp::Multiply, factor, q)?;
            let scaled = cx.binary(BinaryOp::Multiply, p, k)?;
            let difference = cx.binary(BinaryOp::Subtract, product, scaled)?;
            let next = cx.binary(BinaryOp::Add, k, one)?;
            cx.binary(BinaryOp::Divide, difference, next)?
        }
    })
}

/// The recurrence of `family` at `x` up to degree `n >= 2`, from `p0` and `p1`.
fn recurrence(cx: &mut Cx<'_>, family: Family, x: ValueId, n: i64) -> Result<ValueId> {
    let mut p = constant(cx, x, 1.0)?;
    let mut q = first(cx, family, x)?;
    for k in 1..n {
        let k = constant(cx, x, k as f64)?;
        let r = step(cx, family, x, p, q, k)?;
        p = q;
        q = r;
    }
    Ok(q)
}

/// The polynomial of `family` and degree `n` at `x` (a float tensor in opmath).
fn evaluate(cx: &mut Cx<'_>, family: Family, x: ValueId, n: i64, float_bits: u32) -> Result<ValueId> {
    if n < 0 {
        return constant(cx, x, 0.0);
    }
    // Hermite's recurrence overflows long before these degrees; PyTorch returns NaN past them.
    let hermite_limit = if float_bits == 64 { 512 } else { 128 };
    if matches!(family, Family::HermiteH | Family::HermiteHe) && n > hermite_limit {
        return constant(cx, x, f64::NAN);
    }
    let one = constant(cx, x, 1.0)?;
    let mut value = match n {
        0 => one,
        1 => match family {
            Family::ChebyshevT | Family::HermiteHe | Family::LegendreP => x,
            Family::ChebyshevU | Family::HermiteH => cx.binary(BinaryOp::Add, x, x)?,
            Family::ChebyshevV => {
                let two_x = cx.binary(BinaryOp::Add, x, x)?;
                cx.binary(BinaryOp::Subtract, two_x, one)?
            }
            Family::ChebyshevW => {
                let two_x = cx.binary(BinaryOp::Add, x, x)?;
                cx.binary(BinaryOp::Add, two_x, one)?
            }
            Family::LaguerreL => cx.binary(BinaryOp::Subtract, one, x)?,
        },
        _ => {
            cx.unroll(&[n], "a polynomial's recurrence")?;
            recurrence(cx, family, x, n)?
        }
    };
    let magnitude = cx.unary(UnaryOp::Abs, x)?;
    let zero = constant(cx, x, 0.0)?;
    let positive = cx.compare(CompareDirection::Gt, x, zero)?;
    // High degrees inside (-1, 1): the trigonometric forms.
    let trig_degree = match family {
        Family::ChebyshevT => Some(6),
        Family::ChebyshevU | Family::ChebyshevV | Family::ChebyshevW => Some(8),
        _ => None,
    };
    if let Some(limit) = trig_degree
        && n > limit
    {
        let inside = cx.compare(CompareDirection::Lt, magnitude, one)?;
        let theta = acos(cx, x)?;
        let nf = n as f64;
        let trig = match family {
            Family::ChebyshevT => {
                let angle = cx.binary_scalar(BinaryOp::Multiply, theta, Scalar::Float(nf))?;
                cx.unary(UnaryOp::Cosine, angle)?
            }
            Family::ChebyshevU => {
                // sin((n + 1) t) / sin(t), or (n + 1) cos((n + 1) t) / x where sin(t) is 0.
                let angle = cx.binary_scalar(BinaryOp::Multiply, theta, Scalar::Float(nf + 1.0))?;
                let top = cx.unary(UnaryOp::Sine, angle)?;
                let bottom = cx.unary(UnaryOp::Sine, theta)?;
                let ratio = cx.binary(BinaryOp::Divide, top, bottom)?;
                let cos = cx.unary(UnaryOp::Cosine, angle)?;
                let scaled = cx.binary_scalar(BinaryOp::Multiply, cos, Scalar::Float(nf + 1.0))?;
                let fallback = cx.binary(BinaryOp::Divide, scaled, x)?;
                let vanishes = cx.compare(CompareDirection::Eq, bottom, zero)?;
                cx.select(vanishes, fallback, ratio)?
            }
            Family::ChebyshevV | Family::ChebyshevW => {
                let angle = cx.binary_scalar(BinaryOp::Multiply, theta, Scalar::Float(nf + 0.5))?;
                let half = cx.binary_scalar(BinaryOp::Divide, theta, Scalar::Float(2.0))?;
                let (top, bottom, guard) = if family == Family::ChebyshevV {
                    (
                        cx.unary(UnaryOp::Cosine, angle)?,
                        cx.unary(UnaryOp::Cosine, half)?,
                        cx.unary(UnaryOp::Sine, half)?,
                    )
                } else {
                    (cx.unary(UnaryOp::Sine, angle)?, cx.unary(UnaryOp::Sine, half)?, cx.unary(UnaryOp::Cosine, half)?)
                };
                let ratio = cx.binary(BinaryOp::Divide, top, bottom)?;
                // Where the guard is exactly 1, PyTorch takes the value at the edge.
                let at_edge = cx.compare(CompareDirection::Eq, guard, one)?;
                let edge = if family == Family::ChebyshevV {
                    let odd = n % 2 == 1;
                    let value = (2 * n + 1) as f64;
                    constant(cx, x, if odd { -value } else { value })?
                } else {
                    let odd = n % 2 == 1;
                    let tail = constant(cx, x, if odd { -1.0 } else { 1.0 })?;
                    let head = constant(cx, x, (2 * n + 1) as f64)?;
                    cx.select(positive, head, tail)?
                };
                cx.select(at_edge, edge, ratio)?
            }
            _ => unreachable!("only the Chebyshev families have trigonometric forms"),
        };
        value = cx.select(inside, trig, value)?;
    }
    // The closed values at the ends of the interval.
    match family {
        Family::ChebyshevT | Family::ChebyshevU | Family::ChebyshevV | Family::ChebyshevW | Family::LegendreP => {
            let at_end = cx.compare(CompareDirection::Eq, magnitude, one)?;
            let nf = n as f64;
            let odd = n % 2 == 1;
            let (at_plus, at_minus) = match family {
                Family::ChebyshevT | Family::LegendreP => (1.0, if odd { -1.0 } else { 1.0 }),
                Family::ChebyshevU => (nf + 1.0, if odd { -(nf + 1.0) } else { nf + 1.0 }),
                Family::ChebyshevV => (1.0, if odd { -(2.0 * nf + 1.0) } else { 2.0 * nf + 1.0 }),
                _ => (2.0 * nf + 1.0, if odd { -1.0 } else { 1.0 }),
            };
            let plus = constant(cx, x, at_plus)?;
            let minus = constant(cx, x, at_minus)?;
            let end = cx.select(positive, plus, minus)?;
            value = cx.select(at_end, end, value)?;
        }
        Family::LaguerreL => {
            let at_zero = cx.compare(CompareDirection::Eq, magnitude, zero)?;
            value = override_with(cx, at_zero, 1.0, value)?;
        }
        Family::HermiteH | Family::HermiteHe => {}
    }
    Ok(value)
}

/// `acos(x)` from `atan2(sqrt(1 - x^2), x)` (the IR has no `acos`).
fn acos(cx: &mut Cx<'_>, x: ValueId) -> Result<ValueId> {
    let one = constant(cx, x, 1.0)?;
    let square = cx.binary(BinaryOp::Multiply, x, x)?;
    let rest = cx.binary(BinaryOp::Subtract, one, square)?;
    let root = cx.unary(UnaryOp::Sqrt, rest)?;
    cx.binary(BinaryOp::Atan2, root, x)
}

/// The largest degree of `family` whose recurrence PyTorch runs (past it, Hermite's overflow and
/// PyTorch returns NaN).
fn hermite_limit(dtype: DType) -> i64 {
    if dtype == DType::F64 { 512 } else { 128 }
}

/// The degree past which a Chebyshev family takes its trigonometric form inside `(-1, 1)`.
fn trig_limit(family: Family) -> Option<i64> {
    match family {
        Family::ChebyshevT => Some(6),
        Family::ChebyshevU | Family::ChebyshevV | Family::ChebyshevW => Some(8),
        _ => None,
    }
}

/// The polynomial of `family` at `x` with each element's own degree `n` (a float tensor of `x`'s
/// type, as PyTorch promotes it, then truncated to an integer as its `static_cast` does): the
/// special cases by mask, and the recurrence in one loop that steps every element still below its
/// degree, as many steps as the largest degree an element needs it for.
fn evaluate_tensor(cx: &mut Cx<'_>, family: Family, x: ValueId, n: ValueId) -> Result<ValueId> {
    let dtype = cx.dtype(x);
    // `static_cast<int64_t>` of NaN or of a value outside i64 gives i64::MIN on the CPUs PyTorch
    // runs on: a negative degree.
    let n_size = cx.unary(UnaryOp::Abs, n)?;
    let limit = constant(cx, n, 2f64.powi(63))?;
    let valid = cx.compare(CompareDirection::Lt, n_size, limit)?;
    let minus_one = constant(cx, n, -1.0)?;
    let n = cx.select(valid, n, minus_one)?;
    let degree = cx.convert(n, DType::I64)?;
    let int = |cx: &mut Cx<'_>, value: i64| cx.splat_like(degree, Scalar::Int(value));
    let compare_degree = |cx: &mut Cx<'_>, direction: CompareDirection, value: i64| -> Result<ValueId> {
        let bound = cx.splat_like(degree, Scalar::Int(value))?;
        cx.compare(direction, degree, bound)
    };
    let nf = cx.convert(degree, dtype)?;
    let one = constant(cx, x, 1.0)?;
    let zero = constant(cx, x, 0.0)?;
    let magnitude = cx.unary(UnaryOp::Abs, x)?;
    let positive = cx.compare(CompareDirection::Gt, x, zero)?;
    let two = int(cx, 2)?;
    let remainder = cx.binary(BinaryOp::Remainder, degree, two)?;
    let one_int = int(cx, 1)?;
    let odd = cx.compare(CompareDirection::Eq, remainder, one_int)?;
    // Which elements take a special case rather than the recurrence.
    let mut direct = compare_degree(cx, CompareDirection::Lt, 2)?;
    let over = compare_degree(cx, CompareDirection::Gt, hermite_limit(dtype))?;
    let inside = cx.compare(CompareDirection::Lt, magnitude, one)?;
    let trig_mask = match trig_limit(family) {
        Some(limit) => {
            let high = compare_degree(cx, CompareDirection::Gt, limit)?;
            Some(cx.binary(BinaryOp::And, high, inside)?)
        }
        None => None,
    };
    let at_end = cx.compare(CompareDirection::Eq, magnitude, one)?;
    let at_zero = cx.compare(CompareDirection::Eq, magnitude, zero)?;
    match family {
        Family::HermiteH | Family::HermiteHe => direct = cx.binary(BinaryOp::Or, direct, over)?,
        Family::LaguerreL => direct = cx.binary(BinaryOp::Or, direct, at_zero)?,
        _ => direct = cx.binary(BinaryOp::Or, direct, at_end)?,
    }
    if let Some(mask) = trig_mask {
        direct = cx.binary(BinaryOp::Or, direct, mask)?;
    }
    // The recurrence: P[k+1] from P[k-1], P[k] for k = 1, 2, ... while k < the element's degree.
    let needs = cx.unary(UnaryOp::Not, direct)?;
    let none = int(cx, 0)?;
    let steps = cx.select(needs, degree, none)?;
    let rank = cx.rank(x);
    let steps = if rank == 0 { steps } else { cx.reduce(steps, ReduceKind::Max, &(0..rank).collect::<Vec<_>>())? };
    let p1 = first(cx, family, x)?;
    let start = cx.scalar(DType::I64, Scalar::Int(1));
    let state = [start, steps, x, degree, one, p1];
    let types: Vec<TensorType> = state.iter().map(|&value| cx.ty(value)).collect();
    let cond = loop_graph(cx, &types, |cx, s| Ok(vec![cx.compare(CompareDirection::Lt, s[0], s[1])?]))?;
    let body = loop_graph(cx, &types, |cx, s| {
        let (k, x, degree, p, q) = (s[0], s[2], s[3], s[4], s[5]);
        let shape = cx.shape(x);
        let k_float = cx.convert(k, cx.dtype(x))?;
        let k_float = cx.broadcast_to(k_float, &shape)?;
        let r = step(cx, family, x, p, q, k_float)?;
        let k_wide = cx.broadcast_to(k, &shape)?;
        let active = cx.compare(CompareDirection::Lt, k_wide, degree)?;
        let p = cx.select(active, q, p)?;
        let q = cx.select(active, r, q)?;
        let next = cx.binary_scalar(BinaryOp::Add, k, Scalar::Int(1))?;
        Ok(vec![next, s[1], x, degree, p, q])
    })?;
    let built = cx.b.while_loop(cond, body, &state);
    let end = cx.ok(built)?;
    let zero_degree = compare_degree(cx, CompareDirection::Eq, 0)?;
    let one_degree = compare_degree(cx, CompareDirection::Eq, 1)?;
    let value = cx.select(one_degree, p1, end[5])?;
    let mut value = cx.select(zero_degree, one, value)?;
    // `2n + 1` and `n + 1`, each element's.
    let n_plus_one = cx.binary(BinaryOp::Add, nf, one)?;
    let two_n = cx.binary(BinaryOp::Add, nf, nf)?;
    let two_n_plus_one = cx.binary(BinaryOp::Add, two_n, one)?;
    let alternating = |cx: &mut Cx<'_>, value: ValueId| -> Result<ValueId> {
        let minus = cx.unary(UnaryOp::Negate, value)?;
        cx.select(odd, minus, value)
    };
    if let Some(mask) = trig_mask {
        let theta = acos(cx, x)?;
        let trig = match family {
            Family::ChebyshevT => {
                let angle = cx.binary(BinaryOp::Multiply, theta, nf)?;
                cx.unary(UnaryOp::Cosine, angle)?
            }
            Family::ChebyshevU => {
                let angle = cx.binary(BinaryOp::Multiply, theta, n_plus_one)?;
                let top = cx.unary(UnaryOp::Sine, angle)?;
                let bottom = cx.unary(UnaryOp::Sine, theta)?;
                let ratio = cx.binary(BinaryOp::Divide, top, bottom)?;
                let cos = cx.unary(UnaryOp::Cosine, angle)?;
                let scaled = cx.binary(BinaryOp::Multiply, cos, n_plus_one)?;
                let fallback = cx.binary(BinaryOp::Divide, scaled, x)?;
                let vanishes = cx.compare(CompareDirection::Eq, bottom, zero)?;
                cx.select(vanishes, fallback, ratio)?
            }
            Family::ChebyshevV | Family::ChebyshevW => {
                let half_step = constant(cx, x, 0.5)?;
                let factor = cx.binary(BinaryOp::Add, nf, half_step)?;
                let angle = cx.binary(BinaryOp::Multiply, theta, factor)?;
                let half = cx.binary_scalar(BinaryOp::Divide, theta, Scalar::Float(2.0))?;
                let (top, bottom, guard) = if family == Family::ChebyshevV {
                    (
                        cx.unary(UnaryOp::Cosine, angle)?,
                        cx.unary(UnaryOp::Cosine, half)?,
                        cx.unary(UnaryOp::Sine, half)?,
                    )
                } else {
                    (cx.unary(UnaryOp::Sine, angle)?, cx.unary(UnaryOp::Sine, half)?, cx.unary(UnaryOp::Cosine, half)?)
                };
                let ratio = cx.binary(BinaryOp::Divide, top, bottom)?;
                let at_edge = cx.compare(CompareDirection::Eq, guard, one)?;
                let edge = if family == Family::ChebyshevV {
                    alternating(cx, two_n_plus_one)?
                } else {
                    let tail = alternating(cx, one)?;
                    cx.select(positive, two_n_plus_one, tail)?
                };
                cx.select(at_edge, edge, ratio)?
            }
            _ => unreachable!("only the Chebyshev families have trigonometric forms"),
        };
        value = cx.select(mask, trig, value)?;
    }
    match family {
        Family::ChebyshevT | Family::ChebyshevU | Family::ChebyshevV | Family::ChebyshevW | Family::LegendreP => {
            let (at_plus, at_minus) = match family {
                Family::ChebyshevT | Family::LegendreP => (one, alternating(cx, one)?),
                Family::ChebyshevU => (n_plus_one, alternating(cx, n_plus_one)?),
                Family::ChebyshevV => (one, alternating(cx, two_n_plus_one)?),
                _ => (two_n_plus_one, alternating(cx, one)?),
            };
            let end = cx.select(positive, at_plus, at_minus)?;
            value = cx.select(at_end, end, value)?;
        }
        Family::LaguerreL => value = cx.select(at_zero, one, value)?,
        Family::HermiteH | Family::HermiteHe => {
            let nan = constant(cx, x, f64::NAN)?;
            value = cx.select(over, nan, value)?;
        }
    }
    let negative = compare_degree(cx, CompareDirection::Lt, 0)?;
    cx.select(negative, zero, value)
}

/// `special_<family>_polynomial_<p>(x, n)` of a tensor degree (`.default`, and `.x_scalar` with a
/// number `x`): both promoted to their float result type (integers to the default float).
fn polynomial_tensor(cx: &mut Cx<'_>, args: &Args, family: Family) -> Result<Imported> {
    let (x, n) = (args.operand("x")?, args.operand("n")?);
    let dtype = cx.result_type(&[x, n]);
    let dtype = if dtype.is_integer() || dtype == DType::Bool { crate::promote::DEFAULT_FLOAT } else { dtype };
    if !matches!(dtype, DType::F32 | DType::F64) {
        return Err(cx.bad(format!("is implemented for float32 and float64 (PyTorch's CPU kernel refuses {dtype})")));
    }
    let [x, n] = cx.prepare([x, n], dtype)?;
    tensor(evaluate_tensor(cx, family, x, n)?)
}

/// `special_<family>_polynomial_<p>.n_scalar(x, n)`, and the overloads whose degree is a tensor.
pub(super) fn polynomial(cx: &mut Cx<'_>, args: &Args, family: Family) -> Result<Imported> {
    let Some(degree) = args.opt_scalar("n").ok().flatten() else {
        return polynomial_tensor(cx, args, family);
    };
    let n = match degree {
        Scalar::Int(n) => n,
        Scalar::Float(n) if n.is_finite() => n.trunc() as i64,
        Scalar::Float(_) => -1,
        Scalar::Bool(b) => i64::from(b),
    };
    let x = args.tensor("x")?;
    tensor(apply_float(cx, x, |cx, x| {
        let bits = if cx.dtype(x) == ttpu_ir::DType::F64 { 64 } else { 32 };
        evaluate(cx, family, x, n, bits)
    })?)
}
