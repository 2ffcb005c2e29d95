//! Elementwise arithmetic, math, comparisons, selection and bitwise/logical ops.
//!
//! All follow the same shape: promote the operands with PyTorch's rules (`Cx::result_type`),
//! convert and broadcast them explicitly, apply the IR op. For `f16`/`bf16` results the math runs
//! in `f32` where PyTorch's CPU kernels do ("opmath": transcendental functions, and arithmetic with
//! a Python scalar or zero-dim operand, which PyTorch reads at full precision).

use ttpu_ir::{BinaryOp, CompareDirection, DType, Scalar, UnaryOp, ValueId};

use crate::args::Args;
use crate::ctx::{Cx, Imported, Operand, opmath};
use crate::error::Result;
use crate::promote::DEFAULT_FLOAT;

/// Wraps a tensor result.
pub(super) fn tensor(value: ValueId) -> Result<Imported> {
    Ok(Imported::Tensor(value))
}

/// The dtype arithmetic of result `dtype` computes in when a scalar (a Python number, a zero-dim
/// tensor or `alpha`) takes part: its op math, except for `complex32`, whose CPU kernels convert
/// the scalar to `complex32` and round each product before a sum (`add(z, u, alpha=0.3)` is
/// `z + round(u * half(0.3))`), which computing in `c32` reproduces.
fn scalar_opmath(dtype: DType) -> DType {
    if dtype == DType::C32 { dtype } else { opmath(dtype) }
}

/// `lhs op rhs` computed as PyTorch would for result dtype `dtype`.
pub(super) fn arith_in(cx: &mut Cx<'_>, op: BinaryOp, lhs: Operand, rhs: Operand, dtype: DType) -> Result<ValueId> {
    let scalar_like = cx.is_scalar_like(lhs) || cx.is_scalar_like(rhs);
    let compute = if scalar_like { scalar_opmath(dtype) } else { dtype };
    let [x, y] = cx.prepare([lhs, rhs], compute)?;
    let result = cx.binary(op, x, y)?;
    cx.convert(result, dtype)
}

/// `lhs op rhs` with PyTorch's promotion.
pub(super) fn arith(cx: &mut Cx<'_>, op: BinaryOp, lhs: Operand, rhs: Operand) -> Result<ValueId> {
    let dtype = cx.result_type(&[lhs, rhs]);
    if dtype.is_bool() && matches!(op, BinaryOp::Subtract | BinaryOp::Divide | BinaryOp::Power | BinaryOp::Remainder) {
        return Err(cx.bad(format!("`{}` is not defined for bool tensors", op.mnemonic())));
    }
    arith_in(cx, op, lhs, rhs, dtype)
}

/// `self op other` for the `self, other` overloads.
pub(super) fn arith_args(cx: &mut Cx<'_>, args: &Args, op: BinaryOp) -> Result<Imported> {
    let result = arith(cx, op, args.operand("self")?, args.operand("other")?)?;
    tensor(result)
}

/// `add`/`sub`: `self ± alpha * other`.
pub(super) fn add_sub(cx: &mut Cx<'_>, args: &Args, op: BinaryOp) -> Result<Imported> {
    let (lhs, rhs) = (args.operand("self")?, args.operand("other")?);
    let alpha = args.scalar_or("alpha", Scalar::Int(1))?;
    tensor(add_scaled(cx, op, lhs, rhs, alpha)?)
}

/// `lhs op alpha * rhs` with `op` add or subtract, checking `alpha` like PyTorch.
fn add_scaled(cx: &mut Cx<'_>, op: BinaryOp, lhs: Operand, rhs: Operand, alpha: Scalar) -> Result<ValueId> {
    let dtype = cx.result_type(&[lhs, rhs]);
    if op == BinaryOp::Subtract && dtype.is_bool() {
        return Err(cx.bad("subtracting bool tensors is not supported; use `^` or logical_xor"));
    }
    if matches!(alpha, Scalar::Float(_)) && !dtype.is_float() && !dtype.is_complex() {
        return Err(cx.bad(format!("alpha must not be a float for a {dtype} result")));
    }
    if matches!(alpha, Scalar::Bool(_)) && !dtype.is_bool() {
        return Err(cx.bad(format!("a bool alpha needs a bool result, not {dtype}")));
    }
    let scaled = alpha.as_f64() != 1.0;
    let compute = if scaled || cx.is_scalar_like(lhs) || cx.is_scalar_like(rhs) { scalar_opmath(dtype) } else { dtype };
    let [x, mut y] = cx.prepare([lhs, rhs], compute)?;
    if scaled {
        y = cx.binary_scalar(BinaryOp::Multiply, y, alpha)?;
    }
    let result = cx.binary(op, x, y)?;
    cx.convert(result, dtype)
}

/// `rsub`: `other - alpha * self`.
pub(super) fn rsub(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (lhs, rhs) = (args.operand("self")?, args.operand("other")?);
    let alpha = args.scalar_or("alpha", Scalar::Int(1))?;
    tensor(add_scaled(cx, BinaryOp::Subtract, rhs, lhs, alpha)?)
}

