//! Rewrites that change rounding: only with `FuseOptions::fast_math`.
//!
//! Each one trades bit-exactness for fewer ops, the way `-ffast-math` does; results stay close but
//! not identical.

use egg::Id;
use ttpu_ir::{BinaryOp, Op, Scalar};

use super::fold::{Elements, eval_binary, literal, map_elements};
use super::{Part, Rhs, Rule, nodes_of, split};
use crate::analysis::{FuseGraph, data};
use crate::lang::FNode;

pub(super) const RULES: &[Rule] = &[
    // (x + c1) + c2 -> x + (c1 + c2): reassociation rounds once instead of twice (not exact).
    Rule { name: "reassoc-add-const", search: reassoc_add_const },
    // (x * c1) * c2 -> x * (c1 * c2): reassociation, as above (not exact).
    Rule { name: "reassoc-mul-const", search: reassoc_mul_const },
    // x / c -> x * (1 / c) for a float constant c: 1 / c is rounded, so the product may differ in
    // the last bit.
    Rule { name: "div-const-reciprocal", search: div_const_reciprocal },
];

fn is_constant(egraph: &FuseGraph, id: Id) -> bool {
    let data = data(egraph, id);
    data.splat.is_some() || data.value.is_some()
}

/// `(other, constant)` operands of a `want` node, the constant on either side.
fn with_constant(egraph: &FuseGraph, op: &Op, operands: &[Id], want: BinaryOp) -> Option<(Id, Id)> {
    match (op, operands) {
        (Op::Binary(binary), [lhs, rhs]) if *binary == want => {
            if is_constant(egraph, *rhs) && !is_constant(egraph, *lhs) {
                Some((*lhs, *rhs))
            } else if is_constant(egraph, *lhs) && !is_constant(egraph, *rhs) {
                Some((*rhs, *lhs))
            } else {
                None
            }
        }
        _ => None,
    }
}

fn reassociate(egraph: &FuseGraph, node: &FNode, want: BinaryOp, out: &mut Vec<Rhs>) {
    let Some((op, operands)) = split(node) else { return };
    let Some((inner, outer_constant)) = with_constant(egraph, op, operands, want) else { return };
    for (inner_op, inner_operands) in nodes_of(egraph, inner) {
        if let Some((x, inner_constant)) = with_constant(egraph, inner_op, inner_operands, want) {
            let mut rhs = Rhs::new();
            let x = rhs.existing(x);
            let constants = [rhs.existing(inner_constant), rhs.existing(outer_constant)];
            let combined = rhs.node(Op::Binary(want), &constants);
            rhs.node(Op::Binary(want), &[x, combined]);
            out.push(rhs);
            return;
        }
    }
}

fn reassoc_add_const(egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    reassociate(egraph, node, BinaryOp::Add, out);
}

fn reassoc_mul_const(egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    reassociate(egraph, node, BinaryOp::Multiply, out);
}

fn div_const_reciprocal(egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    let Some((Op::Binary(BinaryOp::Divide), [lhs, rhs])) = split(node) else { return };
    let divisor = data(egraph, *rhs);
    let dtype = divisor.dtype();
    if !dtype.is_float() {
        return;
    }
    let reciprocal =
        map_elements(&[divisor], |values| eval_binary(BinaryOp::Divide, dtype, Scalar::Float(1.0), values[0]));
    let Some(literal) = reciprocal.and_then(|elements: Elements| literal(dtype, &divisor.ty.shape, elements)) else {
        return;
    };
    let mut res = Rhs::new();
    let x: Part = res.existing(*lhs);
    let constant = res.node(Op::Constant(literal), &[]);
    res.node(Op::Binary(BinaryOp::Multiply), &[x, constant]);
    out.push(res);
}
