//! Neutral elements and involutions that are exact in IEEE arithmetic.
//!
//! Deliberately absent: `x - x -> 0` (NaN and infinities give NaN), `x * 0 -> 0` (NaN, infinities
//! and the sign of zero), and `x + 0.0 -> x` (`-0.0 + 0.0` is `+0.0`).

use egg::Id;
use ttpu_ir::{BinaryOp, Op, UnaryOp};

use super::{Rhs, Rule, split};
use crate::analysis::{FuseGraph, data};

pub(super) const RULES: &[Rule] = &[
    // x * 1 == x for every float (NaN, infinities and -0.0 included) and every integer; bool
    // `multiply` is `and`, and `x and true == x`. Either operand may be the one.
    Rule { name: "mul-one", search: mul_one },
    // x + (-0.0) == x for every float: -0.0 is the only exact additive identity (0.0 + -0.0 is 0.0).
    Rule { name: "add-neg-zero", search: add_neg_zero },
    // x + 0 == x for integers, which have no signed zero.
    Rule { name: "add-zero-int", search: add_zero_int },
    // x - 0.0 == x + (-0.0) == x for every float, and x - 0 == x for integers.
    Rule { name: "sub-zero", search: sub_zero },
    // x / 1 == x for every float (correctly rounded division of x by 1 is x) and integer.
    Rule { name: "div-one", search: div_one },
    // -(-x) == x: negation only flips the sign bit of floats, and wraps in two's complement.
    Rule { name: "neg-neg", search: neg_neg },
    // select(true, a, b) == a and select(false, a, b) == b for a constant predicate.
    Rule { name: "select-const-pred", search: select_const_pred },
];

fn binary(node: &crate::lang::FNode, want: BinaryOp) -> Option<(Id, Id)> {
    match split(node)? {
        (Op::Binary(op), [lhs, rhs]) if *op == want => Some((*lhs, *rhs)),
        _ => None,
    }
}

fn mul_one(egraph: &FuseGraph, node: &crate::lang::FNode, out: &mut Vec<Rhs>) {
    let Some((lhs, rhs)) = binary(node, BinaryOp::Multiply) else { return };
    if data(egraph, rhs).is_splat(1.0) {
        out.push(Rhs::class(lhs));
    } else if data(egraph, lhs).is_splat(1.0) {
        out.push(Rhs::class(rhs));
    }
}

fn add_neg_zero(egraph: &FuseGraph, node: &crate::lang::FNode, out: &mut Vec<Rhs>) {
    let Some((lhs, rhs)) = binary(node, BinaryOp::Add) else { return };
    if !data(egraph, lhs).dtype().is_float() {
        return;
    }
    if data(egraph, rhs).is_splat(-0.0) {
        out.push(Rhs::class(lhs));
    } else if data(egraph, lhs).is_splat(-0.0) {
        out.push(Rhs::class(rhs));
    }
}

fn add_zero_int(egraph: &FuseGraph, node: &crate::lang::FNode, out: &mut Vec<Rhs>) {
    let Some((lhs, rhs)) = binary(node, BinaryOp::Add) else { return };
    if !data(egraph, lhs).dtype().is_integer() {
        return;
    }
    if data(egraph, rhs).is_splat(0.0) {
        out.push(Rhs::class(lhs));
    } else if data(egraph, lhs).is_splat(0.0) {
        out.push(Rhs::class(rhs));
    }
}

fn sub_zero(egraph: &FuseGraph, node: &crate::lang::FNode, out: &mut Vec<Rhs>) {
    let Some((lhs, rhs)) = binary(node, BinaryOp::Subtract) else { return };
    let dtype = data(egraph, lhs).dtype();
    if (dtype.is_float() || dtype.is_integer()) && data(egraph, rhs).is_splat(0.0) {
        out.push(Rhs::class(lhs));
    }
}

fn div_one(egraph: &FuseGraph, node: &crate::lang::FNode, out: &mut Vec<Rhs>) {
    let Some((lhs, rhs)) = binary(node, BinaryOp::Divide) else { return };
    if data(egraph, rhs).is_splat(1.0) {
        out.push(Rhs::class(lhs));
    }
}

fn neg_neg(egraph: &FuseGraph, node: &crate::lang::FNode, out: &mut Vec<Rhs>) {
    let Some((Op::Unary(UnaryOp::Negate), [operand])) = split(node) else { return };
    for (op, operands) in super::nodes_of(egraph, *operand) {
        if let (Op::Unary(UnaryOp::Negate), [inner]) = (op, operands) {
            out.push(Rhs::class(*inner));
            return;
        }
    }
}

fn select_const_pred(egraph: &FuseGraph, node: &crate::lang::FNode, out: &mut Vec<Rhs>) {
    let Some((Op::Select, [pred, on_true, on_false])) = split(node) else { return };
    if data(egraph, *pred).is_splat(1.0) {
        out.push(Rhs::class(*on_true));
    } else if data(egraph, *pred).is_splat(0.0) {
        out.push(Rhs::class(*on_false));
    }
}