/// `div` with `rounding_mode` None (true division), `trunc` or `floor`.
pub(super) fn div(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (lhs, rhs) = (args.operand("self")?, args.operand("other")?);
    let mode = if args.has_param("rounding_mode") { args.opt_str("rounding_mode")?.map(str::to_owned) } else { None };
    let dtype = cx.result_type(&[lhs, rhs]);
    let result = match mode.as_deref() {
        None => {
            // True division of integers gives the default float dtype; complex stays complex.
            let out = if dtype.is_float() || dtype.is_complex() { dtype } else { DEFAULT_FLOAT };
            arith_in(cx, BinaryOp::Divide, lhs, rhs, out)?
        }
        Some("trunc") => {
            if dtype.is_bool() {
                return Err(cx.bad("trunc division is not defined for bool tensors"));
            }
            let quotient = arith_in(cx, BinaryOp::Divide, lhs, rhs, dtype)?;
            // Integer division already truncates; float quotients are truncated explicitly.
            if dtype.is_float() { trunc(cx, quotient)? } else { quotient }
        }
        Some("floor") => floor_div(cx, lhs, rhs, dtype)?,
        Some(other) => {
            return Err(cx.bad(format!("rounding_mode must be None, 'trunc' or 'floor', found '{other}'")));
        }
    };
    tensor(result)
}

/// `floor_divide`: division rounding toward negative infinity.
pub(super) fn floor_divide(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (lhs, rhs) = (args.operand("self")?, args.operand("other")?);
    let dtype = cx.result_type(&[lhs, rhs]);
    tensor(floor_div(cx, lhs, rhs, dtype)?)
}

/// Floor division as PyTorch's CPU kernels compute it, in `dtype`.
fn floor_div(cx: &mut Cx<'_>, lhs: Operand, rhs: Operand, dtype: DType) -> Result<ValueId> {
    if dtype.is_bool() {
        return Err(cx.bad("floor division is not defined for bool tensors"));
    }
    let compute = opmath(dtype);
    let [a, b] = cx.prepare([lhs, rhs], compute)?;
    let quotient = cx.binary(BinaryOp::Divide, a, b)?;
    let remainder = cx.binary(BinaryOp::Remainder, a, b)?;
    let zero = cx.splat_like(a, Scalar::Int(0))?;
    let one = cx.splat_like(a, Scalar::Int(1))?;
    // Round toward -inf when the remainder is nonzero and its sign differs from the divisor's.
    let remainder_nonzero = cx.compare(CompareDirection::Ne, remainder, zero)?;
    let remainder_negative = cx.compare(CompareDirection::Lt, remainder, zero)?;
    let divisor_negative = cx.compare(CompareDirection::Lt, b, zero)?;
    let signs_differ = cx.compare(CompareDirection::Ne, remainder_negative, divisor_negative)?;
    let adjust = cx.binary(BinaryOp::And, remainder_nonzero, signs_differ)?;
    if !compute.is_float() {
        let lowered = cx.binary(BinaryOp::Subtract, quotient, one)?;
        return cx.select(adjust, lowered, quotient);
    }
    // PyTorch's `div_floor_floating`: divide the exact multiple, adjust, then snap to an integer,
    // keeping the sign of zero quotients and plain division by zero.
    let exact = cx.binary(BinaryOp::Subtract, a, remainder)?;
    let div = cx.binary(BinaryOp::Divide, exact, b)?;
    let lowered = cx.binary(BinaryOp::Subtract, div, one)?;
    let div = cx.select(adjust, lowered, div)?;
    let floored = cx.unary(UnaryOp::Floor, div)?;
    let fraction = cx.binary(BinaryOp::Subtract, div, floored)?;
    let half = cx.splat_like(a, Scalar::Float(0.5))?;
    let round_up = cx.compare(CompareDirection::Gt, fraction, half)?;
    let raised = cx.binary(BinaryOp::Add, floored, one)?;
    let snapped = cx.select(round_up, raised, floored)?;
    let signed_zero = cx.binary(BinaryOp::Multiply, quotient, zero)?;
    let div_nonzero = cx.compare(CompareDirection::Ne, div, zero)?;
    let result = cx.select(div_nonzero, snapped, signed_zero)?;
    let divisor_zero = cx.compare(CompareDirection::Eq, b, zero)?;
    let result = cx.select(divisor_zero, quotient, result)?;
    cx.convert(result, dtype)
}

/// `remainder`: Python's modulo (the result has the divisor's sign).
pub(super) fn remainder(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (lhs, rhs) = (args.operand("self")?, args.operand("other")?);
    let dtype = cx.result_type(&[lhs, rhs]);
    if dtype.is_bool() {
        return Err(cx.bad("remainder is not defined for bool tensors"));
    }
    let [a, b] = cx.prepare([lhs, rhs], opmath(dtype))?;
    let built = ttpu_torch::decomp::python_remainder(&mut cx.b, a, b);
    let result = cx.ok(built)?;
    tensor(cx.convert(result, dtype)?)
}

/// `fmod`: C's remainder (the result has the dividend's sign).
pub(super) fn fmod(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let result = arith(cx, BinaryOp::Remainder, args.operand("self")?, args.operand("other")?)?;
    tensor(result)
}

