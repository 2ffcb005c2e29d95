//! Per-channel scales and shifts folded into the product before them: what an inference batch
//! norm becomes after import (`(conv(x, W) + b - mean) * invstd * gamma + beta`) turns into
//! `conv(x, W * s) + t`, with `s` and `t` computed from weights alone.
//!
//! Every rule here reads broadcasts of *resident* values (computed from resident inputs and
//! constants alone, see `FuseOptions::resident_inputs`) of a float dtype, so the arithmetic they
//! move (`W * s`, `(b - mean) * s + beta`) is weight-only work that the driver's load-time split
//! does once. The per-call program keeps one product and one broadcast add.
//!
//! Classes: `subtract-broadcast-as-add` is exact (IEEE 754 defines `x - y` as `x + (-y)`, and
//! negation is exact), but it only serves the folds, so it runs with them. The others reassociate
//! or distribute products and sums, which changes rounding: they are fast-math rules. Measured
//! with `ttpu parity --fast-math` against the exact optimizer's outputs (f32, every batch norm
//! that follows a convolution folded): `tv_resnet18` differs by 4.9e-6 at most (its exact outputs
//! are 3.6e-6 from PyTorch's), `tv_efficientnet_b0` by 4.7e-5 (8.6e-5), `tv_densenet121` by
//! 9.1e-6 (2.9e-6), `cnn` by 4.5e-8 (6.0e-8); every fixture still passes its tolerances
//! (docs/numerics.md, "Fast-math rules").

use egg::Id;
use smallvec::SmallVec;
use ttpu_ir::{BinaryOp, ConvDims, Dim, DotDims, Op, Shape, TensorType, UnaryOp};

use super::layout::broadcasts;
use super::{Part, Rhs, Rule, nodes_of, split};
use crate::analysis::{FuseGraph, data};
use crate::lang::FNode;

pub(super) const RULES: &[Rule] = &[
    // y - broadcast(b) -> y + broadcast(-b), for a product y (or a product plus a shift) and a
    // resident b. Exact: IEEE 754 defines subtraction as adding the negation, and negating is
    // exact. Runs with the fast-math rules because only they use the sum it makes.
    Rule { name: "subtract-broadcast-as-add", search: subtract_broadcast_as_add },
    // (y + broadcast(a)) + broadcast(b) -> y + broadcast(a + b), for resident a and b broadcast
    // alike. Fast-math: one rounding of a + b replaces one per-call rounding.
    Rule { name: "merge-broadcast-shifts", search: merge_broadcast_shifts },
    // (y * broadcast(a)) * broadcast(b) -> y * broadcast(a * b), likewise. Fast-math.
    Rule { name: "merge-broadcast-scales", search: merge_broadcast_scales },
    // (p + broadcast(b)) * broadcast(s) -> p * broadcast(s) + broadcast(b * s), for a product p
    // (convolution or dot_general) and resident b and s broadcast alike: moves the shift past the
    // scale so the scale meets the product. Fast-math: distributing rounds differently, and where
    // p * s and b * s nearly cancel the error is relative to them, not to the result (as in
    // PyTorch's own conv-batch-norm fusion).
    Rule { name: "distribute-scale-over-shift", search: distribute_scale_over_shift },
    // convolution(x, W) * broadcast(s) -> convolution(x, W * broadcast'(s)), when s varies only
    // along the result's output-feature dim (any layout: read from the dimension numbers) and
    // broadcast' puts it along the kernel's output-feature dim. Each output feature is a sum of
    // products with that feature's kernel slice alone, feature and batch groups included, so
    // scaling the slice scales the feature. Fast-math: (sum x*w)*s != sum x*(w*s) in rounding.
    Rule { name: "fold-scale-into-convolution", search: fold_scale_into_convolution },
    // dot_general(l, r) * broadcast(s) -> dot_general(l, r * broadcast'(s)) when s varies only
    // along batch dims and r's free dims (a linear layer's output columns), and the same into l
    // for l's free dims. Fast-math, as above.
    Rule { name: "fold-scale-into-dot", search: fold_scale_into_dot },
];

/// A broadcast of a resident value: `(source, dims, shape)` of the `broadcast_in_dim`.
type Broadcast<'a> = (Id, &'a SmallVec<[i64; 4]>, &'a Shape);

/// The broadcasts of resident float values in class `id`.
fn resident_broadcasts(egraph: &FuseGraph, id: Id) -> impl Iterator<Item = Broadcast<'_>> {
    broadcasts(egraph, id).filter(|(source, _, _)| {
        let source = data(egraph, *source);
        source.resident && source.dtype().is_float()
    })
}

/// `(other operand, broadcast)` pairs of a binary `want` node, the broadcast on either side.
fn over_broadcasts<'a>(egraph: &'a FuseGraph, op: &Op, operands: &[Id], want: BinaryOp) -> Vec<(Id, Broadcast<'a>)> {
    let mut res = Vec::new();
    if let (Op::Binary(binary), [lhs, rhs]) = (op, operands)
        && *binary == want
    {
        for (other, broadcast) in [(*lhs, *rhs), (*rhs, *lhs)] {
            res.extend(resident_broadcasts(egraph, broadcast).map(|found| (other, found)));
        }
    }
    res
}

