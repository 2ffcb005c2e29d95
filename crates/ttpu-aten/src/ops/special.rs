//! Special functions: `lgamma`, `digamma`, `polygamma`, `erfinv`, `erfc`, `special_zeta`,
//! `special_i1`/`special_i1e`, `nextafter`, computed by CHLO's ops (which PJRT plugins legalize
//! into their own approximations, as JAX's modules use them), with PyTorch's values at the poles
//! and edges put back where CHLO's differ.
//!
//! Integer inputs compute in the default float dtype and half types in `f32`, rounded once, as
//! PyTorch's kernels do.

use ttpu_ir::{BinaryOp, CompareDirection, ReduceKind, Scalar, UnaryOp, ValueId};

use super::elementwise::{apply_float, tensor};
use crate::args::Args;
use crate::ctx::{Cx, Imported, opmath};
use crate::error::Result;

/// `lgamma`, `erfinv`, `erfc`, `special_i1e`: the CHLO op, in opmath.
pub(super) fn chlo_unary(cx: &mut Cx<'_>, args: &Args, op: UnaryOp) -> Result<Imported> {
    let x = args.tensor("self")?;
    tensor(apply_float(cx, x, |cx, x| cx.unary(op, x))?)
}

/// `digamma(x)`: CHLO's, with PyTorch's poles: `-inf` at `+0`, `+inf` at `-0` (`copysign(inf, -x)`)
/// and NaN at the negative integers.
pub(super) fn digamma(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    tensor(apply_float(cx, x, digamma_of)?)
}

fn digamma_of(cx: &mut Cx<'_>, x: ValueId) -> Result<ValueId> {
    let value = cx.unary(UnaryOp::Digamma, x)?;
    let zero = cx.splat_like(x, Scalar::Float(0.0))?;
    let at_zero = cx.compare(CompareDirection::Eq, x, zero)?;
    let negated = cx.unary(UnaryOp::Negate, x)?;
    let infinity = cx.splat_like(x, Scalar::Float(f64::INFINITY))?;
    let signed = copysign(cx, infinity, negated)?;
    let floor = cx.unary(UnaryOp::Floor, x)?;
    let integral = cx.compare(CompareDirection::Eq, x, floor)?;
    let negative = cx.compare(CompareDirection::Lt, x, zero)?;
    let pole = cx.binary(BinaryOp::And, integral, negative)?;
    let nan = cx.splat_like(x, Scalar::Float(f64::NAN))?;
    let value = cx.select(pole, nan, value)?;
    cx.select(at_zero, signed, value)
}

/// `|magnitude|` with the sign of `sign` (read from the comparison with zero; `-0.0` counts as
/// negative through `1 / x`).
fn copysign(cx: &mut Cx<'_>, magnitude: ValueId, sign: ValueId) -> Result<ValueId> {
    let one = cx.splat_like(sign, Scalar::Float(1.0))?;
    let reciprocal = cx.binary(BinaryOp::Divide, one, sign)?;
    let zero = cx.splat_like(sign, Scalar::Float(0.0))?;
    let below = cx.compare(CompareDirection::Lt, reciprocal, zero)?;
    let positive = cx.unary(UnaryOp::Abs, magnitude)?;
    let negative = cx.unary(UnaryOp::Negate, positive)?;
    cx.select(below, negative, positive)
}