/// `atan2`, in floats.
pub(super) fn atan2(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (lhs, rhs) = (args.operand("self")?, args.operand("other")?);
    let dtype = cx.result_type(&[lhs, rhs]);
    let out = if dtype.is_float() { dtype } else { DEFAULT_FLOAT };
    let [a, b] = cx.prepare([lhs, rhs], opmath(out))?;
    let result = cx.binary(BinaryOp::Atan2, a, b)?;
    tensor(cx.convert(result, out)?)
}

/// `pow` in all three overloads (tensor or scalar base and exponent).
pub(super) fn pow(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (base, exponent) = (args.operand("self")?, args.operand("exponent")?);
    let dtype = cx.result_type(&[base, exponent]);
    if let (Operand::Tensor(x), Operand::Scalar(e)) = (base, exponent) {
        if !dtype.is_float() && e.as_f64() < 0.0 {
            return Err(cx.bad("integers to negative integer powers are not allowed"));
        }
        // PyTorch's CPU kernel special-cases these exponents; matching it keeps results bit-close.
        let special = [0.0, 1.0, 2.0, 3.0, 0.5, -0.5, -1.0, -2.0];
        let value = e.as_f64();
        if special.contains(&value) && (dtype.is_float() || value >= 0.0) {
            let compute = opmath(dtype);
            let x = cx.convert(x, compute)?;
            let result = match value {
                0.0 => cx.splat_like(x, Scalar::Int(1))?,
                1.0 => x,
                2.0 | -2.0 => cx.binary(BinaryOp::Multiply, x, x)?,
                3.0 => {
                    let square = cx.binary(BinaryOp::Multiply, x, x)?;
                    cx.binary(BinaryOp::Multiply, square, x)?
                }
                0.5 => cx.unary(UnaryOp::Sqrt, x)?,
                -0.5 => cx.unary(UnaryOp::Rsqrt, x)?,
                _ => x,
            };
            let result = if value == -1.0 || value == -2.0 {
                let one = cx.splat_like(result, Scalar::Int(1))?;
                cx.binary(BinaryOp::Divide, one, result)?
            } else {
                result
            };
            return tensor(cx.convert(result, dtype)?);
        }
    }
    if dtype.is_bool() {
        return Err(cx.bad("pow is not defined for bool tensors"));
    }
    tensor(arith_in(cx, BinaryOp::Power, base, exponent, dtype)?)
}

/// `neg`.
pub(super) fn neg(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    if cx.dtype(x).is_bool() {
        return Err(cx.bad("negation of a bool tensor is not supported; use logical_not"));
    }
    tensor(cx.unary(UnaryOp::Negate, x)?)
}

/// `abs` (bool is its own absolute value).
pub(super) fn abs(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    // Unsigned values are their own magnitude (StableHLO's `abs` takes signed types only).
    if cx.dtype(x).is_bool() || (cx.dtype(x).is_integer() && !cx.dtype(x).is_signed_integer()) {
        return tensor(x);
    }
    tensor(cx.unary(UnaryOp::Abs, x)?)
}

/// `sign`: -1, 0 or 1 in the input's dtype. Floats are `(x > 0) - (x < 0)`, as PyTorch computes
/// them, so NaN and `-0.0` give `+0.0`; StableHLO's `sign` would keep both.
pub(super) fn sign(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    refuse_complex(cx, x, "sign (torch.sgn is the complex one)")?;
    let dtype = cx.dtype(x);
    if dtype.is_bool() {
        return tensor(x);
    }
    if dtype.is_signed_integer() {
        return tensor(cx.unary(UnaryOp::Sign, x)?);
    }
    let zero = cx.splat_like(x, Scalar::Int(0))?;
    if !dtype.is_float() {
        // Unsigned: 1 where nonzero.
        let nonzero = cx.compare(CompareDirection::Ne, x, zero)?;
        return tensor(cx.convert(nonzero, dtype)?);
    }
    let positive = cx.compare(CompareDirection::Gt, x, zero)?;
    let negative = cx.compare(CompareDirection::Lt, x, zero)?;
    let positive = cx.convert(positive, dtype)?;
    let negative = cx.convert(negative, dtype)?;
    tensor(cx.binary(BinaryOp::Subtract, positive, negative)?)
}

/// `reciprocal`: `1 / x`, in floats.
pub(super) fn reciprocal(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let result =
        arith_in(cx, BinaryOp::Divide, Operand::Scalar(Scalar::Int(1)), Operand::Tensor(x), float_dtype(cx, x))?;
    tensor(result)
}

/// The dtype float math on `x` produces: its own if float, else the default float dtype.
pub(super) fn float_dtype(cx: &Cx<'_>, x: ValueId) -> DType {
    let dtype = cx.dtype(x);
    // Complex inputs stay complex: StableHLO computes the complex functions itself.
    if dtype.is_float() || dtype.is_complex() { dtype } else { DEFAULT_FLOAT }
}

