//! Conversions that vanish or shorten because an intermediate type holds every value exactly.
//!
//! `f64 -> f32 -> f64` is deliberately not removed: the `f32` step rounds.

use ttpu_ir::{DType, Op};

use super::{Rhs, Rule, nodes_of, split};
use crate::analysis::{FuseGraph, data};
use crate::lang::FNode;

pub(super) const RULES: &[Rule] = &[
    // convert(x, dtype(x)) == x: converting to the same type changes nothing.
    Rule { name: "convert-identity", search: convert_identity },
    // convert(convert(x, W), N) == convert(x, N) when W holds every value of x's type exactly
    // (f32 -> f64, i32 -> i64, i8 -> f32, ...): the second conversion then sees x's own value.
    // With N = dtype(x) the chain becomes convert-identity and vanishes (f32 -> f64 -> f32 == x).
    Rule { name: "convert-lossless-chain", search: convert_lossless_chain },
];

/// Whether every value of `from` is exactly a value of `to`.
pub(crate) fn lossless(from: DType, to: DType) -> bool {
    use DType::*;
    from == to
        || from == Bool
        || matches!(
            (from, to),
            (F16 | BF16, F32 | F64)
                | (F32, F64)
                | (I8, I16 | I32 | I64 | F16 | BF16 | F32 | F64)
                | (U8, I16 | I32 | I64 | F16 | BF16 | F32 | F64)
                | (I16, I32 | I64 | F32 | F64)
                | (I32, I64 | F64)
        )
}

fn convert_identity(egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    if let Some((Op::Convert(dtype), [operand])) = split(node)
        && data(egraph, *operand).dtype() == *dtype
    {
        out.push(Rhs::class(*operand));
    }
}

fn convert_lossless_chain(egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    let Some((Op::Convert(target), [operand])) = split(node) else { return };
    for (op, operands) in nodes_of(egraph, *operand) {
        let (Op::Convert(wide), [source]) = (op, operands) else { continue };
        let from = data(egraph, *source).dtype();
        // Integer -> float -> other integer would turn a wrapping conversion into a float-to-int one,
        // whose out-of-range behavior differs; only the round trip back to x's own type is safe there.
        let int_via_float = from.is_integer() && wide.is_float() && target.is_integer() && *target != from;
        if lossless(from, *wide) && !int_via_float {
            out.push(if *target == from { Rhs::class(*source) } else { Rhs::op(Op::Convert(*target), &[*source]) });
            return;
        }
    }
}
