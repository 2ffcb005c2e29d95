//! Slices, concatenations and padding that compose or vanish. All of them only move elements.

use smallvec::SmallVec;
use ttpu_ir::{Dim, Op};

use super::{Rhs, Rule, nodes_of, split};
use crate::analysis::{FuseGraph, data};
use crate::lang::FNode;

pub(super) const RULES: &[Rule] = &[
    // slice(x, 0, dims, 1) == x: the slice takes every element in order.
    Rule { name: "slice-identity", search: slice_identity },
    // slice(slice(x, s1, _, t1), s2, _, t2) == slice(x, s1 + s2 * t1, _, t1 * t2): index j of the
    // outer slice is index s1 + (s2 + j * t2) * t1 of x.
    Rule { name: "slice-slice", search: slice_slice },
    // concatenate(slice(x, [a, b)), slice(x, [b, c))) == slice(x, [a, c)) along the concatenated dim,
    // for unit-stride slices that take all of every other dim.
    Rule { name: "concat-slices", search: concat_slices },
    // pad(x, v) with zero low, high and interior padding == x, whatever v is.
    Rule { name: "pad-zero", search: pad_zero },
];

fn slice_identity(egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    if let Some((Op::Slice { start, limit, strides }, [operand])) = split(node)
        && start.iter().all(|&begin| begin == 0)
        && strides.iter().all(|&stride| stride == 1)
        && data(egraph, *operand).ty.shape.dims() == limit.as_slice()
    {
        out.push(Rhs::class(*operand));
    }
}

fn slice_slice(egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    let Some((Op::Slice { start: outer_start, limit: outer_limit, strides: outer_strides }, [operand])) = split(node)
    else {
        return;
    };
    for (op, operands) in nodes_of(egraph, *operand) {
        let (Op::Slice { start, strides, .. }, [source]) = (op, operands) else { continue };
        // Symbolic limits do not compose by this arithmetic.
        let Some(outer_limit) = static_limits(outer_limit) else { return };
        let mut new_start = SmallVec::new();
        let mut new_limit = SmallVec::new();
        let mut new_strides = SmallVec::new();
        for dim in 0..start.len() {
            let (begin, end, stride) = (outer_start[dim], outer_limit[dim], outer_strides[dim]);
            let count = if end == begin { 0 } else { (end - begin - 1) / stride + 1 };
            if count == 0 {
                // An empty result: keep the rule simple and leave it alone.
                return;
            }
            let first = start[dim] + begin * strides[dim];
            let step = stride * strides[dim];
            new_start.push(first);
            new_limit.push(Dim::Static(first + (count - 1) * step + 1));
            new_strides.push(step);
        }
        out.push(Rhs::op(Op::Slice { start: new_start, limit: new_limit, strides: new_strides }, &[*source]));
        return;
    }
}

fn concat_slices(egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    let Some((Op::Concatenate(axis), operands)) = split(node) else { return };
    let axis = *axis as usize;
    if operands.len() < 2 {
        return;
    }
    // The first operand decides the source; every operand must be a slice of it.
    let full_other_dims = |start: &[i64], limit: &[Dim], strides: &[i64], sizes: &[i64]| {
        (0..start.len())
            .all(|dim| strides[dim] == 1 && (dim == axis || (start[dim] == 0 && limit[dim] == Dim::Static(sizes[dim]))))
    };
    for (op, first_operands) in nodes_of(egraph, operands[0]) {
        let (Op::Slice { start, limit, .. }, [source]) = (op, first_operands) else { continue };
        let Some(sizes) = data(egraph, *source).ty.shape.as_static() else { return };
        let mut next = start[axis];
        let mut all = true;
        for &operand in operands {
            let found = nodes_of(egraph, operand).find_map(|(op, slice_operands)| match (op, slice_operands) {
                (Op::Slice { start, limit, strides }, [other])
                    if egraph.find(*other) == egraph.find(*source)
                        && start[axis] == next
                        && full_other_dims(start, limit, strides, &sizes) =>
                {
                    limit[axis].as_static()
                }
                _ => None,
            });
            match found {
                Some(end) => next = end,
                None => {
                    all = false;
                    break;
                }
            }
        }
        if !all {
            continue;
        }
        let mut new_start = start.clone();
        let mut new_limit = limit.clone();
        new_start[axis] = start[axis];
        new_limit[axis] = Dim::Static(next);
        let strides = SmallVec::from_elem(1, start.len());
        out.push(Rhs::op(Op::Slice { start: new_start, limit: new_limit, strides }, &[*source]));
        return;
    }
}

fn pad_zero(_egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    if let Some((Op::Pad { low, high, interior }, [operand, _value])) = split(node)
        && low.iter().chain(high).chain(interior).all(|&amount| amount == 0)
    {
        out.push(Rhs::class(*operand));
    }
}

/// Every limit, if all are static.
fn static_limits(limit: &[Dim]) -> Option<SmallVec<[i64; 4]>> {
    limit.iter().map(Dim::as_static).collect()
}