/// PyTorch's refusal of an op that has no meaning for complex numbers, where the op would
/// otherwise pass a non-float tensor through unchanged.
fn refuse_complex(cx: &Cx<'_>, x: ValueId, what: &str) -> Result<()> {
    let ty = cx.ty(x);
    if ty.dtype.is_complex() {
        return Err(cx.bad(format!("{what} is not supported for complex inputs, found {ty}")));
    }
    Ok(())
}

/// A float unary op; integer and bool inputs give the default float dtype, half types compute in
/// `f32` like PyTorch.
pub(super) fn float_unary(cx: &mut Cx<'_>, args: &Args, op: UnaryOp) -> Result<Imported> {
    let x = args.tensor("self")?;
    tensor(apply_float(cx, x, |cx, x| cx.unary(op, x))?)
}

/// Applies `f` to `x` in the opmath dtype of its float result type and converts back.
pub(super) fn apply_float(
    cx: &mut Cx<'_>,
    x: ValueId,
    f: impl FnOnce(&mut Cx<'_>, ValueId) -> Result<ValueId>,
) -> Result<ValueId> {
    let out = float_dtype(cx, x);
    let compute = cx.convert(x, opmath(out))?;
    let result = f(cx, compute)?;
    cx.convert(result, out)
}

/// `exp2`: `2^x`.
pub(super) fn exp2(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    tensor(apply_float(cx, x, |cx, x| {
        let two = cx.splat_like(x, Scalar::Int(2))?;
        cx.binary(BinaryOp::Power, two, x)
    })?)
}

/// `log2` / `log10`: `ln(x) / ln(base)`.
pub(super) fn log_base(cx: &mut Cx<'_>, args: &Args, ln_base: f64) -> Result<Imported> {
    let x = args.tensor("self")?;
    tensor(apply_float(cx, x, |cx, x| {
        let ln = cx.unary(UnaryOp::Log, x)?;
        cx.binary_scalar(BinaryOp::Divide, ln, Scalar::Float(ln_base))
    })?)
}

/// `erf`, through the IR's shared composite (eager tensors build the same nodes).
pub(super) fn erf_op(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    tensor(apply_float(cx, x, |cx, x| {
        let built = ttpu_ir::composite::erf(&mut cx.b, x);
        cx.ok(built)
    })?)
}

/// `floor`/`ceil`/`round`: identity on integers.
pub(super) fn rounding(cx: &mut Cx<'_>, args: &Args, op: UnaryOp) -> Result<Imported> {
    let x = args.tensor("self")?;
    refuse_complex(cx, x, "rounding")?;
    if !cx.dtype(x).is_float() {
        return tensor(x);
    }
    tensor(cx.unary(op, x)?)
}

/// `round(x, decimals=d)`: `round(x * 10^d) / 10^d` (halves to even), as PyTorch does.
pub(super) fn round_decimals(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let decimals = args.int_or("decimals", 0)?;
    refuse_complex(cx, x, "rounding")?;
    if !cx.dtype(x).is_float() {
        return tensor(x);
    }
    if decimals == 0 {
        return tensor(cx.unary(UnaryOp::RoundNearestEven, x)?);
    }
    let exponent = i32::try_from(decimals.abs()).map_err(|_| cx.bad(format!("decimals {decimals} is too large")))?;
    let scale = 10f64.powi(exponent);
    tensor(apply_float(cx, x, |cx, x| {
        // Negative decimals round to tens, hundreds...: divide first, multiply after.
        let (first, second) =
            if decimals > 0 { (BinaryOp::Multiply, BinaryOp::Divide) } else { (BinaryOp::Divide, BinaryOp::Multiply) };
        let scaled = cx.binary_scalar(first, x, Scalar::Float(scale))?;
        let rounded = cx.unary(UnaryOp::RoundNearestEven, scaled)?;
        cx.binary_scalar(second, rounded, Scalar::Float(scale))
    })?)
}

/// `trunc`: rounds toward zero.
pub(super) fn trunc_op(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    refuse_complex(cx, x, "rounding")?;
    if !cx.dtype(x).is_float() {
        return tensor(x);
    }
    tensor(trunc(cx, x)?)
}

/// Rounds a float tensor toward zero: `ceil` below zero, `floor` otherwise.
pub(super) fn trunc(cx: &mut Cx<'_>, x: ValueId) -> Result<ValueId> {
    let zero = cx.splat_like(x, Scalar::Int(0))?;
    let negative = cx.compare(CompareDirection::Lt, x, zero)?;
    let up = cx.unary(UnaryOp::Ceil, x)?;
    let down = cx.unary(UnaryOp::Floor, x)?;
    cx.select(negative, up, down)
}

/// `clamp`, `clamp_min`, `clamp_max` (scalar or tensor bounds, either may be `None`).
pub(super) fn clamp(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let bound = |name: &str| -> Result<Option<Operand>> {
        if args.has_param(name) && args.given(name) { args.operand(name).map(Some) } else { Ok(None) }
    };
    let (min, max) = (bound("min")?, bound("max")?);
    if min.is_none() && max.is_none() {
        return Err(cx.bad("at least one of `min` and `max` must not be None"));
    }
    let mut operands = vec![Operand::Tensor(x)];
    operands.extend(min);
    operands.extend(max);
    let dtype = cx.result_type(&operands);
    let mut result = cx.convert(x, dtype)?;
    // max then min: a NaN input stays NaN, and min > max gives max, as in PyTorch.
    for (bound, op) in [(min, BinaryOp::Maximum), (max, BinaryOp::Minimum)] {
        if let Some(bound) = bound {
            result = arith_in(cx, op, Operand::Tensor(result), bound, dtype)?;
        }
    }
    tensor(result)
}

/// Comparisons: promote to a common dtype, compare, bool result.
pub(super) fn compare(cx: &mut Cx<'_>, args: &Args, direction: CompareDirection) -> Result<Imported> {
    let (lhs, rhs) = (args.operand("self")?, args.operand("other")?);
    let dtype = cx.result_type(&[lhs, rhs]);
    let [x, y] = cx.prepare([lhs, rhs], dtype)?;
    tensor(cx.compare(direction, x, y)?)
}

/// `isnan`: `x != x`.
pub(super) fn isnan(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    // A complex `z != z` holds when either part is NaN, which is PyTorch's complex `isnan`.
    if !cx.dtype(x).is_float() && !cx.dtype(x).is_complex() {
        return tensor(cx.splat(ttpu_ir::DType::Bool, Scalar::Bool(false), &cx.shape(x))?);
    }
    tensor(cx.compare(CompareDirection::Ne, x, x)?)
}

/// A tensor as bool (`x != 0`).
pub(super) fn to_bool(cx: &mut Cx<'_>, x: ValueId) -> Result<ValueId> {
    if cx.dtype(x).is_bool() {
        return Ok(x);
    }
    let zero = cx.splat_like(x, Scalar::Int(0))?;
    cx.compare(CompareDirection::Ne, x, zero)
}

/// `where(condition, self, other)` with tensor or scalar branches.
pub(super) fn where_(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let condition = args.tensor("condition")?;
    let (on_true, on_false) = (args.operand("self")?, args.operand("other")?);
    let dtype = cx.result_type(&[on_true, on_false]);
    let condition = to_bool(cx, condition)?;
    tensor(select_promoted(cx, condition, on_true, on_false, dtype)?)
}

/// `select` after converting both branches to `dtype` and broadcasting all three.
fn select_promoted(
    cx: &mut Cx<'_>,
    condition: ValueId,
    on_true: Operand,
    on_false: Operand,
    dtype: DType,
) -> Result<ValueId> {
    let [x, y] = cx.prepare([on_true, on_false], dtype)?;
    let [condition, x, y] = cx.broadcast_all([condition, x, y])?;
    cx.select(condition, x, y)
}

/// `masked_fill(self, mask, value)`: keeps `self`'s dtype and shape.
pub(super) fn masked_fill(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let mask = to_bool(cx, args.tensor("mask")?)?;
    let value = args.operand("value")?;
    if let Operand::Tensor(value) = value
        && cx.rank(value) != 0
    {
        return Err(cx.bad("masked_fill only supports a zero-dim value tensor"));
    }
    let dtype = cx.dtype(x);
    if let Operand::Scalar(value) = value {
        super::creation::check_fill_value(cx, value, dtype, super::creation::FillCheck::Element)?;
    }
    let result = select_promoted(cx, mask, value, Operand::Tensor(x), dtype)?;
    if cx.shape(result) != cx.shape(x) {
        return Err(cx.bad(format!("mask {} does not broadcast to {}", cx.ty(mask), cx.ty(x))));
    }
    tensor(result)
}

/// `bitwise_and/or/xor` on integers and bools.
pub(super) fn bitwise(cx: &mut Cx<'_>, args: &Args, op: BinaryOp) -> Result<Imported> {
    let (lhs, rhs) = (args.operand("self")?, args.operand("other")?);
    let dtype = cx.result_type(&[lhs, rhs]);
    if dtype.is_float() {
        return Err(cx.bad(format!("`{}` is only defined for integer and bool tensors", op.mnemonic())));
    }
    tensor(arith_in(cx, op, lhs, rhs, dtype)?)
}

/// `bitwise_left_shift` / `bitwise_right_shift` (and `__lshift__` / `__rshift__`) on integers,
/// as PyTorch's CPU kernels: a shift by a negative amount or by the bit width or more gives 0 to
/// the left and the sign fill to the right (0 for unsigned types), which is StableHLO's
/// `shift_left`, `shift_right_arithmetic` (signed) and `shift_right_logical` (unsigned).
pub(super) fn shift(cx: &mut Cx<'_>, args: &Args, left: bool) -> Result<Imported> {
    let (lhs, rhs) = (args.operand("self")?, args.operand("other")?);
    let dtype = cx.result_type(&[lhs, rhs]);
    if dtype.is_float() || dtype == DType::Bool {
        return Err(cx.bad(format!("shifts are defined for integer tensors, found {dtype}")));
    }
    let op = match (left, dtype) {
        (true, _) => BinaryOp::ShiftLeft,
        (false, DType::U8 | DType::U64) => BinaryOp::ShiftRightLogical,
        (false, _) => BinaryOp::ShiftRightArithmetic,
    };
    tensor(arith_in(cx, op, lhs, rhs, dtype)?)
}

/// `bitwise_not` on integers and bools.
pub(super) fn bitwise_not(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    if cx.dtype(x).is_float() {
        return Err(cx.bad("bitwise_not is only defined for integer and bool tensors"));
    }
    tensor(cx.unary(UnaryOp::Not, x)?)
}

/// `logical_and/or/xor`: both sides as bool, bool result.
pub(super) fn logical(cx: &mut Cx<'_>, args: &Args, op: BinaryOp) -> Result<Imported> {
    let lhs = to_bool(cx, args.tensor("self")?)?;
    let rhs = to_bool(cx, args.tensor("other")?)?;
    tensor(cx.binary_bcast(op, lhs, rhs)?)
}

/// `logical_not`.
pub(super) fn logical_not(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = to_bool(cx, args.tensor("self")?)?;
    tensor(cx.unary(UnaryOp::Not, x)?)
}

/// The inverse trigonometric and hyperbolic functions, which the IR lacks, as formulas.
#[derive(Copy, Clone, Debug)]
pub(super) enum Inverse {
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Asinh,
    Acosh,
    Atanh,
}

/// `asin`/`acos`/`atan`/`sinh`/`cosh`/`asinh`/`acosh`/`atanh` through `atan2`, `expm1`, `log1p`
/// and `sqrt`, in forms that stay accurate near zero (and near one for `acosh`).
pub(super) fn inverse_trig(cx: &mut Cx<'_>, args: &Args, function: Inverse) -> Result<Imported> {
    let x = args.tensor("self")?;
    tensor(apply_float(cx, x, |cx, x| {
        let one = cx.splat_like(x, Scalar::Int(1))?;
        // sqrt((1 - x)(1 + x)), accurate near |x| = 1.
        let cosine_of = |cx: &mut Cx<'_>| -> Result<ValueId> {
            let minus = cx.binary(BinaryOp::Subtract, one, x)?;
            let plus = cx.binary(BinaryOp::Add, one, x)?;
            let product = cx.binary(BinaryOp::Multiply, minus, plus)?;
            cx.unary(UnaryOp::Sqrt, product)
        };
        match function {
            Inverse::Asin => {
                let c = cosine_of(cx)?;
                cx.binary(BinaryOp::Atan2, x, c)
            }
            Inverse::Acos => {
                let s = cosine_of(cx)?;
                cx.binary(BinaryOp::Atan2, s, x)
            }
            Inverse::Atan => cx.binary(BinaryOp::Atan2, x, one),
            Inverse::Sinh | Inverse::Cosh => {
                // (e^x ∓ e^-x) / 2 with expm1 keeps sinh accurate near zero.
                let negated = cx.unary(UnaryOp::Negate, x)?;
                let up = cx.unary(UnaryOp::ExponentialMinusOne, x)?;
                let down = cx.unary(UnaryOp::ExponentialMinusOne, negated)?;
                let combined = if matches!(function, Inverse::Sinh) {
                    cx.binary(BinaryOp::Subtract, up, down)?
                } else {
                    let sum = cx.binary(BinaryOp::Add, up, down)?;
                    let two = cx.splat_like(x, Scalar::Int(2))?;
                    cx.binary(BinaryOp::Add, sum, two)?
                };
                cx.binary_scalar(BinaryOp::Multiply, combined, Scalar::Float(0.5))
            }
            Inverse::Asinh => {
                // sign(x) * log1p(|x| + x² / (1 + sqrt(1 + x²))); log(2|x|) once x² overflows.
                let a = cx.unary(UnaryOp::Abs, x)?;
                let square = cx.binary(BinaryOp::Multiply, a, a)?;
                let root = cx.binary(BinaryOp::Add, one, square)?;
                let root = cx.unary(UnaryOp::Sqrt, root)?;
                let denominator = cx.binary(BinaryOp::Add, one, root)?;
                let fraction = cx.binary(BinaryOp::Divide, square, denominator)?;
                let sum = cx.binary(BinaryOp::Add, a, fraction)?;
                let small = cx.unary(UnaryOp::LogPlusOne, sum)?;
                let log = cx.unary(UnaryOp::Log, a)?;
                let large = cx.binary_scalar(BinaryOp::Add, log, Scalar::Float(std::f64::consts::LN_2))?;
                let big = cx.splat_like(x, Scalar::Float(1e18))?;
                let is_big = cx.compare(CompareDirection::Gt, a, big)?;
                let magnitude = cx.select(is_big, large, small)?;
                let sign = cx.unary(UnaryOp::Sign, x)?;
                let signed = cx.binary(BinaryOp::Multiply, sign, magnitude)?;
                // sign(0) * ... is 0 but loses -0 and NaN: keep x where the magnitude is zero.
                let zero = cx.splat_like(x, Scalar::Int(0))?;
                let is_zero = cx.compare(CompareDirection::Eq, magnitude, zero)?;
                cx.select(is_zero, x, signed)
            }
            Inverse::Acosh => {
                // log1p(t + sqrt(t (t + 2))) with t = x - 1; log(2x) once x² overflows.
                let t = cx.binary(BinaryOp::Subtract, x, one)?;
                let two = cx.splat_like(x, Scalar::Int(2))?;
                let t2 = cx.binary(BinaryOp::Add, t, two)?;
                let product = cx.binary(BinaryOp::Multiply, t, t2)?;
                let root = cx.unary(UnaryOp::Sqrt, product)?;
                let sum = cx.binary(BinaryOp::Add, t, root)?;
                let small = cx.unary(UnaryOp::LogPlusOne, sum)?;
                let log = cx.unary(UnaryOp::Log, x)?;
                let large = cx.binary_scalar(BinaryOp::Add, log, Scalar::Float(std::f64::consts::LN_2))?;
                let big = cx.splat_like(x, Scalar::Float(1e18))?;
                let is_big = cx.compare(CompareDirection::Gt, x, big)?;
                cx.select(is_big, large, small)
            }
            Inverse::Atanh => {
                // 0.5 * log1p(2x / (1 - x)).
                let minus = cx.binary(BinaryOp::Subtract, one, x)?;
                let twice = cx.binary(BinaryOp::Add, x, x)?;
                let ratio = cx.binary(BinaryOp::Divide, twice, minus)?;
                let log = cx.unary(UnaryOp::LogPlusOne, ratio)?;
                cx.binary_scalar(BinaryOp::Multiply, log, Scalar::Float(0.5))
            }
        }
    })?)
}