/// `polygamma(n, self)`: digamma for `n = 0`, else CHLO's `polygamma` (a Hurwitz zeta series).
pub(super) fn polygamma(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let n = args.int("n")?;
    if n < 0 {
        return Err(cx.bad(format!("polygamma's order must be non-negative, found {n}")));
    }
    let x = args.tensor("self")?;
    tensor(apply_float(cx, x, |cx, x| {
        if n == 0 {
            return digamma_of(cx, x);
        }
        let order = cx.splat_like(x, Scalar::Float(n as f64))?;
        let positive = cx.binary(BinaryOp::Polygamma, order, x)?;
        // Below zero, PyTorch's own formula over the shifted zeta: `(-1)^(n+1) n! ζ(n + 1, x)`.
        let exponent = cx.splat_like(x, Scalar::Float((n + 1) as f64))?;
        let series = hurwitz_zeta(cx, exponent, x)?;
        let factorial: f64 = (1..=n).map(|k| k as f64).product();
        let sign = if n % 2 == 1 { 1.0 } else { -1.0 };
        let negative = cx.binary_scalar(BinaryOp::Multiply, series, Scalar::Float(sign * factorial))?;
        let zero = cx.splat_like(x, Scalar::Float(0.0))?;
        let below = cx.compare(CompareDirection::Lt, x, zero)?;
        cx.select(below, negative, positive)
    })?)
}

/// `ζ(x, q)` as Cephes computes it for PyTorch: CHLO's `zeta` for `q >= 0`; below zero, where
/// CHLO's series loses its accuracy, the terms `(q + k)^-x` summed directly (one loop, each
/// element until `q + k >= 0`, as Cephes' own sum runs past them) and CHLO's `zeta` from there on.
/// A non-integer `x` with a negative `q` is NaN, and a non-positive integer `q` a pole, as
/// Cephes makes them.
fn hurwitz_zeta(cx: &mut Cx<'_>, x: ValueId, q: ValueId) -> Result<ValueId> {
    let direct = cx.binary(BinaryOp::Zeta, x, q)?;
    let zero = cx.splat_like(q, Scalar::Float(0.0))?;
    let one = cx.splat_like(x, Scalar::Float(1.0))?;
    let below = cx.compare(CompareDirection::Lt, q, zero)?;
    let q_floor = cx.unary(UnaryOp::Floor, q)?;
    let q_integral = cx.compare(CompareDirection::Eq, q, q_floor)?;
    let x_floor = cx.unary(UnaryOp::Floor, x)?;
    let x_integral = cx.compare(CompareDirection::Eq, x, x_floor)?;
    let above_one = cx.compare(CompareDirection::Gt, x, one)?;
    // The elements whose sum runs: a negative, non-integer q with an integer x above 1 (the
    // others are poles, NaN or positive, set apart below, and must not step forever).
    let regular = cx.unary(UnaryOp::Not, q_integral)?;
    let summed = cx.binary(BinaryOp::And, below, regular)?;
    let summed = cx.binary(BinaryOp::And, summed, x_integral)?;
    let summed = cx.binary(BinaryOp::And, summed, above_one)?;
    let state = [x, q, zero, summed];
    let types: Vec<ttpu_ir::TensorType> = state.iter().map(|&value| cx.ty(value)).collect();
    let all_dims: Vec<usize> = (0..cx.rank(q)).collect();
    let cond = super::loops::loop_graph(cx, &types, |cx, s| {
        let origin = cx.splat_like(s[1], Scalar::Float(0.0))?;
        let negative = cx.compare(CompareDirection::Lt, s[1], origin)?;
        let active = cx.binary(BinaryOp::And, negative, s[3])?;
        let any = if all_dims.is_empty() { active } else { cx.reduce(active, ReduceKind::Or, &all_dims)? };
        Ok(vec![any])
    })?;
    let body = super::loops::loop_graph(cx, &types, |cx, s| {
        let (x, a, sum, summed) = (s[0], s[1], s[2], s[3]);
        let origin = cx.splat_like(a, Scalar::Float(0.0))?;
        let negative = cx.compare(CompareDirection::Lt, a, origin)?;
        let active = cx.binary(BinaryOp::And, negative, summed)?;
        let minus_x = cx.unary(UnaryOp::Negate, x)?;
        let term = cx.binary(BinaryOp::Power, a, minus_x)?;
        let added = cx.binary(BinaryOp::Add, sum, term)?;
        let sum = cx.select(active, added, sum)?;
        let next = cx.binary_scalar(BinaryOp::Add, a, Scalar::Float(1.0))?;
        let a = cx.select(active, next, a)?;
        Ok(vec![x, a, sum, summed])
    })?;
    let built = cx.b.while_loop(cond, body, &state);
    let end = cx.ok(built)?;
    let tail = cx.binary(BinaryOp::Zeta, x, end[1])?;
    let shifted = cx.binary(BinaryOp::Add, end[2], tail)?;
    let value = cx.select(below, shifted, direct)?;
    // A negative q with a non-integer x: Cephes' domain error.
    let nan = cx.splat_like(x, Scalar::Float(f64::NAN))?;
    let fractional = cx.unary(UnaryOp::Not, x_integral)?;
    let undefined = cx.binary(BinaryOp::And, below, fractional)?;
    let value = cx.select(undefined, nan, value)?;
    // Cephes' edges: `x = 1` is the harmonic series' pole, `x < 1` diverges, and a non-positive
    // integer `q` meets a pole of its own.
    let infinity = cx.splat_like(x, Scalar::Float(f64::INFINITY))?;
    let not_positive = cx.compare(CompareDirection::Le, q, zero)?;
    let pole = cx.binary(BinaryOp::And, q_integral, not_positive)?;
    let value = cx.select(pole, infinity, value)?;
    let below_one = cx.compare(CompareDirection::Lt, x, one)?;
    let value = cx.select(below_one, nan, value)?;
    let at_one = cx.compare(CompareDirection::Eq, x, one)?;
    cx.select(at_one, infinity, value)
}

