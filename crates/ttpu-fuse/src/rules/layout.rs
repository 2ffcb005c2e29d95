//! Data movement: transposes, reshapes and broadcasts that compose, vanish, or fold into their user.
//!
//! These rules only move elements, so they are exact for every dtype.

use egg::Id;
use smallvec::SmallVec;
use ttpu_ir::{Dim, DotDims, Op, ReduceKind};

use super::{Rhs, Rule, nodes_of, split};
use crate::analysis::{FuseGraph, data};
use crate::lang::FNode;

pub(super) const RULES: &[Rule] = &[
    // transpose(transpose(x, p), q) == transpose(x, [p[q[i]]]): result dim i is x dim p[q[i]];
    // when that is the identity the pair vanishes.
    Rule { name: "transpose-transpose", search: transpose_transpose },
    // transpose(x, [0, 1, ..]) == x: the identity permutation moves nothing.
    Rule { name: "transpose-identity", search: transpose_identity },
    // reshape(reshape(x)) == reshape(x): a row-major reshape only reinterprets the dims.
    Rule { name: "reshape-reshape", search: reshape_reshape },
    // reshape(x) == x when the result type is the operand's type.
    Rule { name: "reshape-identity", search: reshape_identity },
    // broadcast(broadcast(x, d1), d2) == broadcast(x, [d2[d1[i]]]): each element still comes from
    // the same element of x.
    Rule { name: "broadcast-broadcast", search: broadcast_broadcast },
    // broadcast_in_dim(x, [0, 1, ..]) == x when the result type is the operand's type.
    Rule { name: "broadcast-identity", search: broadcast_identity },
    // transpose(broadcast(x, d), p) == broadcast(x, [p^-1[d[i]]]) into the permuted shape: both
    // put x's element at the same place, so one data movement does the work of two.
    Rule { name: "transpose-broadcast", search: transpose_broadcast },
    // dot_general(transpose(a, p), b) == dot_general(a, b) with a's dim numbers mapped through p,
    // when p keeps a's free dims in order (so the result layout is unchanged). The same pairs of
    // elements are multiplied and summed in the same contraction order.
    Rule { name: "dot-transpose-lhs", search: dot_transpose_lhs },
    // The same for the rhs operand.
    Rule { name: "dot-transpose-rhs", search: dot_transpose_rhs },
    // op(broadcast(a), broadcast(b)) == broadcast(op(a, b)) when a and b have one type and the
    // broadcasts have the same dims: an elementwise op commutes with replicating its inputs.
    Rule { name: "elementwise-broadcast", search: elementwise_broadcast },
    // reduce(broadcast(x), new dims) == broadcast(x) without those dims, for max, min, and, or:
    // they are idempotent, so combining n >= 1 copies of a value gives the value.
    Rule { name: "reduce-broadcast", search: reduce_broadcast },
];

fn is_iota(values: &[i64]) -> bool {
    values.iter().enumerate().all(|(index, &value)| value == index as i64)
}

fn transpose_transpose(egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    let Some((Op::Transpose(outer), [operand])) = split(node) else { return };
    for (op, operands) in nodes_of(egraph, *operand) {
        if let (Op::Transpose(inner), [source]) = (op, operands) {
            let composed: SmallVec<[i64; 4]> = outer.iter().map(|&dim| inner[dim as usize]).collect();
            out.push(if is_iota(&composed) {
                Rhs::class(*source)
            } else {
                Rhs::op(Op::Transpose(composed), &[*source])
            });
            return;
        }
    }
}

fn transpose_identity(_egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    if let Some((Op::Transpose(permutation), [operand])) = split(node)
        && is_iota(permutation)
    {
        out.push(Rhs::class(*operand));
    }
}

fn reshape_reshape(egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    let Some((Op::Reshape(shape), [operand])) = split(node) else { return };
    for (op, operands) in nodes_of(egraph, *operand) {
        if let (Op::Reshape(_), [source]) = (op, operands) {
            out.push(if data(egraph, *source).ty.shape == *shape {
                Rhs::class(*source)
            } else {
                Rhs::op(Op::Reshape(shape.clone()), &[*source])
            });
            return;
        }
    }
}

fn reshape_identity(egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    if let Some((Op::Reshape(shape), [operand])) = split(node)
        && data(egraph, *operand).ty.shape == *shape
    {
        out.push(Rhs::class(*operand));
    }
}

fn broadcast_broadcast(egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    let Some((Op::BroadcastInDim { dims: outer, shape }, [operand])) = split(node) else { return };
    for (op, operands) in nodes_of(egraph, *operand) {
        if let (Op::BroadcastInDim { dims: inner, .. }, [source]) = (op, operands) {
            let dims = inner.iter().map(|&dim| outer[dim as usize]).collect();
            out.push(Rhs::op(Op::BroadcastInDim { dims, shape: shape.clone() }, &[*source]));
            return;
        }
    }
}

fn broadcast_identity(egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    if let Some((Op::BroadcastInDim { dims, shape }, [operand])) = split(node)
        && is_iota(dims)
        && data(egraph, *operand).ty.shape == *shape
    {
        out.push(Rhs::class(*operand));
    }
}

