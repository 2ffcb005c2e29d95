//! Constant folding, computed exactly as the device would.
//!
//! Only ops whose result is correctly rounded are folded: float `add`, `subtract`, `multiply` and
//! `divide` are computed in f64 and rounded once to the dtype, which gives the correctly rounded
//! result for f32, f16 and bf16 because f64 has more than twice their precision plus two bits.
//! Integer arithmetic wraps in the dtype's width. `u64` is never folded: its elements are held as
//! the i64 of the same bits, which would order, divide and convert as signed. Transcendental ops
//! are never folded, and neither is anything whose result depends on a NaN's payload or the sign of a zero (`maximum` of zeros).
//! Operands must be small (at most 64 elements) or splats; a splat result stays one repeated value.

use smallvec::SmallVec;
use ttpu_ir::{BinaryOp, CompareDirection, DType, Literal, Op, Scalar, Shape, UnaryOp};

use super::{Rhs, Rule, split};
use crate::analysis::{Data, FuseGraph, data};
use crate::lang::FNode;

/// Splat constants may grow up to this many elements; they cost one element to keep.
const SPLAT_LIMIT: i64 = 1 << 16;

pub(super) const RULES: &[Rule] = &[
    // negate, abs and not of a constant: exact sign-bit and bit operations (wrapping for integers).
    Rule { name: "fold-unary", search: fold_unary },
    // add, subtract, multiply, divide, maximum, minimum, and, or, xor of constants, rounded once.
    Rule { name: "fold-binary", search: fold_binary },
    // compare of constants: IEEE comparisons (NaN compares unequal) and integer comparisons.
    Rule { name: "fold-compare", search: fold_compare },
    // convert of a constant when the conversion rounds at most once (floats, small integers).
    Rule { name: "fold-convert", search: fold_convert },
    // broadcast_in_dim(splat c) == splat c of the bigger shape: every element is the same bytes.
    Rule { name: "broadcast-splat", search: broadcast_splat },
    // reshape, transpose or slice of a splat is a splat of the result shape.
    Rule { name: "layout-splat", search: layout_splat },
];

/// The elements of a constant class: one repeated value or a small dense list.
pub(super) enum Elements {
    Splat(Scalar),
    Dense(Vec<Scalar>),
}

pub(super) fn elements(data: &Data) -> Option<Elements> {
    if let Some(value) = data.splat_scalar() {
        return Some(Elements::Splat(value));
    }
    data.value.as_ref().map(|literal| Elements::Dense(literal.scalars().collect()))
}

/// Applies `f` elementwise to constant operands; `None` when an operand is not constant or `f` refuses.
pub(super) fn map_elements(operands: &[&Data], f: impl Fn(&[Scalar]) -> Option<Scalar>) -> Option<Elements> {
    let all: Vec<Elements> = operands.iter().map(|data| elements(data)).collect::<Option<_>>()?;
    let len = all.iter().find_map(|elements| match elements {
        Elements::Dense(values) => Some(values.len()),
        Elements::Splat(_) => None,
    });
    let at = |index: usize| -> SmallVec<[Scalar; 3]> {
        all.iter()
            .map(|elements| match elements {
                Elements::Splat(value) => *value,
                Elements::Dense(values) => values[index],
            })
            .collect()
    };
    match len {
        None => f(&at(0)).map(Elements::Splat),
        Some(len) => (0..len).map(|index| f(&at(index))).collect::<Option<Vec<_>>>().map(Elements::Dense),
    }
}

/// Rounds an f64 to f32 first when the target is f16 or bf16.
///
/// The `half` conversions from f64 ignore the low 32 mantissa bits (a sticky bit can be lost), while
/// their f32 conversions round correctly. For results of `+ - * /` on f16/bf16 operands the detour
/// through f32 is innocuous (24 >= 2 * 11 + 2), so the value still rounds once, correctly.
fn through_f32(dtype: DType, value: Scalar) -> Scalar {
    match value {
        Scalar::Float(float) if matches!(dtype, DType::F16 | DType::BF16) => Scalar::Float(f64::from(float as f32)),
        other => other,
    }
}

/// A constant of `dtype` and `shape` holding `elements`.
pub(super) fn literal(dtype: DType, shape: &Shape, elements: Elements) -> Option<Literal> {
    let dims = shape.as_static()?;
    let elements = match elements {
        Elements::Splat(value) => Elements::Splat(through_f32(dtype, value)),
        Elements::Dense(values) => Elements::Dense(values.into_iter().map(|value| through_f32(dtype, value)).collect()),
    };
    match elements {
        Elements::Splat(value) => (shape.num_elements()? <= SPLAT_LIMIT).then(|| Literal::splat(dtype, &dims, value)),
        Elements::Dense(values) => Literal::from_scalars(dtype, &dims, &values).ok(),
    }
}

