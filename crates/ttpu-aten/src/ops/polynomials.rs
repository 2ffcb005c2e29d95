//! The orthogonal polynomial families of `torch.special` at a given degree (the `n_scalar`
//! overloads): Chebyshev `T`, `U`, `V`, `W`, Hermite `H` and `He`, Laguerre `L` and Legendre `P`,
//! each by its three-term recurrence unrolled to the degree, with PyTorch's special cases: a
//! negative degree gives 0, `|x| = 1` (`x = 0` for Laguerre) its closed value, and the Chebyshev
//! families of high degree inside `(-1, 1)` their trigonometric forms, as its kernels compute them.
//!
//! The overloads whose degree is a tensor would unroll to a degree the data decides; they are
//! refused.

use ttpu_ir::{BinaryOp, CompareDirection, Scalar, UnaryOp, ValueId};

use super::elementwise::{apply_float, tensor};
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

/// The recurrence of `family` at `x` up to degree `n >= 2`, from `p0` and `p1`.
fn recurrence(cx: &mut Cx<'_>, family: Family, x: ValueId, n: i64) -> Result<ValueId> {
    let two_x = cx.binary(BinaryOp::Add, x, x)?;
    let one = constant(cx, x, 1.0)?;
    let mut p = one;
    let mut q = match family {
        Family::ChebyshevT | Family::HermiteHe | Family::LegendreP => x,
        Family::ChebyshevU | Family::HermiteH => two_x,
        Family::ChebyshevV => cx.binary(BinaryOp::Subtract, two_x, one)?,
        Family::ChebyshevW => cx.binary(BinaryOp::Add, two_x, one)?,
        Family::LaguerreL => cx.binary(BinaryOp::Subtract, one, x)?,
    };
    // Each family's step from (p, q) = (P[k-1], P[k]) to P[k+1], in PyTorch's operation order.
    for k in 1..n {
        let r = match family {
            Family::ChebyshevT | Family::ChebyshevU | Family::ChebyshevV | Family::ChebyshevW => {
                let product = cx.binary(BinaryOp::Multiply, two_x, q)?;
                cx.binary(BinaryOp::Subtract, product, p)?
            }
            Family::HermiteH => {
                // r = (x + x) * q - k * p with its k = 2, 4, ...
                let product = cx.binary(BinaryOp::Multiply, two_x, q)?;
                let scaled = cx.binary_scalar(BinaryOp::Multiply, p, Scalar::Float((2 * k) as f64))?;
                cx.binary(BinaryOp::Subtract, product, scaled)?
            }
            Family::HermiteHe => {
                let product = cx.binary(BinaryOp::Multiply, x, q)?;
                let scaled = cx.binary_scalar(BinaryOp::Multiply, p, Scalar::Float(k as f64))?;
                cx.binary(BinaryOp::Subtract, product, scaled)?
            }
            Family::LaguerreL => {
                // ((2k + (1 - x)) * q - k * p) / (k + 1)
                let one_minus_x = cx.binary(BinaryOp::Subtract, one, x)?;
                let factor = cx.binary_scalar(BinaryOp::Add, one_minus_x, Scalar::Float((2 * k) as f64))?;
                let product = cx.binary(BinaryOp::Multiply, factor, q)?;
                let scaled = cx.binary_scalar(BinaryOp::Multiply, p, Scalar::Float(k as f64))?;
                let difference = cx.binary(BinaryOp::Subtract, product, scaled)?;
                cx.binary_scalar(BinaryOp::Divide, difference, Scalar::Float((k + 1) as f64))?
            }
            Family::LegendreP => {
                // ((2k + 1) * x * q - k * p) / (k + 1)
                let factor = cx.binary_scalar(BinaryOp::Multiply, x, Scalar::Float((2 * k + 1) as f64))?;
                let product = cx.binary(BinaryOp::Multiply, factor, q)?;
                let scaled = cx.binary_scalar(BinaryOp::Multiply, p, Scalar::Float(k as f64))?;
                let difference = cx.binary(BinaryOp::Subtract, product, scaled)?;
                cx.binary_scalar(BinaryOp::Divide, difference, Scalar::Float((k + 1) as f64))?
            }
        };
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

/// `special_<family>_polynomial_<p>.n_scalar(x, n)` (and the tensor overloads, refused unless `n`
/// is a number).
pub(super) fn polynomial(cx: &mut Cx<'_>, args: &Args, family: Family) -> Result<Imported> {
    let Some(degree) = args.opt_scalar("n").ok().flatten() else {
        return Err(cx.bad(
            "a polynomial's degree given as a tensor is refused: its recurrence would unroll to a degree the data \
             decides; pass the degree as a number",
        ));
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
