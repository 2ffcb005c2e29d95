//! The `_copy` overloads of views, and the scatters that write through a view (`as_strided_scatter` is in `strided.rs`):
//! `diagonal_scatter`, `index_reduce`, `put`, `scatter.reduce`/`scatter.value_reduce` and
//! `embedding_renorm`.
//!
//! Values are immutable in the IR, so a copy of a view is the view itself: each `_copy` overload
//! shares its view's decomposition, and its result is contiguous (see `storage.rs`). Scatters
//! address elements by full coordinates computed on the host or with `iota`, and reuse the
//! gathers and scatters of `index.rs`.

use ttpu_ir::{BinaryOp, CompareDirection, DType, ReduceKind, Scalar, ScatterKind, Shape, ValueId};

use super::elementwise::tensor;
use super::index::{iota, scatter, scatter_points, scatter_reduce_with, stack_last};
use crate::args::Args;
use crate::ctx::{Cx, Imported, opmath};
use crate::error::Result;

/// `narrow_copy(self, dim, start, length)`: `length` elements of `dim` from `start` (negative
/// counts from the end).
pub(super) fn narrow_copy(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let rank = cx.rank(x);
    if rank == 0 {
        return Err(cx.bad("cannot narrow a rank-0 tensor"));
    }
    let dim = cx.norm_dim(args.int("dim")?, rank)?;
    let size = cx.static_dim(x, dim, "narrow_copy")?;
    let (start, length) = (args.int("start")?, args.int("length")?);
    let start = if start < 0 { start + size } else { start };
    if start < 0 || length < 0 || start > size - length {
        return Err(cx.bad(format!("start {start} and length {length} do not fit dim {dim} of size {size}")));
    }
    tensor(cx.slice_dim(x, dim, start, start + length, 1)?)
}

/// `scatter.reduce` / `scatter.value_reduce` (`reduce` of `add` or `multiply`): `scatter_add`, or
/// the product of the self and every source element sent to a position.
pub(super) fn scatter_reduce_legacy(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let kind = match args.opt_str("reduce")? {
        Some("add") => ReduceKind::Sum,
        Some("multiply") => ReduceKind::Product,
        other => return Err(cx.bad(format!("reduce must be 'add' or 'multiply', found {other:?}"))),
    };
    if cx.dtype(args.tensor("self")?).is_bool() {
        return Err(cx.bad("scatter with a reduction on bool tensors is not supported"));
    }
    scatter(cx, args, ScatterKind::Combine(kind))
}

/// `index_reduce(self, dim, index, source, reduce, *, include_self)` (`prod`, `mean`, `amax`,
/// `amin`): `scatter_reduce` with the 1-D `index` spread over `source`'s other dims.
pub(super) fn index_reduce(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let (index, source) = (args.tensor("index")?, args.tensor("source")?);
    let rank = cx.rank(x).max(1);
    let dim = cx.norm_dim(args.int("dim")?, rank)?;
    let reduce = args.opt_str("reduce")?.unwrap_or("").to_owned();
    if !matches!(reduce.as_str(), "prod" | "mean" | "amax" | "amin") {
        return Err(cx.bad(format!("reduce must be prod, mean, amax or amin, found '{reduce}'")));
    }
    let include_self = args.bool_or("include_self", true)?;
    let shape = cx.shape(x);
    let one_dim = |cx: &mut Cx<'_>, value: ValueId| {
        if cx.rank(value) == 0 { cx.reshape(value, Shape::from_static(&[1])) } else { Ok(value) }
    };
    let (x, index, source) = (one_dim(cx, x)?, one_dim(cx, index)?, one_dim(cx, source)?);
    if cx.rank(index) != 1 || cx.rank(source) != cx.rank(x) || cx.shape(source)[dim] != cx.shape(index)[0] {
        return Err(cx.bad(format!(
            "index {} must be 1-D with one entry per slice of source {} along dim {dim}",
            cx.ty(index),
            cx.ty(source)
        )));
    }
    let spread = cx.broadcast_in_dim(index, &[dim as i64], cx.shape(source))?;
    let reduced = scatter_reduce_with(cx, x, dim, spread, source, &reduce, include_self)?;
    tensor(cx.reshape(reduced, shape)?)
}

/// `put(self, index, source, accumulate)`: the flattened self with `source`'s elements written
/// (or added) at the flat positions of `index` (negative counts from the end).
pub(super) fn put(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let (index, source) = (args.tensor("index")?, args.tensor("source")?);
    let accumulate = args.bool_or("accumulate", false)?;
    let shape = cx.shape(x);
    let total: i64 = cx.static_dims(x, "put")?.iter().product();
    let count: i64 = cx.static_dims(index, "put")?.iter().product();
    let given: i64 = cx.static_dims(source, "put")?.iter().product();
    if count != given {
        return Err(cx.bad(format!("index {} and source {} must have as many elements", cx.ty(index), cx.ty(source))));
    }
    if !cx.dtype(index).is_integer() {
        return Err(cx.bad(format!("index must be an integer tensor, found {}", cx.ty(index))));
    }
    let flat = cx.reshape(x, Shape::from_static(&[total]))?;
    let index = cx.reshape(index, Shape::from_static(&[count]))?;
    let index = cx.convert(index, DType::I64)?;
    let negative = cx.binary_scalar(BinaryOp::Add, index, Scalar::Int(total))?;
    let zero = cx.splat_like(index, Scalar::Int(0))?;
    let below = cx.compare(CompareDirection::Lt, index, zero)?;
    let index = cx.select(below, negative, index)?;
    let points = cx.reshape(index, Shape::from_static(&[count, 1]))?;
    let updates = cx.reshape(source, Shape::from_static(&[count]))?;
    let updates = cx.convert(updates, cx.dtype(x))?;
    let kind = if accumulate { ScatterKind::Combine(ReduceKind::Sum) } else { ScatterKind::Replace };
    let written = scatter_points(cx, flat, points, updates, kind)?;
    tensor(cx.reshape(written, shape)?)
}