fn int_range(dtype: DType) -> (i64, i64) {
    match dtype {
        DType::I8 => (i8::MIN.into(), i8::MAX.into()),
        DType::I16 => (i16::MIN.into(), i16::MAX.into()),
        DType::I32 => (i32::MIN.into(), i32::MAX.into()),
        DType::U8 => (0, 255),
        _ => (i64::MIN, i64::MAX),
    }
}

fn eval_unary(op: UnaryOp, dtype: DType, operand: Scalar) -> Option<Scalar> {
    Some(match (op, operand) {
        (UnaryOp::Negate, Scalar::Float(value)) => Scalar::Float(-value),
        (UnaryOp::Abs, Scalar::Float(value)) => Scalar::Float(value.abs()),
        (UnaryOp::Negate, Scalar::Int(value)) if dtype.is_signed_integer() => Scalar::Int(value.wrapping_neg()),
        (UnaryOp::Abs, Scalar::Int(value)) if dtype.is_signed_integer() => Scalar::Int(value.wrapping_abs()),
        (UnaryOp::Not, Scalar::Int(value)) => Scalar::Int(!value),
        (UnaryOp::Not, Scalar::Bool(value)) => Scalar::Bool(!value),
        _ => return None,
    })
}

pub(super) fn eval_binary(op: BinaryOp, dtype: DType, lhs: Scalar, rhs: Scalar) -> Option<Scalar> {
    match (lhs, rhs) {
        (Scalar::Float(a), Scalar::Float(b)) => {
            let value = match op {
                BinaryOp::Add => a + b,
                BinaryOp::Subtract => a - b,
                BinaryOp::Multiply => a * b,
                BinaryOp::Divide => a / b,
                BinaryOp::Maximum | BinaryOp::Minimum if a.is_nan() || b.is_nan() || (a == 0.0 && b == 0.0) => {
                    return None;
                }
                BinaryOp::Maximum => a.max(b),
                BinaryOp::Minimum => a.min(b),
                _ => return None,
            };
            // Inf - Inf and similar make a NaN whose payload the device chooses; leave those alone.
            (!value.is_nan()).then_some(Scalar::Float(value))
        }
        (Scalar::Int(a), Scalar::Int(b)) => {
            let (min, _) = int_range(dtype);
            let value = match op {
                BinaryOp::Add => a.wrapping_add(b),
                BinaryOp::Subtract => a.wrapping_sub(b),
                BinaryOp::Multiply => a.wrapping_mul(b),
                BinaryOp::Divide if b == 0 || (b == -1 && a == min) => return None,
                BinaryOp::Divide => a / b,
                BinaryOp::Maximum => a.max(b),
                BinaryOp::Minimum => a.min(b),
                BinaryOp::And => a & b,
                BinaryOp::Or => a | b,
                BinaryOp::Xor => a ^ b,
                _ => return None,
            };
            Some(Scalar::Int(value))
        }
        (Scalar::Bool(a), Scalar::Bool(b)) => Some(Scalar::Bool(match op {
            BinaryOp::And => a & b,
            BinaryOp::Or => a | b,
            BinaryOp::Xor => a ^ b,
            _ => return None,
        })),
        _ => None,
    }
}

fn eval_compare(direction: CompareDirection, lhs: Scalar, rhs: Scalar) -> Option<Scalar> {
    use std::cmp::Ordering;
    let ordering = match (lhs, rhs) {
        (Scalar::Float(a), Scalar::Float(b)) => a.partial_cmp(&b),
        (Scalar::Int(a), Scalar::Int(b)) => Some(a.cmp(&b)),
        (Scalar::Bool(a), Scalar::Bool(b)) => Some(a.cmp(&b)),
        _ => return None,
    };
    let result = match (direction, ordering) {
        (CompareDirection::Ne, None) => true,
        (_, None) => false,
        (CompareDirection::Eq, Some(ordering)) => ordering == Ordering::Equal,
        (CompareDirection::Ne, Some(ordering)) => ordering != Ordering::Equal,
        (CompareDirection::Lt, Some(ordering)) => ordering == Ordering::Less,
        (CompareDirection::Le, Some(ordering)) => ordering != Ordering::Greater,
        (CompareDirection::Gt, Some(ordering)) => ordering == Ordering::Greater,
        (CompareDirection::Ge, Some(ordering)) => ordering != Ordering::Less,
    };
    Some(Scalar::Bool(result))
}

