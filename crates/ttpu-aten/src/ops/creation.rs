//! Tensor factories: `full`, `zeros`/`ones`/`empty` and their `_like`/`new_` forms,
//! `scalar_tensor` and `arange`.
//!
//! Fills are a scalar constant broadcast to the shape, so large or symbolic shapes cost nothing.
//! Dtypes follow PyTorch: an explicit `dtype`, else the `_like` tensor's, else from the fill value
//! (bool, `i64` for ints, the default float for floats), else the default float. `empty` fills with
//! zeros so results are deterministic.

use ttpu_ir::{BinaryOp, DType, Literal, Scalar, Shape, TensorType};

use super::elementwise::tensor;
use crate::args::Args;
use crate::ctx::{Cx, Imported};
use crate::error::Result;
use crate::promote::{DEFAULT_FLOAT, scalar_dtype};
use crate::sym;
use crate::sym::SymExpr;

/// How strictly a fill value is checked against a floating-point type's range.
#[derive(Copy, Clone, PartialEq, Eq)]
pub(super) enum FillCheck {
    /// As `fill_` and the factories: against the type the kernel fills in (`f32` for `f16` and
    /// `bf16`, whose overflow then rounds to infinity).
    Opmath,
    /// As `masked_fill`: against the element type itself.
    Element,
}

/// PyTorch's check when a fill value becomes an element of `dtype` (`c10::checked_convert`):
/// NaN, an infinity, or a value out of range for an integer type, and a finite value beyond a
/// float type's largest, are "value cannot be converted to type T without overflow". Negative
/// integers fit an unsigned type while their magnitude does (`-1` fills `uint8` with 255), and a
/// float fits an integer type while it truncates into range.
pub(super) fn check_fill_value(cx: &Cx<'_>, value: Scalar, dtype: DType, check: FillCheck) -> Result<()> {
    let (name, overflows) = match dtype {
        DType::Bool | DType::C128 => return Ok(()),
        // Complex fills check the real value against the parts' type: `complex<Half>` as the
        // element, `complex<float>` as the op math of both.
        DType::C32 | DType::C64 => {
            let (name, max) = match (dtype, check) {
                (DType::C32, FillCheck::Element) => ("c10::complex<c10::Half>", 65504.0),
                _ => ("c10::complex<float>", f64::from(f32::MAX)),
            };
            let value = value.as_f64();
            (name, value.is_finite() && value.abs() > max)
        }
        _ if dtype.is_float() => {
            let (name, max) = match (dtype, check) {
                (DType::F64, _) => ("double", f64::MAX),
                (DType::F16, FillCheck::Element) => ("c10::Half", 65504.0),
                (DType::BF16, FillCheck::Element) => ("c10::BFloat16", 3.389_531_389_251_535e38),
                _ => ("float", f64::from(f32::MAX)),
            };
            let value = value.as_f64();
            (name, value.is_finite() && value.abs() > max)
        }
        _ => {
            let (name, min, max): (&str, i128, i128) = match dtype {
                DType::I64 => ("int64_t", i64::MIN.into(), i64::MAX.into()),
                DType::I32 => ("int", i32::MIN.into(), i32::MAX.into()),
                DType::I16 => ("int16_t", i16::MIN.into(), i16::MAX.into()),
                DType::I8 => ("int8_t", i8::MIN.into(), i8::MAX.into()),
                DType::U8 => ("uint8_t", 0, u8::MAX.into()),
                DType::U16 => ("uint16_t", 0, u16::MAX.into()),
                DType::U32 => ("uint32_t", 0, u32::MAX.into()),
                DType::U64 => ("uint64_t", 0, u64::MAX.into()),
                _ => return Ok(()),
            };
            let overflows = match value {
                Scalar::Bool(_) => false,
                Scalar::Int(v) => {
                    let v = i128::from(v);
                    v > max || if min == 0 { -v > max } else { v < min }
                }
                // `max + 1` is exact in f64 for every integer type (a power of two).
                Scalar::Float(f) => !f.is_finite() || f < min as f64 || f >= max as f64 + 1.0,
            };
            (name, overflows)
        }
    };
    if overflows {
        return Err(cx.bad(format!("value cannot be converted to type {name} without overflow")));
    }
    Ok(())
}

/// `full(size, fill_value)`.
pub(super) fn full(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let shape = cx.shape_of(&args.sym_ints("size")?)?;
    let value = args.scalar("fill_value")?;
    let dtype = args.opt_dtype("dtype")?.unwrap_or(scalar_dtype(value));
    check_fill_value(cx, value, dtype, FillCheck::Opmath)?;
    tensor(cx.splat(dtype, value, &shape)?)
}