/// `diagonal_scatter(self, src, offset, dim1, dim2)`: self with the diagonal that `diagonal`
/// reads replaced by `src` (shape: the other dims, then the diagonal's length).
pub(super) fn diagonal_scatter(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let src = args.tensor("src")?;
    let rank = cx.rank(x);
    if rank < 2 {
        return Err(cx.bad(format!("diagonal_scatter needs a tensor of rank 2 or more, found {}", cx.ty(x))));
    }
    let offset = args.int_or("offset", 0)?;
    let dim1 = cx.norm_dim(args.int_or("dim1", 0)?, rank)?;
    let dim2 = cx.norm_dim(args.int_or("dim2", 1)?, rank)?;
    if dim1 == dim2 {
        return Err(cx.bad("diagonal dims must differ"));
    }
    let sizes = cx.static_dims(x, "diagonal_scatter")?;
    let length = (sizes[dim1] - (-offset).max(0)).min(sizes[dim2] - offset.max(0)).max(0);
    let rest: Vec<usize> = (0..rank).filter(|&dim| dim != dim1 && dim != dim2).collect();
    let expected: Vec<i64> = rest.iter().map(|&dim| sizes[dim]).chain([length]).collect();
    if cx.static_dims(src, "diagonal_scatter")?.as_slice() != expected.as_slice() {
        return Err(cx.bad(format!("src {} must have shape {expected:?}", cx.ty(src))));
    }
    let src = cx.convert(src, cx.dtype(x))?;
    // Full coordinates of every element of `src`: the other dims by position, the diagonal's two
    // dims from the position along the last dim.
    let grid = Shape::from_static(&expected);
    let along = iota(cx, &grid, rank - 2)?;
    let mut parts = vec![along; rank];
    for (position, &dim) in rest.iter().enumerate() {
        parts[dim] = iota(cx, &grid, position)?;
    }
    parts[dim1] = cx.binary_scalar(BinaryOp::Add, along, Scalar::Int((-offset).max(0)))?;
    parts[dim2] = cx.binary_scalar(BinaryOp::Add, along, Scalar::Int(offset.max(0)))?;
    let points = stack_last(cx, &parts)?;
    tensor(scatter_points(cx, x, points, src, ScatterKind::Replace)?)
}

/// `embedding_renorm(self, indices, max_norm, norm_type)`: every row of the weight that `indices`
/// names and whose `norm_type`-norm exceeds `max_norm` scaled by `max_norm / (norm + 1e-7)`, as
/// PyTorch's `embedding_renorm_` does in place (the scale in `f64`, the product in opmath).
pub(super) fn embedding_renorm(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let weight = args.tensor("self")?;
    let indices = args.tensor("indices")?;
    let max_norm = args.scalar("max_norm")?.as_f64();
    let p = args.scalar("norm_type")?.as_f64();
    let dtype = cx.dtype(weight);
    if cx.rank(weight) != 2 || !dtype.is_float() || !cx.dtype(indices).is_integer() {
        return Err(cx.bad(format!(
            "needs a float matrix and integer indices, found {} and {}",
            cx.ty(weight),
            cx.ty(indices)
        )));
    }
    let rows = cx.static_dim(weight, 0, "embedding_renorm")?;
    let compute = opmath(dtype);
    let wide = cx.convert(weight, compute)?;
    let norm = super::nn::p_norm_last(cx, wide, p)?;
    // The scale in f64, from the norm PyTorch reads back as a double.
    let norm = cx.convert(norm, DType::F64)?;
    let shifted = cx.binary_scalar(BinaryOp::Add, norm, Scalar::Float(1e-7))?;
    let limit = cx.splat_like(shifted, Scalar::Float(max_norm))?;
    let scale = cx.binary(BinaryOp::Divide, limit, shifted)?;
    let over = cx.compare(CompareDirection::Gt, norm, limit)?;
    // Rows the indices name: a count per row, scattered from the flattened indices.
    let count: i64 = cx.static_dims(indices, "embedding_renorm")?.iter().product();
    let flat = cx.reshape(indices, Shape::from_static(&[count, 1]))?;
    let flat = cx.convert(flat, DType::I64)?;
    let zeros = cx.splat(DType::I64, Scalar::Int(0), &Shape::from_static(&[rows]))?;
    let ones = cx.splat(DType::I64, Scalar::Int(1), &Shape::from_static(&[count]))?;
    let hits = scatter_points(cx, zeros, flat, ones, ScatterKind::Combine(ReduceKind::Sum))?;
    let zero = cx.splat_like(hits, Scalar::Int(0))?;
    let named = cx.compare(CompareDirection::Gt, hits, zero)?;
    let apply = cx.binary(BinaryOp::And, named, over)?;
    let one = cx.splat_like(scale, Scalar::Float(1.0))?;
    let scale = cx.select(apply, scale, one)?;
    let scale = cx.convert(scale, compute)?;
    let scale = cx.broadcast_in_dim(scale, &[0], cx.shape(wide))?;
    let scaled = cx.binary(BinaryOp::Multiply, wide, scale)?;
    tensor(cx.convert(scaled, dtype)?)
}