/// The signed integer type of a float's width: its bits compared `< 0` are the sign bit.
pub(super) fn same_width_int(dtype: DType) -> DType {
    match dtype.byte_size() {
        8 => DType::I64,
        4 => DType::I32,
        2 => DType::I16,
        _ => DType::I8,
    }
}

/// Whether each element's sign bit is set. Floats read it through a bitcast to the signed integer
/// of their width, so `-0.0` and a negative NaN (`0.0 / 0.0` on x86) count as negative, as in
/// PyTorch; integers are `x < 0`, bools never.
fn sign_bit(cx: &mut Cx<'_>, x: ValueId) -> Result<ValueId> {
    let dtype = cx.dtype(x);
    if dtype.is_bool() {
        return cx.splat(DType::Bool, Scalar::Bool(false), &cx.shape(x));
    }
    let bits = if dtype.is_float() { cx.bitcast_convert(x, same_width_int(dtype))? } else { x };
    let zero = cx.splat_like(bits, Scalar::Int(0))?;
    cx.compare(CompareDirection::Lt, bits, zero)
}

/// `signbit` (see [`sign_bit`]).
pub(super) fn signbit(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    tensor(sign_bit(cx, x)?)
}

/// `copysign` (tensor or scalar `other`): the bits of `self` but its sign bit, with the sign bit of
/// `other`, in floats. Done on the integer bits, so a NaN's sign moves both ways exactly (an
/// `abs`/`negate` pair would leave a NaN's sign to the backend).
pub(super) fn copysign(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (lhs, rhs) = (args.operand("self")?, args.operand("other")?);
    let dtype = cx.result_type(&[lhs, rhs]);
    let out = if dtype.is_float() { dtype } else { DEFAULT_FLOAT };
    let [magnitude, sign] = cx.prepare([lhs, rhs], out)?;
    let int = same_width_int(out);
    let bits = (8 * out.byte_size() - 1) as u32;
    // The sign bit alone, and every other bit: i64::MIN >> (63 - bits) sign-extends to the width.
    let sign_mask = Scalar::Int(i64::MIN >> (63 - bits));
    let magnitude_mask = Scalar::Int(!(i64::MIN >> (63 - bits)));
    let magnitude = cx.bitcast_convert(magnitude, int)?;
    let magnitude = cx.binary_scalar(BinaryOp::And, magnitude, magnitude_mask)?;
    let sign = cx.bitcast_convert(sign, int)?;
    let sign = cx.binary_scalar(BinaryOp::And, sign, sign_mask)?;
    let joined = cx.binary(BinaryOp::Or, magnitude, sign)?;
    tensor(cx.bitcast_convert(joined, out)?)
}