/// `full_like(self, fill_value)`.
pub(super) fn full_like(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let like = cx.ty(args.tensor("self")?);
    let value = args.scalar("fill_value")?;
    let dtype = args.opt_dtype("dtype")?.unwrap_or(like.dtype);
    check_fill_value(cx, value, dtype, FillCheck::Opmath)?;
    tensor(cx.splat(dtype, value, &like.shape)?)
}

/// `zeros` / `ones` / `empty.memory_format` / `empty_strided`.
pub(super) fn filled(cx: &mut Cx<'_>, args: &Args, value: i64) -> Result<Imported> {
    let shape = cx.shape_of(&args.sym_ints("size")?)?;
    let dtype = args.opt_dtype("dtype")?.unwrap_or(DEFAULT_FLOAT);
    tensor(cx.splat(dtype, Scalar::Int(value), &shape)?)
}

/// `zeros_like` / `ones_like` / `empty_like`.
pub(super) fn filled_like(cx: &mut Cx<'_>, args: &Args, value: i64) -> Result<Imported> {
    let like = cx.ty(args.tensor("self")?);
    let dtype = args.opt_dtype("dtype")?.unwrap_or(like.dtype);
    tensor(cx.splat(dtype, Scalar::Int(value), &like.shape)?)
}

/// `new_zeros` / `new_ones` / `new_empty`: `self`'s dtype, the given size.
pub(super) fn new_filled(cx: &mut Cx<'_>, args: &Args, value: i64) -> Result<Imported> {
    let like = cx.dtype(args.tensor("self")?);
    let shape = cx.shape_of(&args.sym_ints("size")?)?;
    let dtype = args.opt_dtype("dtype")?.unwrap_or(like);
    tensor(cx.splat(dtype, Scalar::Int(value), &shape)?)
}

/// `new_full(self, size, fill_value)`.
pub(super) fn new_full(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let like = cx.dtype(args.tensor("self")?);
    let shape = cx.shape_of(&args.sym_ints("size")?)?;
    let value = args.scalar("fill_value")?;
    let dtype = args.opt_dtype("dtype")?.unwrap_or(like);
    check_fill_value(cx, value, dtype, FillCheck::Opmath)?;
    tensor(cx.splat(dtype, value, &shape)?)
}

/// `scalar_tensor(s)`: a zero-dim tensor, the default float dtype unless given.
pub(super) fn scalar_tensor(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let value = args.scalar("s")?;
    let dtype = args.opt_dtype("dtype")?.unwrap_or(DEFAULT_FLOAT);
    check_fill_value(cx, value, dtype, FillCheck::Opmath)?;
    tensor(cx.splat(dtype, value, &Shape::scalar())?)
}

/// `arange(end)`, `arange(start, end)`, `arange(start, end, step)`.
pub(super) fn arange(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    if let Some(end) = args.opt_sym_int("end").filter(|end| !matches!(end, SymExpr::Int(_))) {
        return arange_symbolic(cx, args, end);
    }
    let start = if args.has_param("start") { args.scalar("start")? } else { Scalar::Int(0) };
    let end = args.scalar("end")?;
    let step = if args.has_param("step") { args.scalar_or("step", Scalar::Int(1))? } else { Scalar::Int(1) };
    let all_int = [start, end, step].iter().all(|value| !matches!(value, Scalar::Float(_)));
    let dtype = args.opt_dtype("dtype")?.unwrap_or(if all_int { DType::I64 } else { DEFAULT_FLOAT });
    let (first, last, stride) = (start.as_f64(), end.as_f64(), step.as_f64());
    if stride == 0.0 || !first.is_finite() || !last.is_finite() || !stride.is_finite() {
        return Err(cx.bad(format!("arange({start}, {end}, {step}) needs a finite range and a nonzero step")));
    }
    let length = ((last - first) / stride).ceil();
    if length < 0.0 {
        return Err(cx.bad(format!("arange({start}, {end}, {step}): the step's sign does not match the range")));
    }
    let length = length as i64;
    range_values(cx, dtype, Shape::from_static(&[length]), start, step, all_int)
}