/// Whether two broadcasts put sources of one type into one shape the same way, so their sources
/// combine elementwise.
fn alike(egraph: &FuseGraph, first: &Broadcast<'_>, second: &Broadcast<'_>) -> bool {
    first.1 == second.1 && first.2 == second.2 && data(egraph, first.0).ty == data(egraph, second.0).ty
}

/// Whether class `id` holds a convolution or a dot_general.
fn is_product(egraph: &FuseGraph, id: Id) -> bool {
    nodes_of(egraph, id).any(|(op, _)| matches!(op, Op::Convolution(_) | Op::DotGeneral(_)))
}

/// Whether class `id` holds a product, or a product plus a broadcast.
fn is_shifted_product(egraph: &FuseGraph, id: Id) -> bool {
    is_product(egraph, id)
        || nodes_of(egraph, id).any(|(op, operands)| {
            over_broadcasts(egraph, op, operands, BinaryOp::Add).iter().any(|(other, _)| is_product(egraph, *other))
        })
}

/// `broadcast_in_dim(source, dims, shape)` in `rhs`, over a new node built from `source`.
fn broadcast(rhs: &mut Rhs, source: Part, (_, dims, shape): &Broadcast<'_>) -> Part {
    rhs.node(Op::BroadcastInDim { dims: (*dims).clone(), shape: (*shape).clone() }, &[source])
}

fn subtract_broadcast_as_add(egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    let Some((Op::Binary(BinaryOp::Subtract), [lhs, rhs])) = split(node) else { return };
    if !is_shifted_product(egraph, *lhs) {
        return;
    }
    if let Some(found) = resident_broadcasts(egraph, *rhs).next() {
        let mut res = Rhs::new();
        let y = res.existing(*lhs);
        let source = res.existing(found.0);
        let negated = res.node(Op::Unary(UnaryOp::Negate), &[source]);
        let shift = broadcast(&mut res, negated, &found);
        res.node(Op::Binary(BinaryOp::Add), &[y, shift]);
        out.push(res);
    }
}

/// `(y op broadcast(a)) op broadcast(b) -> y op broadcast(a op b)`.
fn merge(egraph: &FuseGraph, node: &FNode, want: BinaryOp, out: &mut Vec<Rhs>) {
    let Some((op, operands)) = split(node) else { return };
    for (inner, outer) in over_broadcasts(egraph, op, operands, want) {
        for (inner_op, inner_operands) in nodes_of(egraph, inner) {
            for (y, first) in over_broadcasts(egraph, inner_op, inner_operands, want) {
                if !alike(egraph, &first, &outer) {
                    continue;
                }
                let mut res = Rhs::new();
                let y = res.existing(y);
                let sources = [res.existing(first.0), res.existing(outer.0)];
                let combined = res.node(Op::Binary(want), &sources);
                let combined = broadcast(&mut res, combined, &outer);
                res.node(Op::Binary(want), &[y, combined]);
                out.push(res);
                return;
            }
        }
    }
}

fn merge_broadcast_shifts(egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    merge(egraph, node, BinaryOp::Add, out);
}

fn merge_broadcast_scales(egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    merge(egraph, node, BinaryOp::Multiply, out);
}

fn distribute_scale_over_shift(egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    let Some((op, operands)) = split(node) else { return };
    for (inner, scale) in over_broadcasts(egraph, op, operands, BinaryOp::Multiply) {
        for (inner_op, inner_operands) in nodes_of(egraph, inner) {
            for (product, shift) in over_broadcasts(egraph, inner_op, inner_operands, BinaryOp::Add) {
                if !is_product(egraph, product) || !alike(egraph, &shift, &scale) {
                    continue;
                }
                let mut res = Rhs::new();
                let product = res.existing(product);
                let scale_source = res.existing(scale.0);
                let shift_source = res.existing(shift.0);
                let scale_part = broadcast(&mut res, scale_source, &scale);
                let scaled = res.node(Op::Binary(BinaryOp::Multiply), &[product, scale_part]);
                let new_shift = res.node(Op::Binary(BinaryOp::Multiply), &[shift_source, scale_source]);
                let new_shift = broadcast(&mut res, new_shift, &scale);
                res.node(Op::Binary(BinaryOp::Add), &[scaled, new_shift]);
                out.push(res);
                return;
            }
        }
    }
}

/// For each dim of `source` that is not of size 1, the result dim the broadcast puts it on,
/// mapped by `to_operand` to the operand dim it scales; `None` when a dim lands on a result dim
/// `to_operand` does not map (the scale varies along a dim the operand does not own).
fn operand_dims(source: &TensorType, dims: &[i64], to_operand: impl Fn(i64) -> Option<i64>) -> Option<Vec<(Dim, i64)>> {
    source
        .shape
        .dims()
        .iter()
        .zip(dims)
        .filter(|(size, _)| **size != Dim::Static(1))
        .map(|(size, &result_dim)| to_operand(result_dim).map(|operand_dim| (size.clone(), operand_dim)))
        .collect()
}