/// `ldexp(self, other)`: `self * 2.0 ** other`, the way PyTorch computes it (so with its type
/// promotion: an integer `other` makes the power the default float, and its overflow to `inf` is
/// PyTorch's too).
pub(super) fn ldexp(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (x, exponent) = (args.operand("self")?, args.operand("other")?);
    let two = Operand::Scalar(Scalar::Float(2.0));
    let power_dtype = cx.result_type(&[two, exponent]);
    let power = arith_in(cx, BinaryOp::Power, two, exponent, power_dtype)?;
    tensor(arith(cx, BinaryOp::Multiply, x, Operand::Tensor(power))?)
}

/// `isinf`: `|x| == inf` (never for integers and bools).
pub(super) fn isinf(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    if cx.dtype(x).is_complex() {
        // Either part infinite, part by part: the modulus of two large finite parts overflows.
        let (re, im) = (cx.b.real(x), cx.b.imag(x));
        let parts = [cx.ok(re)?, cx.ok(im)?];
        let mut infinite = Vec::with_capacity(2);
        for part in parts {
            let magnitude = cx.unary(UnaryOp::Abs, part)?;
            let infinity = cx.splat_like(part, Scalar::Float(f64::INFINITY))?;
            infinite.push(cx.compare(CompareDirection::Eq, magnitude, infinity)?);
        }
        return tensor(cx.binary(BinaryOp::Or, infinite[0], infinite[1])?);
    }
    if !cx.dtype(x).is_float() {
        return tensor(cx.splat(DType::Bool, Scalar::Bool(false), &cx.shape(x))?);
    }
    let magnitude = cx.unary(UnaryOp::Abs, x)?;
    let infinity = cx.splat_like(x, Scalar::Float(f64::INFINITY))?;
    tensor(cx.compare(CompareDirection::Eq, magnitude, infinity)?)
}

