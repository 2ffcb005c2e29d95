//! Inference for elementwise ops: operands share one shape (broadcasts are explicit).

use super::{InferResult, fail};
use crate::{BinaryOp, CompareDirection, DType, Op, TensorType, UnaryOp};

pub(super) fn unary(op: &Op, unary: UnaryOp, operand: &TensorType) -> InferResult {
    if operand.dtype.is_complex() && !unary.is_chlo() {
        return complex_unary(op, unary, operand);
    }
    if unary.needs_float() && !operand.dtype.is_float() {
        return fail(op, format!("needs a floating-point operand, found {operand}"));
    }
    if unary == UnaryOp::Not && operand.dtype.is_float() {
        return fail(op, format!("needs an integer or bool operand, found {operand}"));
    }
    // StableHLO defines `abs` and `sign` on signed types only, and `negate` not on bool.
    let unsigned = matches!(operand.dtype, DType::U8 | DType::U16 | DType::U32 | DType::U64 | DType::Bool);
    if (matches!(unary, UnaryOp::Abs | UnaryOp::Sign) && unsigned)
        || (unary == UnaryOp::Negate && operand.dtype.is_bool())
    {
        return fail(op, format!("not defined for {}", operand.dtype));
    }
    if unary == UnaryOp::IsFinite {
        return Ok(operand.with_dtype(DType::Bool));
    }
    Ok(operand.clone())
}

pub(super) fn binary(op: &Op, binary: BinaryOp, lhs: &TensorType, rhs: &TensorType) -> InferResult {
    if lhs != rhs {
        return fail(op, format!("operand types differ: {lhs} vs {rhs}"));
    }
    let dtype = lhs.dtype;
    let ok = match binary {
        // Field arithmetic only: complex numbers have no order (maximum, minimum), no bits and
        // no remainder.
        _ if dtype.is_complex() => {
            matches!(
                binary,
                BinaryOp::Add | BinaryOp::Subtract | BinaryOp::Multiply | BinaryOp::Divide | BinaryOp::Power
            )
        }
        BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => !dtype.is_float(),
        BinaryOp::ShiftLeft | BinaryOp::ShiftRightArithmetic | BinaryOp::ShiftRightLogical => dtype.is_integer(),
        BinaryOp::Atan2 | BinaryOp::Polygamma | BinaryOp::Zeta | BinaryOp::NextAfter => dtype.is_float(),
        BinaryOp::Power | BinaryOp::Remainder | BinaryOp::Divide | BinaryOp::Subtract => !dtype.is_bool(),
        BinaryOp::Add | BinaryOp::Multiply | BinaryOp::Maximum | BinaryOp::Minimum => true,
    };
    if !ok {
        return fail(op, format!("not defined for {dtype}"));
    }
    Ok(lhs.clone())
}

pub(super) fn compare(op: &Op, direction: CompareDirection, lhs: &TensorType, rhs: &TensorType) -> InferResult {
    if lhs != rhs {
        return fail(op, format!("operand types differ: {lhs} vs {rhs}"));
    }
    if lhs.dtype.is_complex() && !matches!(direction, CompareDirection::Eq | CompareDirection::Ne) {
        return fail(op, format!("complex numbers have no order; only EQ and NE compare {lhs}"));
    }
    Ok(lhs.with_dtype(DType::Bool))
}

pub(super) fn select(op: &Op, pred: &TensorType, on_true: &TensorType, on_false: &TensorType) -> InferResult {
    if pred.dtype != DType::Bool {
        return fail(op, format!("predicate must be bool, found {pred}"));
    }
    if on_true != on_false {
        return fail(op, format!("branch types differ: {on_true} vs {on_false}"));
    }
    if pred.rank() != 0 && pred.shape != on_true.shape {
        return fail(op, format!("predicate shape {} does not match {}", pred.shape, on_true.shape));
    }
    Ok(on_true.clone())
}

pub(super) fn clamp(op: &Op, min: &TensorType, operand: &TensorType, max: &TensorType) -> InferResult {
    if operand.dtype.is_complex() {
        return fail(op, format!("complex numbers have no order; found {operand}"));
    }
    for bound in [min, max] {
        if bound.dtype != operand.dtype || (bound.rank() != 0 && bound.shape != operand.shape) {
            return fail(op, format!("bound {bound} does not fit operand {operand}"));
        }
    }
    Ok(operand.clone())
}

/// Unary ops on complex operands: the ones StableHLO defines for complex types. `abs` gives the
/// modulus in the part dtype, as StableHLO's `abs` does; the others keep the operand type.
fn complex_unary(op: &Op, unary: UnaryOp, operand: &TensorType) -> InferResult {
    let part = operand.dtype.complex_part().expect("called for complex dtypes only");
    match unary {
        UnaryOp::Abs => Ok(operand.with_dtype(part)),
        UnaryOp::Negate
        | UnaryOp::Exponential
        | UnaryOp::ExponentialMinusOne
        | UnaryOp::Log
        | UnaryOp::LogPlusOne
        | UnaryOp::Sqrt
        | UnaryOp::Rsqrt
        | UnaryOp::Tanh
        | UnaryOp::Sine
        | UnaryOp::Cosine
        | UnaryOp::Sign => Ok(operand.clone()),
        _ => fail(op, format!("not defined for {}", operand.dtype)),
    }
}