/// `operand * broadcast(reshape(source))` in `rhs`: the source's dims that are not of size 1 put
/// on the operand dims `kept` names.
fn scaled_operand(rhs: &mut Rhs, egraph: &FuseGraph, operand: Id, source: Id, kept: &[(Dim, i64)]) -> Part {
    let source_ty = &data(egraph, source).ty;
    let operand_shape = data(egraph, operand).ty.shape.clone();
    let operand = rhs.existing(operand);
    let mut scale = rhs.existing(source);
    if source_ty.rank() != kept.len() {
        let shape: Shape = kept.iter().map(|(size, _)| size.clone()).collect();
        scale = rhs.node(Op::Reshape(shape), &[scale]);
    }
    let dims = kept.iter().map(|&(_, dim)| dim).collect();
    let scale = rhs.node(Op::BroadcastInDim { dims, shape: operand_shape }, &[scale]);
    rhs.node(Op::Binary(BinaryOp::Multiply), &[operand, scale])
}

fn fold_scale_into_convolution(egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    let Some((op, operands)) = split(node) else { return };
    for (product, (source, dims, _)) in over_broadcasts(egraph, op, operands, BinaryOp::Multiply) {
        for (product_op, product_operands) in nodes_of(egraph, product) {
            let (Op::Convolution(conv), [input, kernel]) = (product_op, product_operands) else { continue };
            let to_kernel = |dim: i64| (dim == conv.output_feature).then_some(conv.kernel_output_feature);
            let Some(kept) = operand_dims(&data(egraph, source).ty, dims, to_kernel) else { continue };
            out.push(folded_convolution(egraph, conv, *input, *kernel, source, &kept));
            return;
        }
    }
}

fn folded_convolution(
    egraph: &FuseGraph,
    conv: &ConvDims,
    input: Id,
    kernel: Id,
    source: Id,
    kept: &[(Dim, i64)],
) -> Rhs {
    let mut res = Rhs::new();
    let input = res.existing(input);
    let kernel = scaled_operand(&mut res, egraph, kernel, source, kept);
    res.node(Op::Convolution(conv.clone()), &[input, kernel]);
    res
}

/// The operand dim of result dim `dim` of a dot_general, for the lhs (`lhs` true) or the rhs,
/// when it is a batch dim or one of that side's free dims.
fn dot_operand_dim(dot: &DotDims, ranks: (usize, usize), lhs: bool, dim: i64) -> Option<i64> {
    let free = |rank: usize, batch: &[i64], contracting: &[i64]| -> Vec<i64> {
        (0..rank as i64).filter(|dim| !batch.contains(dim) && !contracting.contains(dim)).collect()
    };
    let lhs_free = free(ranks.0, &dot.lhs_batch, &dot.lhs_contracting);
    let rhs_free = free(ranks.1, &dot.rhs_batch, &dot.rhs_contracting);
    let n_batch = dot.lhs_batch.len() as i64;
    let n_lhs_free = lhs_free.len() as i64;
    match (dim < n_batch, lhs) {
        (true, true) => dot.lhs_batch.get(dim as usize).copied(),
        (true, false) => dot.rhs_batch.get(dim as usize).copied(),
        (false, true) => lhs_free.get((dim - n_batch) as usize).copied(),
        (false, false) => (dim >= n_batch + n_lhs_free)
            .then(|| rhs_free.get((dim - n_batch - n_lhs_free) as usize).copied())
            .flatten(),
    }
}

fn fold_scale_into_dot(egraph: &FuseGraph, node: &FNode, out: &mut Vec<Rhs>) {
    let Some((op, operands)) = split(node) else { return };
    for (product, (source, dims, _)) in over_broadcasts(egraph, op, operands, BinaryOp::Multiply) {
        for (product_op, product_operands) in nodes_of(egraph, product) {
            let (Op::DotGeneral(dot), [lhs, rhs]) = (product_op, product_operands) else { continue };
            let ranks = (data(egraph, *lhs).ty.rank(), data(egraph, *rhs).ty.rank());
            let source_ty = &data(egraph, source).ty;
            for into_lhs in [true, false] {
                let to_operand = |dim: i64| dot_operand_dim(dot, ranks, into_lhs, dim);
                let Some(kept) = operand_dims(source_ty, dims, to_operand) else { continue };
                let mut res = Rhs::new();
                let (lhs, rhs) = if into_lhs {
                    let scaled = scaled_operand(&mut res, egraph, *lhs, source, &kept);
                    (scaled, res.existing(*rhs))
                } else {
                    let lhs = res.existing(*lhs);
                    (lhs, scaled_operand(&mut res, egraph, *rhs, source, &kept))
                };
                res.node(Op::DotGeneral(dot.clone()), &[lhs, rhs]);
                out.push(res);
            }
            return;
        }
    }
}