/// `maximum` / `minimum`: like PyTorch, a NaN in either operand gives NaN (XLA's CPU `maximum`
/// and `minimum` may return the other operand).
pub(super) fn max_min(cx: &mut Cx<'_>, args: &Args, op: BinaryOp) -> Result<Imported> {
    let (lhs, rhs) = (args.operand("self")?, args.operand("other")?);
    let dtype = cx.result_type(&[lhs, rhs]);
    let compute = if cx.is_scalar_like(lhs) || cx.is_scalar_like(rhs) { opmath(dtype) } else { dtype };
    let [x, y] = cx.prepare([lhs, rhs], compute)?;
    let mut result = cx.binary(op, x, y)?;
    if compute.is_float() {
        for operand in [x, y] {
            let nan = cx.compare(CompareDirection::Ne, operand, operand)?;
            result = cx.select(nan, operand, result)?;
        }
    }
    tensor(cx.convert(result, dtype)?)
}

/// `fmax` / `fmin`: like `maximum` / `minimum`, but a NaN operand is ignored (NaN only when both
/// are NaN), as C's `fmax`.
pub(super) fn fmax_fmin(cx: &mut Cx<'_>, args: &Args, op: BinaryOp) -> Result<Imported> {
    let (lhs, rhs) = (args.operand("self")?, args.operand("other")?);
    let dtype = cx.result_type(&[lhs, rhs]);
    let [x, y] = cx.prepare([lhs, rhs], dtype)?;
    let mut result = cx.binary(op, x, y)?;
    if dtype.is_float() {
        // XLA's CPU max/min may return either operand when one is NaN: take the other one.
        for (operand, other) in [(x, y), (y, x)] {
            let nan = cx.compare(CompareDirection::Ne, operand, operand)?;
            result = cx.select(nan, other, result)?;
        }
    }
    tensor(result)
}