/// `special_zeta(self, other)` (and its scalar overloads): the Hurwitz zeta `ζ(x, q)`, both
/// operands promoted to their float result type.
pub(super) fn zeta(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (x, q) = (args.operand("self")?, args.operand("other")?);
    let dtype = cx.result_type(&[x, q]);
    let dtype = if dtype.is_float() { dtype } else { crate::promote::DEFAULT_FLOAT };
    let compute = opmath(dtype);
    let [x, q] = cx.prepare([x, q], compute)?;
    let value = hurwitz_zeta(cx, x, q)?;
    tensor(cx.convert(value, dtype)?)
}

/// `special_i1(x)`: `i1e(x) * exp(|x|)`.
pub(super) fn i1(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    tensor(apply_float(cx, x, |cx, x| {
        let scaled = cx.unary(UnaryOp::BesselI1e, x)?;
        let magnitude = cx.unary(UnaryOp::Abs, x)?;
        let growth = cx.unary(UnaryOp::Exponential, magnitude)?;
        cx.binary(BinaryOp::Multiply, scaled, growth)
    })?)
}

/// `nextafter(self, other)`: the next representable value after `self` toward `other`, in the
/// operands' common float dtype (no opmath: the step is the dtype's own).
pub(super) fn nextafter(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (x, y) = (args.operand("self")?, args.operand("other")?);
    let dtype = cx.result_type(&[x, y]);
    if !dtype.is_float() {
        return Err(cx.bad(format!("nextafter takes floating-point tensors, found {dtype}")));
    }
    let [x, y] = cx.prepare([x, y], dtype)?;
    tensor(cx.binary(BinaryOp::NextAfter, x, y)?)
}