/// `arange` whose `end` is a symbolic int (`arange(x.size(1))`, as Hugging Face models build
/// position ids): the length becomes a symbolic dim, which needs int literals for `start` and
/// `step`; anything else is only known once the symbols have values.
fn arange_symbolic(cx: &mut Cx<'_>, args: &Args, end: SymExpr) -> Result<Imported> {
    let literal = |name: &str, default: i64| -> Result<i64> {
        if !args.has_param(name) || !args.given(name) {
            return Ok(default);
        }
        match args.opt_sym_int(name) {
            Some(SymExpr::Int(value)) => Ok(value),
            _ => Err(cx.site.dynamic(format!(
                "arange with the symbolic end {} needs an int literal `{name}`; give its symbols values",
                sym::Show(&end)
            ))),
        }
    };
    let (start, step) = (literal("start", 0)?, literal("step", 1)?);
    if step == 0 {
        return Err(cx.bad(format!("arange({start}, {}, 0) needs a nonzero step", sym::Show(&end))));
    }
    // ceil((end - start) / step) as Python's floor division: (end - start + step - 1) // step
    // for a positive step, (start - end - step - 1) // -step for a negative one. Identity parts
    // are left out so the common `arange(s)` stays the bare symbol `s`.
    let (span, divisor) = if step > 0 {
        let span = if start == 0 { end } else { SymExpr::Sub(Box::new(end), Box::new(SymExpr::Int(start))) };
        (span, step)
    } else {
        (SymExpr::Sub(Box::new(SymExpr::Int(start)), Box::new(end)), -step)
    };
    let length = if divisor == 1 {
        span
    } else {
        SymExpr::FloorDiv(
            Box::new(SymExpr::Add(Box::new(span), Box::new(SymExpr::Int(divisor - 1)))),
            Box::new(SymExpr::Int(divisor)),
        )
    };
    let dim = cx.dim_of(&length)?;
    let dtype = args.opt_dtype("dtype")?.unwrap_or(DType::I64);
    range_values(cx, dtype, [dim].into_iter().collect(), Scalar::Int(start), Scalar::Int(step), true)
}

/// `start + i * step` for `i` along the one dim of `shape`, of `dtype`.
pub(super) fn range_values(
    cx: &mut Cx<'_>,
    dtype: DType,
    shape: Shape,
    start: Scalar,
    step: Scalar,
    all_int: bool,
) -> Result<Imported> {
    if start.as_f64() == 0.0 && step.as_f64() == 1.0 {
        let iota = cx.b.iota(TensorType::new(dtype, shape), 0);
        return tensor(cx.ok(iota)?);
    }
    // In i64 when everything is an integer, else in f64 as PyTorch's CPU kernel computes it,
    // then one conversion to the result dtype.
    let compute = if all_int { DType::I64 } else { DType::F64 };
    let iota = cx.b.iota(TensorType::new(compute, shape), 0);
    let mut values = cx.ok(iota)?;
    if step.as_f64() != 1.0 {
        values = cx.binary_scalar(BinaryOp::Multiply, values, step)?;
    }
    if start.as_f64() != 0.0 {
        values = cx.binary_scalar(BinaryOp::Add, values, start)?;
    }
    tensor(cx.convert(values, dtype)?)
}

/// `tril_indices` / `triu_indices(row, col, offset, *, dtype, ...)`: the `[2, N]` coordinates of
/// the lower (upper) triangle of a `row × col` matrix, row-major, as a constant.
pub(super) fn triangle_indices(cx: &mut Cx<'_>, args: &Args, lower: bool) -> Result<Imported> {
    let (rows, cols) = (args.int("row")?, args.int("col")?);
    let offset = args.int_or("offset", 0)?;
    let dtype = args.opt_dtype("dtype")?.unwrap_or(DType::I64);
    if rows < 0 || cols < 0 {
        return Err(cx.bad(format!("row and col must be non-negative, found {rows} and {cols}")));
    }
    if !matches!(dtype, DType::I64 | DType::I32) {
        return Err(cx.bad(format!("indices are int64 or int32, found {dtype}")));
    }
    // At most rows * cols coordinates: refuse what would not fit in memory rather than build it.
    let cells = rows
        .checked_mul(cols)
        .filter(|&cells| cells <= 1 << 24)
        .ok_or_else(|| cx.bad(format!("a {rows} x {cols} triangle is too large to hold as a constant")))?;
    let (mut first, mut second) = (Vec::new(), Vec::new());
    for r in 0..rows {
        for c in 0..cols {
            let inside = if lower { c - r <= offset } else { c - r >= offset };
            if inside {
                first.push(Scalar::Int(r));
                second.push(Scalar::Int(c));
            }
        }
    }
    debug_assert!(first.len() as i64 <= cells);
    let count = first.len() as i64;
    first.extend(second);
    let literal = Literal::from_scalars(dtype, &[2, count], &first).map_err(|error| cx.bad(format!("{error:?}")))?;
    tensor(cx.literal(literal))
}