/// `hypot`: `sqrt(a² + b²)` without overflow or underflow in between, as C's `hypot`: computed as
/// `big * sqrt(1 + (small / big)²)`; `inf` when either is infinite (even with a NaN), else NaN
/// when either is NaN, and 0 for two zeros.
pub(super) fn hypot(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (lhs, rhs) = (args.operand("self")?, args.operand("other")?);
    let dtype = cx.result_type(&[lhs, rhs]);
    let out = if dtype.is_float() { dtype } else { DEFAULT_FLOAT };
    let [a, b] = cx.prepare([lhs, rhs], opmath(out))?;
    let (a, b) = (cx.unary(UnaryOp::Abs, a)?, cx.unary(UnaryOp::Abs, b)?);
    let big = cx.binary(BinaryOp::Maximum, a, b)?;
    let small = cx.binary(BinaryOp::Minimum, a, b)?;
    let ratio = cx.binary(BinaryOp::Divide, small, big)?;
    let square = cx.binary(BinaryOp::Multiply, ratio, ratio)?;
    let one = cx.splat_like(a, Scalar::Int(1))?;
    let sum = cx.binary(BinaryOp::Add, one, square)?;
    let root = cx.unary(UnaryOp::Sqrt, sum)?;
    let mut result = cx.binary(BinaryOp::Multiply, big, root)?;
    let zero = cx.splat_like(a, Scalar::Int(0))?;
    let both_zero = cx.compare(CompareDirection::Eq, big, zero)?;
    result = cx.select(both_zero, zero, result)?;
    let infinity = cx.splat_like(a, Scalar::Float(f64::INFINITY))?;
    for operand in [a, b] {
        let nan = cx.compare(CompareDirection::Ne, operand, operand)?;
        result = cx.select(nan, operand, result)?;
    }
    for operand in [a, b] {
        let infinite = cx.compare(CompareDirection::Eq, operand, infinity)?;
        result = cx.select(infinite, infinity, result)?;
    }
    tensor(cx.convert(result, out)?)
}

/// `atan2.out(self, other, *, out)`: `atan2` in the dtype of `out` (which the functional graph
/// never reads otherwise).
pub(super) fn atan2_out(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let out = args.tensor("out")?;
    let Imported::Tensor(result) = atan2(cx, args)? else { unreachable!("atan2 gives a tensor") };
    let result = cx.convert(result, cx.dtype(out))?;
    tensor(result)
}