/// `frexp.Tensor(self)` → (mantissa, exponent): `x = mantissa * 2^exponent` with `|mantissa|` in
/// `[0.5, 1)`, read from the float's bits (the exponent field less its bias, the mantissa given
/// the exponent of 0.5); zero, infinities and NaN keep their value with exponent 0, as C's
/// `frexp` gives them. Half types go through `f32`, where they are exact. A subnormal input (which
/// XLA's CPU code flushes to zero wherever it computes in floats) is read from its bits too.
pub(super) fn frexp(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    use ttpu_ir::DType;
    let x = args.tensor("self")?;
    let dtype = cx.dtype(x);
    if !dtype.is_float() {
        return Err(cx.bad(format!("frexp takes floating-point tensors, found {}", cx.ty(x))));
    }
    let (wide, bits, shift, field, bias) = match dtype {
        DType::F64 => (DType::F64, DType::I64, 52, 0x7ff, 1022),
        _ => (DType::F32, DType::I32, 23, 0xff, 126),
    };
    let value = cx.convert(x, wide)?;
    let raw = cx.bitcast_convert(value, bits)?;
    let shifted = cx.binary_scalar(BinaryOp::ShiftRightLogical, raw, Scalar::Int(shift))?;
    let biased = cx.binary_scalar(BinaryOp::And, shifted, Scalar::Int(field))?;
    let exponent = cx.binary_scalar(BinaryOp::Subtract, biased, Scalar::Int(bias))?;
    // The sign and the fraction, with the exponent field of 0.5.
    let keep = !(field << shift);
    let kept = cx.binary_scalar(BinaryOp::And, raw, Scalar::Int(keep))?;
    let half = cx.binary_scalar(BinaryOp::Or, kept, Scalar::Int(bias << shift))?;
    let mantissa = cx.bitcast_convert(half, wide)?;
    // A subnormal: its fraction, an integer, is a normal float whose own exponent and mantissa
    // give the value's (scaled by the subnormals' 2^-(bias + shift)); integer arithmetic and an
    // exact conversion throughout, as XLA's CPU code flushes subnormal floats to zero.
    let fraction = cx.binary_scalar(BinaryOp::And, raw, Scalar::Int((1 << shift) - 1))?;
    let normal = cx.convert(fraction, wide)?;
    let normal_raw = cx.bitcast_convert(normal, bits)?;
    let normal_shifted = cx.binary_scalar(BinaryOp::ShiftRightLogical, normal_raw, Scalar::Int(shift))?;
    let normal_biased = cx.binary_scalar(BinaryOp::And, normal_shifted, Scalar::Int(field))?;
    let sub_exponent = cx.binary_scalar(BinaryOp::Subtract, normal_biased, Scalar::Int(2 * bias + shift))?;
    let sign_bit = if bits == DType::I64 { i64::MIN } else { i64::from(i32::MIN) };
    let sign = cx.binary_scalar(BinaryOp::And, raw, Scalar::Int(sign_bit))?;
    let normal_kept = cx.binary_scalar(BinaryOp::And, normal_raw, Scalar::Int(keep))?;
    let normal_half = cx.binary_scalar(BinaryOp::Or, normal_kept, Scalar::Int(bias << shift))?;
    let signed_half = cx.binary(BinaryOp::Or, normal_half, sign)?;
    let sub_mantissa = cx.bitcast_convert(signed_half, wide)?;
    // Zero, infinities and NaN: the value itself (a zero keeps its sign) and exponent 0.
    let zero_field = cx.splat_like(biased, Scalar::Int(0))?;
    let full_field = cx.splat_like(biased, Scalar::Int(field))?;
    let no_exponent = cx.compare(CompareDirection::Eq, biased, zero_field)?;
    let no_fraction = cx.splat_like(fraction, Scalar::Int(0))?;
    let has_fraction = cx.compare(CompareDirection::Ne, fraction, no_fraction)?;
    let subnormal = cx.binary(BinaryOp::And, no_exponent, has_fraction)?;
    let special = cx.compare(CompareDirection::Eq, biased, full_field)?;
    let plain = cx.binary(BinaryOp::Or, no_exponent, special)?;
    let signed_zero = cx.bitcast_convert(sign, wide)?;
    let kept_value = cx.select(no_exponent, signed_zero, value)?;
    let mantissa = cx.select(plain, kept_value, mantissa)?;
    let exponent = cx.select(plain, zero_field, exponent)?;
    let mantissa = cx.select(subnormal, sub_mantissa, mantissa)?;
    let exponent = cx.select(subnormal, sub_exponent, exponent)?;
    let mantissa = cx.convert(mantissa, dtype)?;
    let exponent = cx.convert(exponent, DType::I32)?;
    Ok(Imported::Tuple(vec![Imported::Tensor(mantissa), Imported::Tensor(exponent)]))
}