fn eval_convert(to: DType, value: Scalar) -> Option<Scalar> {
    match value {
        // f64 to f16/bf16 would round twice through f32 (see `through_f32`); only exact values go.
        Scalar::Float(float) if matches!(to, DType::F16 | DType::BF16) => {
            (f64::from(float as f32).to_bits() == float.to_bits()).then_some(value)
        }
        // Float to float rounds once, from the exact f64 value.
        Scalar::Float(_) if to.is_float() => Some(value),
        // Integers convert exactly to f64 up to 2^53, so the one rounding is to the target.
        Scalar::Int(int) if to.is_float() => (int.unsigned_abs() <= 1 << 53).then_some(value),
        // Integer narrowing and widening wrap, which is what the byte encoding does.
        Scalar::Int(_) if to.is_integer() => Some(value),
        Scalar::Int(int) if to.is_bool() => Some(Scalar::Bool(int != 0)),
        Scalar::Bool(_) => Some(value),
        _ => None,
    }
}

fn push_folded(dtype: DType, shape: &Shape, folded: Option<Elements>, out: &mut Vec<Rhs>) {
    if let Some(literal) = folded.and_then(|elements| literal(dtype, shape, elements)) {
        out.push(Rhs::constant(literal));
    }
}

fn fold_unary(egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    let Some((Op::Unary(op), [operand])) = split(node) else { return };
    let operand = data(egraph, *operand);
    let dtype = operand.dtype();
    if matches!(dtype, DType::U16 | DType::U32 | DType::U64) {
        return;
    }
    let folded = map_elements(&[operand], |values| eval_unary(*op, dtype, values[0]));
    push_folded(dtype, &operand.ty.shape, folded, out);
}

fn fold_binary(egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    let Some((Op::Binary(op), [lhs, rhs])) = split(node) else { return };
    let (lhs, rhs) = (data(egraph, *lhs), data(egraph, *rhs));
    let dtype = lhs.dtype();
    if matches!(dtype, DType::U16 | DType::U32 | DType::U64) {
        return;
    }
    let folded = map_elements(&[lhs, rhs], |values| eval_binary(*op, dtype, values[0], values[1]));
    push_folded(dtype, &lhs.ty.shape, folded, out);
}

fn fold_compare(egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    let Some((Op::Compare(direction), [lhs, rhs])) = split(node) else { return };
    let (lhs, rhs) = (data(egraph, *lhs), data(egraph, *rhs));
    if matches!(lhs.dtype(), DType::U16 | DType::U32 | DType::U64) {
        return;
    }
    let folded = map_elements(&[lhs, rhs], |values| eval_compare(*direction, values[0], values[1]));
    push_folded(DType::Bool, &lhs.ty.shape, folded, out);
}

fn fold_convert(egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    let Some((Op::Convert(to), [operand])) = split(node) else { return };
    let operand = data(egraph, *operand);
    if [operand.dtype(), *to].iter().any(|dtype| matches!(dtype, DType::U16 | DType::U32 | DType::U64)) {
        return;
    }
    let folded = map_elements(&[operand], |values| eval_convert(*to, values[0]));
    push_folded(*to, &operand.ty.shape, folded, out);
}

/// A constant repeating the splat bytes of `operand` over `shape`.
fn splat_constant(operand: &Data, shape: &Shape, out: &mut Vec<Rhs>) {
    let (Some(bytes), Some(dims), Some(count)) = (&operand.splat, shape.as_static(), shape.num_elements()) else {
        return;
    };
    if count > SPLAT_LIMIT {
        return;
    }
    let data: Vec<u8> = bytes.iter().copied().cycle().take(bytes.len() * count as usize).collect();
    let literal = Literal::from_bytes(operand.dtype(), &dims, data).expect("one splat element per result element");
    out.push(Rhs::constant(literal));
}

fn broadcast_splat(egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    if let Some((Op::BroadcastInDim { shape, .. }, [operand])) = split(node) {
        splat_constant(data(egraph, *operand), shape, out);
    }
}

fn layout_splat(egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    let Some((op, [operand])) = split(node) else { return };
    let operand = data(egraph, *operand);
    let shape: Shape = match op {
        Op::Reshape(shape) => shape.clone(),
        Op::Transpose(permutation) => permutation.iter().map(|&dim| operand.ty.shape[dim as usize].clone()).collect(),
        Op::Slice { start, limit, strides } => {
            let mut dims = Vec::with_capacity(start.len());
            for dim in 0..start.len() {
                let (begin, stride) = (start[dim], strides[dim]);
                let Some(end) = limit[dim].as_static() else { return };
                dims.push(ttpu_ir::Dim::Static(if end == begin { 0 } else { (end - begin - 1) / stride + 1 }));
            }
            dims.into_iter().collect()
        }
        _ => return,
    };
    if shape.num_elements().is_some_and(|count| count > 0) {
        splat_constant(operand, &shape, out);
    }
}
