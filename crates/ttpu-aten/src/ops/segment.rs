//! `segment_reduce`: reductions over consecutive segments of a dim whose lengths (or offsets) are
//! data.
//!
//! Each segment is a mask over the dim's positions (`start <= p < end`, the ends a running sum of
//! the lengths), and every segment reduces the data with its mask at once: a `[segments, n]`
//! selection per batch. As in PyTorch's kernel, `initial` joins every segment (a segment without
//! elements gives it, or the reduction's identity: 0, 1, -inf, inf, and NaN for a mean), and a
//! mean divides the sum, `initial` included, by the segment's own length.

use ttpu_ir::{BinaryOp, CompareDirection, DType, DotDims, Literal, ReduceKind, Scalar, Shape, TensorType};

use super::elementwise::tensor;
use crate::args::Args;
use crate::ctx::{Cx, Imported};
use crate::error::Result;

/// `segment_reduce(data, reduce, *, lengths, indices, offsets, axis, unsafe, initial)`.
pub(super) fn segment_reduce(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let data = args.tensor("data")?;
    let dtype = cx.dtype(data);
    if !dtype.is_float() {
        return Err(cx.bad(format!("segment_reduce takes floating-point data, found {}", cx.ty(data))));
    }
    let reduce = args.opt_str("reduce")?.unwrap_or("").to_owned();
    let kind = match reduce.as_str() {
        "sum" | "mean" => ReduceKind::Sum,
        "prod" => ReduceKind::Product,
        "max" => ReduceKind::Max,
        "min" => ReduceKind::Min,
        other => return Err(cx.bad(format!("reduce must be sum, mean, prod, max or min, found '{other}'"))),
    };
    if args.given("indices") {
        return Err(cx.bad("segment_reduce with indices is not supported by PyTorch either; pass lengths or offsets"));
    }
    let rank = cx.rank(data);
    let axis = cx.norm_dim(args.int_or("axis", 0)?, rank)?;
    let lengths = match (args.opt_tensor("lengths")?, args.opt_tensor("offsets")?) {
        (Some(lengths), None) => lengths,
        (None, Some(offsets)) => {
            let last = cx.rank(offsets).checked_sub(1).ok_or_else(|| cx.bad("offsets must have a dim"))?;
            let count = cx.static_dim(offsets, last, "segment_reduce")?;
            if count < 1 {
                return Err(cx.bad("offsets must hold at least one entry"));
            }
            let upper = cx.slice_dim(offsets, last, 1, count, 1)?;
            let lower = cx.slice_dim(offsets, last, 0, count - 1, 1)?;
            cx.binary(BinaryOp::Subtract, upper, lower)?
        }
        _ => return Err(cx.bad("segment_reduce needs one of lengths and offsets")),
    };
    let lengths = cx.convert(lengths, DType::I64)?;
    let sizes = cx.static_dims(data, "segment_reduce")?;
    let l_sizes = cx.static_dims(lengths, "segment_reduce")?;
    if l_sizes.len() != axis + 1 || l_sizes[..axis] != sizes[..axis] {
        return Err(cx.bad(format!(
            "lengths {} must hold the segments of dim {axis} for each of data {}'s leading dims",
            cx.ty(lengths),
            cx.ty(data)
        )));
    }
    let segments = l_sizes[axis];
    let n = sizes[axis];
    let cube_dims: Vec<i64> =
        sizes[..axis].iter().copied().chain([segments]).chain(sizes[axis..].iter().copied()).collect();
    cx.table(&cube_dims, "segment_reduce")?;
    // Running ends: lengths times an upper-triangular matrix of ones, exact in i64.
    let mut triangle = Vec::with_capacity(cx.table(&[segments, segments], "segment_reduce")?);
    for t in 0..segments {
        for s in 0..segments {
            triangle.push(Scalar::Int(i64::from(t <= s)));
        }
    }
    let triangle = cx.literal(Literal::from_scalars(DType::I64, &[segments, segments], &triangle).expect("square"));
    let dims = DotDims {
        lhs_contracting: [axis as i64].into_iter().collect(),
        rhs_contracting: [0].into_iter().collect(),
        ..DotDims::default()
    };
    let ends = cx.dot_general(lengths, triangle, dims)?;
    let starts = cx.binary(BinaryOp::Subtract, ends, lengths)?;
    // Mask `[lead.., segments, n]`.
    let mask_dims: Vec<i64> = sizes[..axis].iter().copied().chain([segments, n]).collect();
    let mask_shape = Shape::from_static(&mask_dims);
    let keep: Vec<i64> = (0..=axis as i64).collect();
    let starts = cx.broadcast_in_dim(starts, &keep, mask_shape.clone())?;
    let ends_wide = cx.broadcast_in_dim(ends, &keep, mask_shape.clone())?;
    let built = cx.b.iota(TensorType::new(DType::I64, mask_shape.clone()), axis as i64 + 1);
    let position = cx.ok(built)?;
    let after_start = cx.compare(CompareDirection::Le, starts, position)?;
    let before_end = cx.compare(CompareDirection::Lt, position, ends_wide)?;
    let inside = cx.binary(BinaryOp::And, after_start, before_end)?;
    let cube = Shape::from_static(&cube_dims);
    let mask = cx.broadcast_in_dim(inside, &(0..=axis as i64 + 1).collect::<Vec<_>>(), cube.clone())?;
    let data_dims: Vec<i64> = (0..axis as i64).chain((axis as i64 + 1..=rank as i64).collect::<Vec<_>>()).collect();
    let spread = cx.broadcast_in_dim(data, &data_dims, cube.clone())?;
    let identity = cx.splat(dtype, kind.identity(dtype), &cube)?;
    let chosen = cx.select(mask, spread, identity)?;
    let mut out = cx.reduce_propagating_nan(chosen, kind, &[axis + 1])?;
    let out_shape = cx.shape(out);
    let initial = args.opt_scalar("initial")?;
    if let Some(initial) = initial {
        let initial = cx.splat(dtype, initial, &out_shape)?;
        let op = match kind {
            ReduceKind::Sum => BinaryOp::Add,
            ReduceKind::Product => BinaryOp::Multiply,
            ReduceKind::Max => BinaryOp::Maximum,
            _ => BinaryOp::Minimum,
        };
        out = cx.binary(op, out, initial)?;
    }
    if reduce == "mean" {
        let count = cx.convert(lengths, dtype)?;
        let rest: Vec<i64> = (0..=axis as i64).collect();
        let count = cx.broadcast_in_dim(count, &rest, out_shape.clone())?;
        let mean = cx.binary(BinaryOp::Divide, out, count)?;
        out = match initial {
            // An empty segment keeps `initial` rather than dividing by zero.
            Some(initial) => {
                let zero = cx.splat(dtype, Scalar::Float(0.0), &out_shape)?;
                let empty = cx.compare(CompareDirection::Eq, count, zero)?;
                let initial = cx.splat(dtype, initial, &out_shape)?;
                cx.select(empty, initial, mean)?
            }
            None => mean,
        };
    }
    tensor(out)
}