fn transpose_broadcast(egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    let Some((Op::Transpose(permutation), [operand])) = split(node) else { return };
    let Some((source, dims, shape)) = broadcasts(egraph, *operand).next() else { return };
    let mut inverse = vec![0i64; permutation.len()];
    for (result_dim, &operand_dim) in permutation.iter().enumerate() {
        inverse[operand_dim as usize] = result_dim as i64;
    }
    let dims = dims.iter().map(|&dim| inverse[dim as usize]).collect();
    let shape = permutation.iter().map(|&dim| shape[dim as usize].clone()).collect();
    out.push(Rhs::op(Op::BroadcastInDim { dims, shape }, &[source]));
}

/// Maps dim numbers of a transposed operand back through `permutation`, or `None` when the free
/// dims would come out in another order.
fn untranspose(permutation: &[i64], batch: &[i64], contracting: &[i64]) -> Option<(Vec<i64>, Vec<i64>)> {
    let free: Vec<i64> = (0..permutation.len() as i64)
        .filter(|dim| !batch.contains(dim) && !contracting.contains(dim))
        .map(|dim| permutation[dim as usize])
        .collect();
    if free.windows(2).any(|pair| pair[0] >= pair[1]) {
        return None;
    }
    let map = |dims: &[i64]| dims.iter().map(|&dim| permutation[dim as usize]).collect();
    Some((map(batch), map(contracting)))
}

fn dot_transpose_lhs(egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    let Some((Op::DotGeneral(dims), [lhs, rhs])) = split(node) else { return };
    for (op, operands) in nodes_of(egraph, *lhs) {
        if let (Op::Transpose(permutation), [source]) = (op, operands)
            && let Some((lhs_batch, lhs_contracting)) = untranspose(permutation, &dims.lhs_batch, &dims.lhs_contracting)
        {
            let dims = DotDims { lhs_batch: lhs_batch.into(), lhs_contracting: lhs_contracting.into(), ..dims.clone() };
            out.push(Rhs::op(Op::DotGeneral(dims), &[*source, *rhs]));
            return;
        }
    }
}

fn dot_transpose_rhs(egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    let Some((Op::DotGeneral(dims), [lhs, rhs])) = split(node) else { return };
    for (op, operands) in nodes_of(egraph, *rhs) {
        if let (Op::Transpose(permutation), [source]) = (op, operands)
            && let Some((rhs_batch, rhs_contracting)) = untranspose(permutation, &dims.rhs_batch, &dims.rhs_contracting)
        {
            let dims = DotDims { rhs_batch: rhs_batch.into(), rhs_contracting: rhs_contracting.into(), ..dims.clone() };
            out.push(Rhs::op(Op::DotGeneral(dims), &[*lhs, *source]));
            return;
        }
    }
}

/// The operand and attributes of a `broadcast_in_dim` in class `id`.
pub(super) fn broadcasts(
    egraph: &FuseGraph,
    id: Id,
) -> impl Iterator<Item = (Id, &SmallVec<[i64; 4]>, &ttpu_ir::Shape)> {
    nodes_of(egraph, id).filter_map(|(op, operands)| match (op, operands) {
        (Op::BroadcastInDim { dims, shape }, [source]) => Some((*source, dims, shape)),
        _ => None,
    })
}

fn elementwise_broadcast(egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    let Some((op, operands)) = split(node) else { return };
    if !matches!(op, Op::Unary(_) | Op::Binary(_) | Op::Compare(_) | Op::Convert(_)) {
        return;
    }
    let Some(&first) = operands.first() else { return };
    for (source, dims, shape) in broadcasts(egraph, first) {
        let source_ty = &data(egraph, source).ty;
        // Only a real expansion is worth it, and the operands must all be broadcast the same way.
        if &source_ty.shape == shape {
            continue;
        }
        let mut sources: SmallVec<[Id; 3]> = SmallVec::new();
        sources.push(source);
        for &operand in &operands[1..] {
            let Some(found) = broadcasts(egraph, operand)
                .find(|(other, other_dims, _)| other_dims == &dims && data(egraph, *other).ty == *source_ty)
            else {
                break;
            };
            sources.push(found.0);
        }
        if sources.len() != operands.len() {
            continue;
        }
        let mut rhs = super::Rhs::new();
        let parts: SmallVec<[super::Part; 3]> = sources.iter().map(|&id| rhs.existing(id)).collect();
        let inner = rhs.node(op.clone(), &parts);
        rhs.node(Op::BroadcastInDim { dims: dims.clone(), shape: shape.clone() }, &[inner]);
        out.push(rhs);
        return;
    }
}

fn reduce_broadcast(egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    let Some((Op::Reduce { kind, dimensions }, [operand])) = split(node) else { return };
    if !matches!(kind, ReduceKind::Max | ReduceKind::Min | ReduceKind::And | ReduceKind::Or) {
        return;
    }
    for (source, dims, shape) in broadcasts(egraph, *operand) {
        let only_new_dims = dimensions.iter().all(|dim| !dims.contains(dim));
        let all_non_empty = dimensions.iter().all(|&dim| matches!(shape[dim as usize], Dim::Static(size) if size >= 1));
        if !only_new_dims || !all_non_empty {
            continue;
        }
        let kept: Vec<i64> = (0..shape.rank() as i64).filter(|dim| !dimensions.contains(dim)).collect();
        let new_dims = dims.iter().map(|dim| kept.iter().position(|kept_dim| kept_dim == dim).expect("kept") as i64);
        let new_shape = kept.iter().map(|&dim| shape[dim as usize].clone()).collect();
        out.push(Rhs::op(Op::BroadcastInDim { dims: new_dims.collect(), shape: new_shape }, &[source]));
        return;
    }
}
