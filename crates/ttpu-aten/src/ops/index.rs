//! Data-dependent indexing: `gather`, `scatter` and its reductions, advanced indexing
//! (`index.Tensor`, `index_put`), `slice_scatter`/`select_scatter`, `diagonal`, `masked_scatter`,
//! `col2im`, `grid_sampler_2d`, and `sort`/`topk`.
//!
//! Everything addresses elements by full coordinates: an index tensor of shape `B + [k]` whose
//! last dim holds the coordinates of the first `k` dims of the operand (the others are taken
//! whole). One [`gather_points`] and one [`scatter_points`] build all of them. Negative indices
//! wrap as in PyTorch; out-of-range ones are clamped by `gather` and dropped by `scatter` (PyTorch
//! raises instead).
//!
//! `sort`/`topk` take the IR's `argsort` (StableHLO's stable `sort`, ties in index order, NaN
//! above every number as in PyTorch) and gather the values at those positions.

use smallvec::SmallVec;
use ttpu_ir::{
    BinaryOp, CompareDirection, DType, Dim, GatherDims, Literal, ReduceKind, Scalar, ScatterDims, ScatterKind, Shape,
    TensorType, ValueId,
};

use super::elementwise::{tensor, to_bool};
use crate::args::{Args, Val};
use crate::ctx::{Cx, DataDim, Imported};
use crate::error::Result;

/// `iota` of `shape` counting along `dim`, in `i64`.
pub(super) fn iota(cx: &mut Cx<'_>, shape: &Shape, dim: usize) -> Result<ValueId> {
    let built = cx.b.iota(TensorType::new(DType::I64, shape.clone()), dim as i64);
    cx.ok(built)
}

/// `index` as `i64` with negative entries wrapped by `size`.
fn wrap_index(cx: &mut Cx<'_>, index: ValueId, size: i64) -> Result<ValueId> {
    wrap_index_by(cx, index, |cx, index| cx.binary_scalar(BinaryOp::Add, index, Scalar::Int(size)))
}

/// Whether every element of `value` is a non-negative number by construction: positions
/// (`iota`, `arange` from zero), non-negative constants, and sums, products, conversions and
/// layout changes of those. Bounded by a depth so a long chain costs nothing.
fn known_non_negative(cx: &Cx<'_>, value: ValueId, depth: usize) -> bool {
    use ttpu_ir::Op;
    let Some(node) = cx.b.graph().producer(value) else { return false };
    if depth == 0 {
        return false;
    }
    match &node.op {
        Op::Iota { .. } => true,
        Op::Constant(literal) => literal.scalars().all(|scalar| scalar.as_f64() >= 0.0),
        Op::Convert(dtype) if dtype.is_integer() => known_non_negative(cx, node.operands[0], depth - 1),
        Op::Reshape(_) | Op::Transpose(_) | Op::BroadcastInDim { .. } | Op::Slice { .. } => {
            known_non_negative(cx, node.operands[0], depth - 1)
        }
        Op::Binary(BinaryOp::Add | BinaryOp::Multiply | BinaryOp::Maximum | BinaryOp::Minimum) => {
            node.operands.iter().all(|&operand| known_non_negative(cx, operand, depth - 1))
        }
        _ => false,
    }
}

/// [`wrap_index`] for dim `dim` of `x`, whose size may be symbolic (read with `dim_size` then).
/// An index that is non-negative by construction needs no wrapping: that keeps the size out of the
/// program, so padding the dim stays exact.
fn wrap_index_of(cx: &mut Cx<'_>, index: ValueId, x: ValueId, dim: usize) -> Result<ValueId> {
    if cx.dtype(index) == DType::I64 && known_non_negative(cx, index, 16) {
        return Ok(index);
    }
    match cx.shape(x)[dim].as_static() {
        Some(size) => wrap_index(cx, index, size),
        None => wrap_index_by(cx, index, |cx, index| {
            let built = cx.b.dim_size(x, dim as i64);
            let size = cx.ok(built)?;
            let size = cx.broadcast_to(size, &cx.shape(index))?;
            cx.binary(BinaryOp::Add, index, size)
        }),
    }
}

/// Converts `index` to `i64` and replaces negative entries by `shift(index)`.
fn wrap_index_by(
    cx: &mut Cx<'_>,
    index: ValueId,
    shift: impl FnOnce(&mut Cx<'_>, ValueId) -> Result<ValueId>,
) -> Result<ValueId> {
    let dtype = cx.dtype(index);
    if !matches!(dtype, DType::I64 | DType::I32 | DType::I16 | DType::I8 | DType::U8) {
        return Err(cx.bad(format!("indices must be an integer tensor, found {}", cx.ty(index))));
    }
    let index = cx.convert(index, DType::I64)?;
    if dtype == DType::U8 {
        return Ok(index);
    }
    let zero = cx.splat_like(index, Scalar::Int(0))?;
    let negative = cx.compare(CompareDirection::Lt, index, zero)?;
    let shifted = shift(cx, index)?;
    cx.select(negative, shifted, index)
}

/// Stacks `parts` (one shape `B`) into `B + [k]`.
pub(super) fn stack_last(cx: &mut Cx<'_>, parts: &[ValueId]) -> Result<ValueId> {
    let mut columns = Vec::with_capacity(parts.len());
    for &part in parts {
        let mut dims = cx.shape(part).0;
        dims.push(ttpu_ir::Dim::Static(1));
        columns.push(cx.reshape(part, Shape(dims))?);
    }
    if columns.len() == 1 {
        return Ok(columns[0]);
    }
    let rank = cx.rank(columns[0]);
    cx.concatenate(&columns, rank as i64 - 1)
}

/// `x[points[..., 0], ..., points[..., k-1], :, ...]`: shape `B + x.shape[k..]`.
pub(super) fn gather_points(cx: &mut Cx<'_>, x: ValueId, points: ValueId) -> Result<ValueId> {
    let batch = cx.rank(points) - 1;
    let k = cx.static_dim(points, batch, "gathering")? as usize;
    // The indexed dims may be symbolic (slices of them are one element); the rest are taken
    // whole, so their sizes are attributes.
    let mut sizes: SmallVec<[i64; 4]> = SmallVec::from_elem(1, k);
    for dim in k..cx.rank(x) {
        sizes.push(cx.static_dim(x, dim, "gathering")?);
    }
    let rest = sizes.len() - k;
    if (0..k).any(|dim| cx.shape(x).dims().get(dim) == Some(&Dim::Static(0))) {
        // Nothing to gather from (a slice of size 1 does not fit an empty dim): the result is
        // empty, or every index is out of range (which PyTorch raises and the device's checks
        // report), so zeros of the result's shape.
        let shape: Shape = cx.shape(points).dims()[..batch]
            .iter()
            .cloned()
            .chain(sizes[k..].iter().map(|&size| Dim::Static(size)))
            .collect();
        return cx.splat(cx.dtype(x), Scalar::Int(0), &shape);
    }
    let dims = GatherDims {
        offset_dims: (batch..batch + rest).map(|dim| dim as i64).collect(),
        collapsed_slice_dims: (0..k as i64).collect(),
        operand_batching_dims: SmallVec::new(),
        start_indices_batching_dims: SmallVec::new(),
        start_index_map: (0..k as i64).collect(),
        index_vector_dim: batch as i64,
        slice_sizes: std::iter::repeat_n(1, k).chain(sizes[k..].iter().copied()).collect(),
        indices_are_sorted: false,
    };
    let built = cx.b.gather(x, points, dims);
    cx.ok(built)
}

/// Writes `updates` (shape `B + x.shape[k..]`) into `x` at `points` (shape `B + [k]`).
pub(super) fn scatter_points(
    cx: &mut Cx<'_>,
    x: ValueId,
    points: ValueId,
    updates: ValueId,
    kind: ScatterKind,
) -> Result<ValueId> {
    let rank = cx.rank(x);
    let batch = cx.rank(points) - 1;
    let k = cx.static_dim(points, batch, "scattering")? as usize;
    let rest = rank - k;
    let dims = ScatterDims {
        update_window_dims: (batch..batch + rest).map(|dim| dim as i64).collect(),
        inserted_window_dims: (0..k as i64).collect(),
        input_batching_dims: SmallVec::new(),
        scatter_indices_batching_dims: SmallVec::new(),
        scatter_dims_to_operand_dims: (0..k as i64).collect(),
        index_vector_dim: batch as i64,
        kind,
        indices_are_sorted: false,
        unique_indices: false,
    };
    let built = cx.b.scatter(x, points, updates, dims);
    cx.ok(built)
}

/// The full coordinates of `index` (shape `S`, addressing `dim` of a tensor of rank `S.rank()`
/// whose size along `dim` is `size`): `S + [rank]`, the index itself in slot `dim` and each
/// position's own coordinate elsewhere.
fn along_dim_points(cx: &mut Cx<'_>, index: ValueId, dim: usize, size: i64) -> Result<ValueId> {
    let wrapped = wrap_index(cx, index, size)?;
    points_with(cx, index, wrapped, dim)
}

/// [`along_dim_points`] addressing `dim` of `x`, whose size may be symbolic.
fn along_dim_points_of(cx: &mut Cx<'_>, index: ValueId, x: ValueId, dim: usize) -> Result<ValueId> {
    let wrapped = wrap_index_of(cx, index, x, dim)?;
    points_with(cx, index, wrapped, dim)
}

/// `wrapped` (the index, wrapped) in slot `dim` and iotas over `index`'s shape elsewhere.
fn points_with(cx: &mut Cx<'_>, index: ValueId, wrapped: ValueId, dim: usize) -> Result<ValueId> {
    let shape = cx.shape(index);
    let mut parts = Vec::with_capacity(shape.rank());
    for d in 0..shape.rank() {
        parts.push(if d == dim { wrapped } else { iota(cx, &shape, d)? });
    }
    stack_last(cx, &parts)
}

/// A zero-dim tensor as one of one element: PyTorch's `gather` and `scatter` treat a zero-dim
/// self, index or source as one-dim (`ensure_nonempty_dim`).
fn at_least_1d(cx: &mut Cx<'_>, value: ValueId) -> Result<ValueId> {
    if cx.rank(value) == 0 { cx.reshape(value, Shape::from_static(&[1])) } else { Ok(value) }
}

/// `x` gathered along `dim` at `index` (of `x`'s rank, negative entries wrapped): `take_along_dim`.
pub(super) fn take_along(cx: &mut Cx<'_>, x: ValueId, dim: usize, index: ValueId) -> Result<ValueId> {
    let points = along_dim_points_of(cx, index, x, dim)?;
    gather_points(cx, x, points)
}

/// Checks `gather`/`scatter` ranks (zero-dim counting as one-dim) and returns the normalised dim
/// and the index, at least one-dim.
fn dim_and_index(cx: &mut Cx<'_>, args: &Args, x: ValueId) -> Result<(usize, ValueId)> {
    let index = args.tensor("index")?;
    let rank = cx.rank(x);
    let dim = cx.norm_dim(args.int("dim")?, rank)?;
    if cx.rank(index).max(1) != rank.max(1) {
        return Err(cx.bad(format!("index {} must have the rank of self {}", cx.ty(index), cx.ty(x))));
    }
    Ok((dim, at_least_1d(cx, index)?))
}

/// `gather(self, dim, index)`: `out[p] = self[p with p[dim] = index[p]]`, of the index's shape.
pub(super) fn gather(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let shape = cx.shape(args.tensor("index")?);
    let (dim, index) = dim_and_index(cx, args, x)?;
    let x = at_least_1d(cx, x)?;
    let points = along_dim_points_of(cx, index, x, dim)?;
    let gathered = gather_points(cx, x, points)?;
    tensor(cx.reshape(gathered, shape)?)
}

/// `src` cut to the index's shape (PyTorch reads only that corner), in `dtype`.
fn updates_for(cx: &mut Cx<'_>, src: Val, index: ValueId, dtype: DType) -> Result<ValueId> {
    if let Val::Tensor(src) = src
        && cx.shape(src) == cx.shape(index)
    {
        return cx.convert(src, dtype);
    }
    let index_shape = cx.shape(index);
    let mut scalar = |value| cx.splat(dtype, value, &index_shape);
    match src {
        Val::Int(value) => return scalar(Scalar::Int(value)),
        Val::Float(value) => return scalar(Scalar::Float(value)),
        Val::Bool(value) => return scalar(Scalar::Bool(value)),
        _ => {}
    }
    let shape = cx.static_dims(index, "scatter")?;
    match src {
        Val::Tensor(src) => {
            let src = cx.convert(src, dtype)?;
            let zeros = vec![0; shape.len()];
            let ones = vec![1; shape.len()];
            if cx.static_dims(src, "scatter")?.as_slice() == shape.as_slice() {
                return Ok(src);
            }
            cx.slice(src, &zeros, &shape, &ones)
        }
        Val::Int(value) => cx.splat(dtype, Scalar::Int(value), &Shape::from_static(&shape)),
        Val::Float(value) => cx.splat(dtype, Scalar::Float(value), &Shape::from_static(&shape)),
        Val::Bool(value) => cx.splat(dtype, Scalar::Bool(value), &Shape::from_static(&shape)),
        other => Err(cx.bad(format!("scatter source must be a tensor or a number, found {other:?}"))),
    }
}

/// `scatter.src` / `scatter.value` (`reduce` absent) and `scatter_add`.
pub(super) fn scatter(cx: &mut Cx<'_>, args: &Args, kind: ScatterKind) -> Result<Imported> {
    let original = args.tensor("self")?;
    let (dim, index) = dim_and_index(cx, args, original)?;
    let x = at_least_1d(cx, original)?;
    let mut source = if args.has_param("src") { args.get("src").clone() } else { args.get("value").clone() };
    if let Val::Tensor(src) = source {
        source = Val::Tensor(at_least_1d(cx, src)?);
    }
    let updates = updates_for(cx, source, index, cx.dtype(x))?;
    let points = along_dim_points_of(cx, index, x, dim)?;
    let scattered = scatter_points(cx, x, points, updates, kind)?;
    tensor(cx.reshape(scattered, cx.shape(original))?)
}

/// `scatter_reduce.two(self, dim, index, src, reduce, *, include_self)` for `sum`, `prod`,
/// `mean`, `amax` and `amin`. Without `include_self`, the targeted positions are first reset to
/// the reduction's identity; `mean` divides by the number of contributions (floor division for
/// integers, as PyTorch does).
pub(super) fn scatter_reduce(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let original = args.tensor("self")?;
    let (dim, index) = dim_and_index(cx, args, original)?;
    let x = at_least_1d(cx, original)?;
    let shape = cx.shape(original);
    let reduce = args.opt_str("reduce")?.unwrap_or("sum").to_owned();
    let include_self = args.bool_or("include_self", true)?;
    let src = args.tensor("src")?;
    let src = at_least_1d(cx, src)?;
    let reduced = scatter_reduce_with(cx, x, dim, index, src, &reduce, include_self)?;
    tensor(cx.reshape(reduced, shape)?)
}

/// [`scatter_reduce`] on a self, index and source of rank one or more (`index_reduce` spreads its
/// index over the source first).
pub(super) fn scatter_reduce_with(
    cx: &mut Cx<'_>,
    x: ValueId,
    dim: usize,
    index: ValueId,
    src: ValueId,
    reduce: &str,
    include_self: bool,
) -> Result<ValueId> {
    let size = cx.static_dim(x, dim, "scatter_reduce")?;
    let dtype = cx.dtype(x);
    let kind = match reduce {
        "sum" | "mean" => ReduceKind::Sum,
        "prod" => ReduceKind::Product,
        "amax" => ReduceKind::Max,
        "amin" => ReduceKind::Min,
        other => return Err(cx.bad(format!("reduce must be sum, prod, mean, amax or amin, found '{other}'"))),
    };
    if dtype.is_bool() {
        return Err(cx.bad("scatter_reduce on bool tensors is not supported"));
    }
    let updates = updates_for(cx, Val::Tensor(src), index, dtype)?;
    let points = along_dim_points(cx, index, dim, size)?;
    let mut base = x;
    if !include_self {
        let identity = cx.splat_like(updates, kind.identity(dtype))?;
        base = scatter_points(cx, base, points, identity, ScatterKind::Replace)?;
    }
    let combined = scatter_points(cx, base, points, updates, ScatterKind::Combine(kind))?;
    if reduce != "mean" {
        return Ok(combined);
    }
    // Contributions per position: 1 for self when included, plus one per update.
    let start = cx.splat_like(x, Scalar::Int(i64::from(include_self)))?;
    let ones = cx.splat_like(updates, Scalar::Int(1))?;
    let count = scatter_points(cx, start, points, ones, ScatterKind::Combine(ReduceKind::Sum))?;
    let one = cx.splat_like(count, Scalar::Int(1))?;
    let count = cx.binary(BinaryOp::Maximum, count, one)?;
    if dtype.is_float() {
        return cx.binary(BinaryOp::Divide, combined, count);
    }
    // Integer floor division by a positive count.
    let quotient = cx.binary(BinaryOp::Divide, combined, count)?;
    let remainder = cx.binary(BinaryOp::Remainder, combined, count)?;
    let zero = cx.splat_like(remainder, Scalar::Int(0))?;
    let negative = cx.compare(CompareDirection::Lt, remainder, zero)?;
    let lowered = cx.binary_scalar(BinaryOp::Subtract, quotient, Scalar::Int(1))?;
    cx.select(negative, lowered, quotient)
}

/// The index tensors of an `indices` list (`None` for untouched dims), as `(dim, tensor)`.
fn index_list(cx: &Cx<'_>, args: &Args, rank: usize) -> Result<Vec<(usize, ValueId)>> {
    let Val::List(items) = args.get("indices") else {
        return Err(cx.bad("indices must be a list of tensors or None"));
    };
    if items.len() > rank {
        return Err(cx.bad(format!("{} indices for a tensor of rank {rank}", items.len())));
    }
    let mut res = vec![];
    for (dim, item) in items.iter().enumerate() {
        match item {
            Val::None | Val::Missing => {}
            Val::Tensor(value) => {
                // PyTorch reads bool and uint8 index tensors as masks.
                if matches!(cx.dtype(*value), DType::Bool | DType::U8) {
                    return Err(cx.site.dynamic("boolean mask indices give a data-dependent shape"));
                }
                res.push((dim, *value));
            }
            _ => return Err(cx.bad("indices must be a list of tensors or None")),
        }
    }
    if res.is_empty() {
        return Err(cx.bad("at least one index must be a tensor"));
    }
    Ok(res)
}

/// The one bool (or `u8`) mask among `indices`, with the dim it starts at, when it is the only
/// tensor index.
fn single_mask(cx: &Cx<'_>, args: &Args) -> Result<Option<(usize, ValueId)>> {
    let Val::List(items) = args.get("indices") else { return Ok(None) };
    let tensors: Vec<(usize, ValueId)> = items
        .iter()
        .enumerate()
        .filter_map(|(dim, item)| match item {
            Val::Tensor(value) => Some((dim, *value)),
            _ => None,
        })
        .collect();
    match tensors.as_slice() {
        [(dim, mask)] if matches!(cx.dtype(*mask), DType::Bool | DType::U8) => Ok(Some((*dim, *mask))),
        _ => Ok(None),
    }
}

/// A `u8` mask as the bool mask PyTorch reads it as.
pub(super) fn as_bool_mask(cx: &mut Cx<'_>, mask: ValueId) -> Result<ValueId> {
    if cx.dtype(mask) == DType::Bool {
        return Ok(mask);
    }
    let zero = cx.splat_like(mask, Scalar::Int(0))?;
    cx.compare(CompareDirection::Ne, mask, zero)
}

/// The mask flattened to `[positions]`, and how many positions up to and including each one are
/// selected (an inclusive running count, as an `i64` window sum over all earlier positions).
pub(super) fn running_count(cx: &mut Cx<'_>, mask: ValueId, positions: i64) -> Result<(ValueId, ValueId)> {
    let flat_mask = cx.reshape(mask, Shape::from_static(&[positions]))?;
    let ones = cx.convert(flat_mask, DType::I64)?;
    let window = ttpu_ir::Window {
        dimensions: smallvec::smallvec![positions.max(1)],
        strides: smallvec::smallvec![1],
        base_dilations: smallvec::smallvec![1],
        window_dilations: smallvec::smallvec![1],
        padding: smallvec::smallvec![((positions - 1).max(0), 0)],
    };
    let built = cx.b.reduce_window(ones, ReduceKind::Sum, window);
    Ok((flat_mask, cx.ok(built)?))
}

/// `x[..., mask, ...] = values` (`+=` with `accumulate`): the mask covers dims `dim..dim + m` of
/// `x`; PyTorch writes the selected positions in row-major order, so the `k`-th selected position
/// takes entry `k` of `values` along the selection dim (a running count of the mask finds `k`),
/// or `values` broadcast when it has one entry there. The shape of `x` never depends on the data.
fn masked_put(
    cx: &mut Cx<'_>,
    x: ValueId,
    dim: usize,
    mask: ValueId,
    values: ValueId,
    accumulate: bool,
) -> Result<ValueId> {
    let dtype = cx.dtype(x);
    let shape = cx.static_dims(x, "index_put")?;
    let mask_shape = cx.static_dims(mask, "index_put")?;
    let m = mask_shape.len();
    if dim + m > shape.len() || shape[dim..dim + m] != mask_shape[..] {
        return Err(cx.bad(format!("the mask {} does not match dims {dim}.. of {}", cx.ty(mask), cx.ty(x))));
    }
    let mask = as_bool_mask(cx, mask)?;
    let (pre, post) = (&shape[..dim], &shape[dim + m..]);
    let positions: i64 = mask_shape.iter().product();
    // The indexed shape is `pre + [count] + post`; `values` broadcasts to it, so its selection
    // dim (if it reaches that far) has the count or 1 entries.
    let values = cx.convert(values, dtype)?;
    let values_shape = cx.static_dims(values, "index_put")?;
    let rank = pre.len() + 1 + post.len();
    if values_shape.len() > rank {
        return Err(cx.bad(format!("values {} have more dims than the indexed shape", cx.ty(values))));
    }
    let mut padded: Vec<i64> = vec![1; rank - values_shape.len()];
    padded.extend(values_shape.iter().copied());
    let values = cx.reshape(values, Shape::from_static(&padded))?;
    let count = padded[pre.len()];
    let mut full: Vec<i64> = pre.to_vec();
    full.push(count);
    full.extend_from_slice(post);
    let values = cx.broadcast_to(values, &Shape::from_static(&full))?;
    // Each flat mask position takes the entry at its running count.
    let (_, running) = running_count(cx, mask, positions)?;
    let entry = if count == 1 {
        cx.splat(DType::I64, Scalar::Int(0), &Shape::from_static(&[positions]))?
    } else {
        let index = cx.binary_scalar(BinaryOp::Subtract, running, Scalar::Int(1))?;
        let zero = cx.scalar(DType::I64, Scalar::Int(0));
        let last = cx.scalar(DType::I64, Scalar::Int(count - 1));
        let built = cx.b.clamp(zero, index, last);
        cx.ok(built)?
    };
    // Gather along the selection dim: `pre + [positions] + post`, then the mask's own dims.
    let mut gather_shape: Vec<i64> = pre.to_vec();
    gather_shape.push(positions);
    gather_shape.extend_from_slice(post);
    let gather_shape = Shape::from_static(&gather_shape);
    let entry = cx.broadcast_in_dim(entry, &[pre.len() as i64], gather_shape)?;
    let points = along_dim_points(cx, entry, pre.len(), count)?;
    let taken = gather_points(cx, values, points)?;
    let taken = cx.reshape(taken, Shape::from_static(&shape))?;
    let mask_dims: Vec<i64> = (dim..dim + m).map(|d| d as i64).collect();
    let wide_mask = cx.broadcast_in_dim(mask, &mask_dims, Shape::from_static(&shape))?;
    if accumulate {
        let zero = cx.splat(dtype, Scalar::Int(0), &Shape::from_static(&shape))?;
        let added = cx.select(wide_mask, taken, zero)?;
        let op = if dtype.is_bool() { BinaryOp::Or } else { BinaryOp::Add };
        return cx.binary(op, x, added);
    }
    cx.select(wide_mask, taken, x)
}

/// `x[..., mask, ...]` with one bool mask covering dims `dim..dim + m`: how many positions it
/// selects is decided by the data, so it is a size the import reads from `symbol_values` (a size
/// program computes it first; see [`crate::DataSize`]), or a number the export printed. `None`
/// when the size has no value yet (the node is left out of the size program).
fn masked_index(cx: &mut Cx<'_>, x: ValueId, dim: usize, mask: ValueId) -> Result<Option<ValueId>> {
    let shape = cx.static_dims(x, "indexing with a mask")?;
    let mask_shape = cx.static_dims(mask, "indexing with a mask")?;
    let m = mask_shape.len();
    if dim + m > shape.len() || shape[dim..dim + m] != mask_shape[..] {
        return Err(cx.bad(format!("the mask {} does not match dims {dim}.. of {}", cx.ty(mask), cx.ty(x))));
    }
    let mask = as_bool_mask(cx, mask)?;
    let count =
        match cx.data_dim(&[(None, dim)], "the number of elements the mask selects", |cx| true_count(cx, mask))? {
            DataDim::Known(count) => count,
            DataDim::Pending => return Ok(None),
        };
    let (pre, post) = (&shape[..dim], &shape[dim + m..]);
    let positions: i64 = mask_shape.iter().product();
    if count == 0 {
        // Nothing selected (and a gather from an empty tensor is no gather at all).
        let out: Vec<i64> = pre.iter().copied().chain([0]).chain(post.iter().copied()).collect();
        return Ok(Some(cx.splat(cx.dtype(x), Scalar::Int(0), &Shape::from_static(&out))?));
    }
    let chosen = selected_positions(cx, mask, count)?;
    // Take those positions along the flattened mask dims.
    let mut flat: Vec<i64> = pre.to_vec();
    flat.push(positions);
    flat.extend_from_slice(post);
    let flat_x = cx.reshape(x, Shape::from_static(&flat))?;
    let mut out: Vec<i64> = pre.to_vec();
    out.push(count);
    out.extend_from_slice(post);
    let chosen = cx.broadcast_in_dim(chosen, &[pre.len() as i64], Shape::from_static(&out))?;
    let points = along_dim_points(cx, chosen, pre.len(), positions)?;
    Ok(Some(gather_points(cx, flat_x, points)?))
}

/// How many elements of the bool `mask` are true, as an `i64` scalar.
pub(super) fn true_count(cx: &mut Cx<'_>, mask: ValueId) -> Result<ValueId> {
    let ones = cx.convert(mask, DType::I64)?;
    let dims: Vec<usize> = (0..cx.rank(ones)).collect();
    cx.reduce(ones, ReduceKind::Sum, &dims)
}

/// The flat (row-major) positions of the true elements of the bool `mask`, in order: `[count]`
/// `i64`, where `count` is how many there are. Selected position `p` goes to slot `running(p) - 1`;
/// the others to `count`, out of range, which the scatter drops. Slots past the true count (when
/// `count` is larger, as `nonzero_static` asks) hold `positions`.
pub(super) fn selected_positions(cx: &mut Cx<'_>, mask: ValueId, count: i64) -> Result<ValueId> {
    let positions = cx.static_dims(mask, "selecting")?.iter().product::<i64>();
    let (flat_mask, running) = running_count(cx, mask, positions)?;
    let slot = cx.binary_scalar(BinaryOp::Subtract, running, Scalar::Int(1))?;
    let nowhere = cx.splat(DType::I64, Scalar::Int(count), &Shape::from_static(&[positions]))?;
    let slot = cx.select(flat_mask, slot, nowhere)?;
    let slot = cx.reshape(slot, Shape::from_static(&[positions, 1]))?;
    let flat_positions = iota(cx, &Shape::from_static(&[positions]), 0)?;
    let empty = cx.splat(DType::I64, Scalar::Int(positions), &Shape::from_static(&[count]))?;
    scatter_points(cx, empty, slot, flat_positions, ScatterKind::Replace)
}

/// The layout of an advanced-indexing result.
struct Advanced {
    /// `x` with the indexed dims moved to the front, in order.
    front: ValueId,
    /// The permutation that moved them (result dim `i` is input dim `perm[i]`).
    perm: Vec<i64>,
    /// The coordinates, `B + [k]`.
    points: ValueId,
    /// Rank of the broadcast index shape `B`.
    batch: usize,
    /// Where PyTorch puts `B` in the result: the first indexed dim when they are adjacent, else 0.
    position: usize,
}

fn advanced(cx: &mut Cx<'_>, x: ValueId, indices: &[(usize, ValueId)]) -> Result<Advanced> {
    let rank = cx.rank(x);
    let indexed: Vec<usize> = indices.iter().map(|(dim, _)| *dim).collect();
    let adjacent = indexed.windows(2).all(|pair| pair[1] == pair[0] + 1);
    let position = if adjacent { indexed[0] } else { 0 };
    let perm: Vec<i64> =
        indexed.iter().copied().chain((0..rank).filter(|dim| !indexed.contains(dim))).map(|dim| dim as i64).collect();
    let front = cx.transpose(x, &perm)?;
    let shapes: Vec<Shape> = indices.iter().map(|(_, value)| cx.shape(*value)).collect();
    let batch_shape = cx.broadcast_shape(&shapes)?;
    let mut parts = Vec::with_capacity(indices.len());
    for &(dim, value) in indices {
        let wrapped = wrap_index_of(cx, value, x, dim)?;
        parts.push(cx.broadcast_to(wrapped, &batch_shape)?);
    }
    let points = stack_last(cx, &parts)?;
    Ok(Advanced { front, perm, points, batch: batch_shape.rank(), position })
}

/// The permutation taking `B + rest` to PyTorch's order (`B` at `position`).
fn batch_to_position(rank: usize, batch: usize, position: usize) -> Vec<i64> {
    let rest: Vec<i64> = (batch..rank).map(|dim| dim as i64).collect();
    let mut perm: Vec<i64> = rest[..position].to_vec();
    perm.extend((0..batch).map(|dim| dim as i64));
    perm.extend(&rest[position..]);
    perm
}

/// `index.Tensor(self, indices)`: advanced indexing with integer index tensors (broadcast
/// together) and `None` for untouched dims.
pub(super) fn index(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    if let Some((dim, mask)) = single_mask(cx, args)? {
        return Ok(masked_index(cx, x, dim, mask)?.map_or(Imported::Skipped, Imported::Tensor));
    }
    let indices = index_list(cx, args, cx.rank(x))?;
    let adv = advanced(cx, x, &indices)?;
    let gathered = gather_points(cx, adv.front, adv.points)?;
    let perm = batch_to_position(cx.rank(gathered), adv.batch, adv.position);
    tensor(cx.transpose(gathered, &perm)?)
}

/// `index_put(self, indices, values, accumulate)`: writes (or adds, with repeats summed) `values`
/// broadcast to the shape `self[indices]` has.
pub(super) fn index_put(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    if let Some((dim, mask)) = single_mask(cx, args)? {
        return tensor(masked_put(cx, x, dim, mask, args.tensor("values")?, args.bool_or("accumulate", false)?)?);
    }
    let indices = index_list(cx, args, cx.rank(x))?;
    let accumulate = args.bool_or("accumulate", false)?;
    let dtype = cx.dtype(x);
    let adv = advanced(cx, x, &indices)?;
    // The shape of `self[indices]` in `B + rest` order, and in PyTorch's.
    let batch_shape: Vec<i64> = cx.static_dims(adv.points, "index_put")?[..adv.batch].to_vec();
    let rest: Vec<i64> = cx.static_dims(adv.front, "index_put")?[indices.len()..].to_vec();
    let flat: Vec<i64> = batch_shape.iter().chain(&rest).copied().collect();
    let rank = flat.len();
    let to_torch = batch_to_position(rank, adv.batch, adv.position);
    let torch_shape: Vec<i64> = to_torch.iter().map(|&dim| flat[dim as usize]).collect();
    let values = args.tensor("values")?;
    let values = cx.convert(values, dtype)?;
    let values = cx.broadcast_to(values, &Shape::from_static(&torch_shape))?;
    let mut from_torch = vec![0i64; rank];
    for (index, &dim) in to_torch.iter().enumerate() {
        from_torch[dim as usize] = index as i64;
    }
    let updates = cx.transpose(values, &from_torch)?;
    let kind = if accumulate {
        if dtype.is_bool() { ScatterKind::Combine(ReduceKind::Or) } else { ScatterKind::Combine(ReduceKind::Sum) }
    } else {
        ScatterKind::Replace
    };
    let written = scatter_points(cx, adv.front, adv.points, updates, kind)?;
    let mut inverse = vec![0i64; adv.perm.len()];
    for (index, &dim) in adv.perm.iter().enumerate() {
        inverse[dim as usize] = index as i64;
    }
    tensor(cx.transpose(written, &inverse)?)
}

/// Embeds `src` into `x` at `start, start + step, ...` of `dim`: both padded into `x`'s shape
/// (interior padding for the step), then selected by a padded mask.
fn embed(cx: &mut Cx<'_>, x: ValueId, src: ValueId, dim: usize, start: i64, step: i64) -> Result<ValueId> {
    let sizes = cx.static_dims(x, "slice_scatter")?;
    let count = cx.static_dim(src, dim, "slice_scatter")?;
    if count == 0 {
        return Ok(x);
    }
    let rank = sizes.len();
    let src = cx.convert(src, cx.dtype(x))?;
    let mut low = vec![0; rank];
    let mut high = vec![0; rank];
    let mut interior = vec![0; rank];
    low[dim] = start;
    high[dim] = sizes[dim] - (start + (count - 1) * step + 1);
    interior[dim] = step - 1;
    let fill = cx.scalar(cx.dtype(x), Scalar::Int(0));
    let padded = cx.pad(src, fill, &low, &high, &interior)?;
    let inside = cx.splat(DType::Bool, Scalar::Bool(true), &cx.shape(src))?;
    let outside = cx.scalar(DType::Bool, Scalar::Bool(false));
    let mask = cx.pad(inside, outside, &low, &high, &interior)?;
    cx.select(mask, padded, x)
}

/// `slice_scatter(self, src, dim, start, end, step)`.
pub(super) fn slice_scatter(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let src = args.tensor("src")?;
    let rank = cx.rank(x);
    let dim = cx.norm_dim(args.int_or("dim", 0)?, rank)?;
    let size = cx.static_dim(x, dim, "slice_scatter")?;
    let step = args.int_or("step", 1)?;
    if step < 1 {
        return Err(cx.bad(format!("slice step must be positive, found {step}")));
    }
    let bound = |value: i64| (if value < 0 { value.saturating_add(size) } else { value }).clamp(0, size);
    let start = bound(args.opt_int("start")?.unwrap_or(0));
    let end = bound(args.opt_int("end")?.unwrap_or(size)).max(start);
    let count = (end - start + step - 1) / step;
    let mut expected = cx.static_dims(x, "slice_scatter")?;
    expected[dim] = count;
    if cx.static_dims(src, "slice_scatter")? != expected {
        return Err(cx.bad(format!("src {} does not fit the slice of shape {expected:?}", cx.ty(src))));
    }
    tensor(embed(cx, x, src, dim, start, step)?)
}

/// `select_scatter(self, src, dim, index)`.
pub(super) fn select_scatter(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let src = args.tensor("src")?;
    let rank = cx.rank(x);
    let dim = cx.norm_dim(args.int("dim")?, rank)?;
    let size = cx.static_dim(x, dim, "select_scatter")?;
    let index = args.int("index")?;
    let position = if index < 0 { index + size } else { index };
    if !(0..size).contains(&position) {
        return Err(cx.bad(format!("index {index} is out of range for dim {dim} of size {size}")));
    }
    let mut dims = cx.shape(src).0;
    dims.insert(dim, ttpu_ir::Dim::Static(1));
    let src = cx.reshape(src, Shape(dims))?;
    tensor(embed(cx, x, src, dim, position, 1)?)
}

/// `diagonal(self, offset, dim1, dim2)`: the dims removed, the diagonal appended last.
pub(super) fn diagonal(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let rank = cx.rank(x);
    if rank < 2 {
        return Err(cx.bad(format!("diagonal needs a tensor of rank 2 or more, found {}", cx.ty(x))));
    }
    let offset = args.int_or("offset", 0)?;
    let dim1 = cx.norm_dim(args.int_or("dim1", 0)?, rank)?;
    let dim2 = cx.norm_dim(args.int_or("dim2", 1)?, rank)?;
    if dim1 == dim2 {
        return Err(cx.bad("diagonal dims must differ"));
    }
    let perm: Vec<i64> = [dim1, dim2]
        .into_iter()
        .chain((0..rank).filter(|&dim| dim != dim1 && dim != dim2))
        .map(|dim| dim as i64)
        .collect();
    let shape = cx.shape(x);
    if shape[dim1].as_static().is_none() || shape[dim2].as_static().is_none() {
        // Symbolic diagonal dims: the length `min(rows - max(-offset, 0), cols - max(offset, 0))`
        // is a size expression and the coordinates an `iota` over it.
        let shift =
            |size: &ttpu_ir::Dim, by: i64| ttpu_ir::DimExpr::of(size).checked_sub(&ttpu_ir::DimExpr::constant(by));
        let (Some(rows), Some(cols)) = (shift(&shape[dim1], (-offset).max(0)), shift(&shape[dim2], offset.max(0)))
        else {
            return Err(cx.site.dynamic("the diagonal's length overflows"));
        };
        let length = rows.minimum(&cols).into_dim();
        // Every element addressed by its full coordinates (slices of one element, whatever the
        // other dims' sizes): the result's shape is the other dims, then the diagonal.
        let rest: Vec<usize> = (0..rank).filter(|&dim| dim != dim1 && dim != dim2).collect();
        let out: Shape = rest.iter().map(|&dim| shape[dim].clone()).chain([length]).collect();
        let along = iota(cx, &out, rank - 2)?;
        let mut parts = vec![along; rank];
        for (position, &dim) in rest.iter().enumerate() {
            parts[dim] = iota(cx, &out, position)?;
        }
        parts[dim1] = cx.binary_scalar(BinaryOp::Add, along, Scalar::Int((-offset).max(0)))?;
        parts[dim2] = cx.binary_scalar(BinaryOp::Add, along, Scalar::Int(offset.max(0)))?;
        let points = stack_last(cx, &parts)?;
        return tensor(gather_points(cx, x, points)?);
    }
    let sizes = cx.static_dims(x, "diagonal")?;
    let (rows, cols) = (sizes[dim1], sizes[dim2]);
    let length = (rows - (-offset).max(0)).min(cols - offset.max(0)).max(0);
    let front = cx.transpose(x, &perm)?;
    let mut coords = Vec::with_capacity(cx.table(&[length, 2], "diagonal_scatter")?);
    for i in 0..length {
        coords.push(Scalar::Int(i + (-offset).max(0)));
        coords.push(Scalar::Int(i + offset.max(0)));
    }
    let points = Literal::from_scalars(DType::I64, &[length, 2], &coords).expect("two coordinates per position");
    let points = cx.literal(points);
    let gathered = gather_points(cx, front, points)?;
    // `[L] + rest` to `rest + [L]`.
    let perm: Vec<i64> = (1..rank as i64 - 1).chain([0]).collect();
    tensor(cx.transpose(gathered, &perm)?)
}

/// `masked_scatter(self, mask, source)`: the masked positions, in row-major order, take the
/// source's elements in order.
pub(super) fn masked_scatter(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let mask = to_bool(cx, args.tensor("mask")?)?;
    let source = args.tensor("source")?;
    // Self and mask broadcast to each other, as in PyTorch's out-of-place `masked_scatter`.
    let [x, mask] = cx.broadcast_all([x, mask])?;
    let shape = cx.shape(x);
    let total: i64 = cx.static_dims(x, "masked_scatter")?.iter().product();
    let (_, position) = masked_positions(cx, mask, total)?;
    let count: i64 = cx.static_dims(source, "masked_scatter")?.iter().product();
    if count == 0 || total == 0 {
        // Nothing to take (a mask with no true element, as PyTorch requires of an empty source)
        // or nowhere to put it.
        return tensor(x);
    }
    let flat_source = cx.reshape(source, Shape::from_static(&[count]))?;
    let flat_source = cx.convert(flat_source, cx.dtype(x))?;
    let points = cx.reshape(position, Shape::from_static(&[total, 1]))?;
    let taken = gather_points(cx, flat_source, points)?;
    let taken = cx.reshape(taken, shape)?;
    tensor(cx.select(mask, taken, x)?)
}

/// The flattened mask (`total` elements) and each element's position among the masked ones:
/// the count of masked elements before it (the exclusive form of `running_count`).
fn masked_positions(cx: &mut Cx<'_>, mask: ValueId, total: i64) -> Result<(ValueId, ValueId)> {
    let (flat_mask, inclusive) = running_count(cx, mask, total)?;
    let ones = cx.convert(flat_mask, DType::I64)?;
    Ok((flat_mask, cx.binary(BinaryOp::Subtract, inclusive, ones)?))
}

/// `masked_scatter_backward(grad_output, mask, sizes)`: the gradient of the source, PyTorch's
/// `grad.masked_select(mask)` (the two broadcast to each other) followed by zeros up to the
/// source's element count and viewed as `sizes`. Each masked element is added at its position
/// among the masked ones; an unmasked one adds zero at position 0.
pub(super) fn masked_scatter_backward(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let grad = args.tensor("grad_output")?;
    let mask = to_bool(cx, args.tensor("mask")?)?;
    let sizes = args.ints("sizes")?;
    let [grad, mask] = cx.broadcast_all([grad, mask])?;
    let total: i64 = cx.static_dims(grad, "masked_scatter_backward")?.iter().product();
    let mut numel: i64 = 1;
    for &size in &sizes {
        numel = match (size >= 0).then(|| numel.checked_mul(size)).flatten() {
            Some(product) => product,
            None => return Err(cx.bad(format!("invalid source sizes {sizes:?}"))),
        };
    }
    cx.table(&[numel], "masked_scatter_backward")?;
    let dtype = cx.dtype(grad);
    let zeros = cx.splat(dtype, Scalar::Int(0), &Shape::from_static(&[numel]))?;
    if numel == 0 || total == 0 {
        return tensor(cx.reshape(zeros, Shape::from_static(&sizes))?);
    }
    let (flat_mask, position) = masked_positions(cx, mask, total)?;
    // A mask with more true elements than the source has elements is PyTorch's view error (the
    // autograd formula never makes one); the excess is dropped here, as the note in ops.md says.
    let limit = cx.splat(DType::I64, Scalar::Int(numel), &Shape::from_static(&[total]))?;
    let fits = cx.compare(CompareDirection::Lt, position, limit)?;
    let kept = cx.binary(BinaryOp::And, flat_mask, fits)?;
    let origin = cx.splat(DType::I64, Scalar::Int(0), &Shape::from_static(&[total]))?;
    let position = cx.select(kept, position, origin)?;
    let flat_grad = cx.reshape(grad, Shape::from_static(&[total]))?;
    let nothing = cx.splat(dtype, Scalar::Int(0), &Shape::from_static(&[total]))?;
    let updates = cx.select(kept, flat_grad, nothing)?;
    let points = cx.reshape(position, Shape::from_static(&[total, 1]))?;
    let routed = scatter_points(cx, zeros, points, updates, ScatterKind::Combine(ReduceKind::Sum))?;
    tensor(cx.reshape(routed, Shape::from_static(&sizes))?)
}

/// Sorts the last dim of `x`: (values, indices). Stable; NaN is the largest value.
pub(super) fn sort_last(cx: &mut Cx<'_>, x: ValueId, descending: bool) -> Result<(ValueId, ValueId)> {
    let rank = cx.rank(x);
    let n = cx.static_dim(x, rank - 1, "sort")?;
    if cx.shape(x).dims().iter().any(|dim| *dim == ttpu_ir::Dim::Static(0)) {
        // An empty tensor sorts to itself; a gather from it would have no slice to take.
        let shape = cx.shape(x);
        return Ok((x, iota(cx, &shape, rank - 1)?));
    }
    let keys = if cx.dtype(x).is_bool() { cx.convert(x, DType::I32)? } else { x };
    let built = cx.b.argsort(keys, rank as i64 - 1, descending);
    let order = cx.ok(built)?;
    let points = along_dim_points(cx, order, rank - 1, n)?;
    let values = gather_points(cx, x, points)?;
    Ok((values, order))
}

/// Sorts `dim` of `x`, moving it last and back.
pub(super) fn sort_dim(cx: &mut Cx<'_>, x: ValueId, dim: usize, descending: bool) -> Result<(ValueId, ValueId)> {
    let rank = cx.rank(x);
    let mut perm: Vec<i64> = (0..rank as i64).collect();
    perm.swap(dim, rank - 1);
    let moved = cx.transpose(x, &perm)?;
    let (values, indices) = sort_last(cx, moved, descending)?;
    Ok((cx.transpose(values, &perm)?, cx.transpose(indices, &perm)?))
}

/// `sort(self, dim, descending)` and `sort.stable(self, *, stable, dim, descending)`.
pub(super) fn sort(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let descending = args.bool_or("descending", false)?;
    if cx.rank(x) == 0 {
        let zero = cx.scalar(DType::I64, Scalar::Int(0));
        return Ok(Imported::Tuple(vec![Imported::Tensor(x), Imported::Tensor(zero)]));
    }
    let dim = cx.norm_dim(args.int_or("dim", -1)?, cx.rank(x))?;
    let (values, indices) = sort_dim(cx, x, dim, descending)?;
    Ok(Imported::Tuple(vec![Imported::Tensor(values), Imported::Tensor(indices)]))
}

/// `topk(self, k, dim, largest, sorted)`: the first `k` of a sort (always sorted).
pub(super) fn topk(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let k = args.int("k")?;
    let largest = args.bool_or("largest", true)?;
    if cx.rank(x) == 0 {
        let zero = cx.scalar(DType::I64, Scalar::Int(0));
        return Ok(Imported::Tuple(vec![Imported::Tensor(x), Imported::Tensor(zero)]));
    }
    let dim = cx.norm_dim(args.int_or("dim", -1)?, cx.rank(x))?;
    let size = cx.static_dim(x, dim, "topk")?;
    if !(0..=size).contains(&k) {
        return Err(cx.bad(format!("k {k} is out of range for dim {dim} of size {size}")));
    }
    let (values, indices) = sort_dim(cx, x, dim, largest)?;
    let values = cx.slice_dim(values, dim, 0, k, 1)?;
    let indices = cx.slice_dim(indices, dim, 0, k, 1)?;
    Ok(Imported::Tuple(vec![Imported::Tensor(values), Imported::Tensor(indices)]))
}

/// `kthvalue(self, k, dim, keepdim)`: the `k`-th smallest element along `dim` (1-based) and its
/// index, from the same stable sort as `sort` (NaN ordered above every number, as PyTorch's
/// kernel puts it).
pub(super) fn kthvalue(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let k = args.int("k")?;
    let keepdim = args.bool_or("keepdim", false)?;
    let rank = cx.rank(x);
    if rank == 0 {
        if k != 1 {
            return Err(cx.bad(format!("k {k} is out of range for a rank-0 tensor")));
        }
        let zero = cx.scalar(DType::I64, Scalar::Int(0));
        return Ok(Imported::Tuple(vec![Imported::Tensor(x), Imported::Tensor(zero)]));
    }
    let dim = cx.norm_dim(args.int_or("dim", -1)?, rank)?;
    let size = cx.static_dim(x, dim, "kthvalue")?;
    if !(1..=size).contains(&k) {
        return Err(cx.bad(format!("k {k} is out of range for dim {dim} of size {size}")));
    }
    let (values, indices) = sort_dim(cx, x, dim, false)?;
    let mut picked = Vec::new();
    for sorted in [values, indices] {
        let one = cx.slice_dim(sorted, dim, k - 1, k, 1)?;
        let mut shape = cx.shape(one).dims().to_vec();
        if !keepdim {
            shape.remove(dim);
        }
        picked.push(Imported::Tensor(cx.reshape(one, shape.into_iter().collect())?));
    }
    Ok(Imported::Tuple(picked))
}

/// `grid_sampler_2d(input, grid, interpolation_mode, padding_mode, align_corners)` for bilinear
/// (0), nearest (1) and bicubic (2) interpolation with zeros (0), border (1) and reflection (2)
/// padding: the grid's coordinates mapped to pixels as PyTorch's `grid_sampler_compute_source_index`
/// does (bicubic pads each tap instead), and each tap gathered at run time (out-of-range taps
/// contribute zero).
pub(super) fn grid_sampler_2d(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("input")?;
    let grid = args.tensor("grid")?;
    let mode = args.int("interpolation_mode")?;
    let padding = args.int("padding_mode")?;
    let align = args.bool_or("align_corners", false)?;
    let dtype = cx.dtype(x);
    let sizes = cx.static_dims(x, "grid_sampler_2d")?;
    let grid_sizes = cx.static_dims(grid, "grid_sampler_2d")?;
    if sizes.len() != 4 || grid_sizes.len() != 4 || grid_sizes[3] != 2 || !dtype.is_float() {
        return Err(cx.bad(format!("cannot sample {} at {}", cx.ty(x), cx.ty(grid))));
    }
    if !(0..=2).contains(&mode) || !(0..=2).contains(&padding) {
        return Err(cx.bad(format!("interpolation mode {mode} / padding mode {padding} is not supported")));
    }
    let (n, c, h, w) = (sizes[0], sizes[1], sizes[2], sizes[3]);
    let (out_h, out_w) = (grid_sizes[1], grid_sizes[2]);
    let compute = crate::ctx::opmath(dtype);
    let plane = Shape::from_static(&[n, out_h, out_w]);
    let grid = cx.convert(grid, compute)?;
    let mut coords = vec![];
    for (component, size) in [(0, w), (1, h)] {
        let part = cx.slice_dim(grid, 3, component, component + 1, 1)?;
        let part = cx.reshape(part, plane.clone())?;
        // Bicubic pads each of its 16 taps instead of the sampling point.
        let pixel = unnormalize(cx, part, size, align)?;
        coords.push(if mode == 2 { pixel } else { pad_coordinate(cx, pixel, size, padding, align)? });
    }
    let (ix, iy) = (coords[0], coords[1]);
    let front = cx.transpose(x, &[0, 2, 3, 1])?; // [N, H, W, C]
    let front = cx.convert(front, compute)?;
    let batch = iota(cx, &plane, 0)?;
    let wide = Shape::from_static(&[n, out_h, out_w, c]);
    // One corner: its value times `weight`, zero outside the image.
    let corner = |cx: &mut Cx<'_>, px: ValueId, py: ValueId, weight: Option<ValueId>| -> Result<ValueId> {
        let mut valid = None;
        let mut index = vec![batch];
        for (p, size) in [(py, h), (px, w)] {
            let zero = cx.splat_like(p, Scalar::Int(0))?;
            let top = cx.splat_like(p, Scalar::Int(size - 1))?;
            let above = cx.compare(CompareDirection::Ge, p, zero)?;
            let below = cx.compare(CompareDirection::Le, p, top)?;
            let inside = cx.binary(BinaryOp::And, above, below)?;
            valid = Some(match valid {
                None => inside,
                Some(acc) => cx.binary(BinaryOp::And, acc, inside)?,
            });
            let clamped = cx.b.clamp(zero, p, top);
            let clamped = cx.ok(clamped)?;
            index.push(cx.convert(clamped, DType::I64)?);
        }
        let points = stack_last(cx, &index)?;
        let values = gather_points(cx, front, points)?;
        let zeros = cx.splat(compute, Scalar::Int(0), &plane)?;
        let scale = match weight {
            Some(weight) => weight,
            None => cx.splat(compute, Scalar::Int(1), &plane)?,
        };
        let scale = cx.select(valid.expect("two coordinates"), scale, zeros)?;
        let scale = cx.broadcast_in_dim(scale, &[0, 1, 2], wide.clone())?;
        cx.binary(BinaryOp::Multiply, values, scale)
    };
    let sampled = if mode == 1 {
        let rx = cx.unary(ttpu_ir::UnaryOp::RoundNearestEven, ix)?;
        let ry = cx.unary(ttpu_ir::UnaryOp::RoundNearestEven, iy)?;
        corner(cx, rx, ry, None)?
    } else if mode == 2 {
        // PyTorch's bicubic: the 4x4 taps around floor(pixel), each padded like a coordinate
        // (and dropped outside the image for zeros padding), weighted by the cubic convolution
        // coefficients of the fractional offsets (A = -0.75).
        let x0 = cx.unary(ttpu_ir::UnaryOp::Floor, ix)?;
        let y0 = cx.unary(ttpu_ir::UnaryOp::Floor, iy)?;
        let tx = cx.binary(BinaryOp::Subtract, ix, x0)?;
        let ty = cx.binary(BinaryOp::Subtract, iy, y0)?;
        let (wx, wy) = (cubic_coefficients(cx, tx)?, cubic_coefficients(cx, ty)?);
        let mut taps_x = Vec::with_capacity(4);
        let mut taps_y = Vec::with_capacity(4);
        for offset in -1..=2 {
            let px = cx.binary_scalar(BinaryOp::Add, x0, Scalar::Int(offset))?;
            taps_x.push(pad_coordinate(cx, px, w, padding, align)?);
            let py = cx.binary_scalar(BinaryOp::Add, y0, Scalar::Int(offset))?;
            taps_y.push(pad_coordinate(cx, py, h, padding, align)?);
        }
        let mut total = None;
        for (py, wy) in taps_y.iter().zip(&wy) {
            for (px, wx) in taps_x.iter().zip(&wx) {
                let weight = cx.binary(BinaryOp::Multiply, *wx, *wy)?;
                let term = corner(cx, *px, *py, Some(weight))?;
                total = Some(match total {
                    None => term,
                    Some(acc) => cx.binary(BinaryOp::Add, acc, term)?,
                });
            }
        }
        total.expect("sixteen taps")
    } else {
        let x0 = cx.unary(ttpu_ir::UnaryOp::Floor, ix)?;
        let y0 = cx.unary(ttpu_ir::UnaryOp::Floor, iy)?;
        let x1 = cx.binary_scalar(BinaryOp::Add, x0, Scalar::Int(1))?;
        let y1 = cx.binary_scalar(BinaryOp::Add, y0, Scalar::Int(1))?;
        let east = cx.binary(BinaryOp::Subtract, ix, x0)?; // weight of x1
        let west = cx.binary(BinaryOp::Subtract, x1, ix)?; // weight of x0
        let south = cx.binary(BinaryOp::Subtract, iy, y0)?;
        let north = cx.binary(BinaryOp::Subtract, y1, iy)?;
        let mut total = None;
        for (px, py, wx, wy) in
            [(x0, y0, west, north), (x1, y0, east, north), (x0, y1, west, south), (x1, y1, east, south)]
        {
            let weight = cx.binary(BinaryOp::Multiply, wx, wy)?;
            let term = corner(cx, px, py, Some(weight))?;
            total = Some(match total {
                None => term,
                Some(acc) => cx.binary(BinaryOp::Add, acc, term)?,
            });
        }
        total.expect("four corners")
    };
    let out = cx.transpose(sampled, &[0, 3, 1, 2])?;
    tensor(cx.convert(out, dtype)?)
}

/// PyTorch's `grid_sampler_unnormalize`: a normalised coordinate in `[-1, 1]` to a pixel one.
pub(super) fn unnormalize(cx: &mut Cx<'_>, coord: ValueId, size: i64, align: bool) -> Result<ValueId> {
    let plus_one = cx.binary_scalar(BinaryOp::Add, coord, Scalar::Int(1))?;
    if align {
        let half = cx.binary_scalar(BinaryOp::Divide, plus_one, Scalar::Int(2))?;
        cx.binary_scalar(BinaryOp::Multiply, half, Scalar::Int(size - 1))
    } else {
        let scaled = cx.binary_scalar(BinaryOp::Multiply, plus_one, Scalar::Int(size))?;
        let shifted = cx.binary_scalar(BinaryOp::Subtract, scaled, Scalar::Int(1))?;
        cx.binary_scalar(BinaryOp::Divide, shifted, Scalar::Int(2))
    }
}

/// The weights of the four taps at offsets -1, 0, 1, 2 for a fractional offset `t`: PyTorch's
/// `get_cubic_upsample_coefficients` with `A = -0.75`.
fn cubic_coefficients(cx: &mut Cx<'_>, t: ValueId) -> Result<[ValueId; 4]> {
    const A: f64 = -0.75;
    // Near taps (|x| <= 1): ((A + 2) x - (A + 3)) x^2 + 1.
    let near = |cx: &mut Cx<'_>, x: ValueId| -> Result<ValueId> {
        let inner = cx.binary_scalar(BinaryOp::Multiply, x, Scalar::Float(A + 2.0))?;
        let inner = cx.binary_scalar(BinaryOp::Subtract, inner, Scalar::Float(A + 3.0))?;
        let inner = cx.binary(BinaryOp::Multiply, inner, x)?;
        let inner = cx.binary(BinaryOp::Multiply, inner, x)?;
        cx.binary_scalar(BinaryOp::Add, inner, Scalar::Float(1.0))
    };
    // Far taps (1 < |x| < 2): ((A x - 5A) x + 8A) x - 4A.
    let far = |cx: &mut Cx<'_>, x: ValueId| -> Result<ValueId> {
        let inner = cx.binary_scalar(BinaryOp::Multiply, x, Scalar::Float(A))?;
        let inner = cx.binary_scalar(BinaryOp::Subtract, inner, Scalar::Float(5.0 * A))?;
        let inner = cx.binary(BinaryOp::Multiply, inner, x)?;
        let inner = cx.binary_scalar(BinaryOp::Add, inner, Scalar::Float(8.0 * A))?;
        let inner = cx.binary(BinaryOp::Multiply, inner, x)?;
        cx.binary_scalar(BinaryOp::Subtract, inner, Scalar::Float(4.0 * A))
    };
    let one_plus_t = cx.binary_scalar(BinaryOp::Add, t, Scalar::Float(1.0))?;
    let one = cx.splat_like(t, Scalar::Float(1.0))?;
    let one_minus_t = cx.binary(BinaryOp::Subtract, one, t)?;
    let two_minus_t = cx.binary_scalar(BinaryOp::Add, one_minus_t, Scalar::Float(1.0))?;
    Ok([far(cx, one_plus_t)?, near(cx, t)?, near(cx, one_minus_t)?, far(cx, two_minus_t)?])
}

/// PyTorch's `compute_coordinates`: a pixel coordinate clipped (border) or reflected and clipped
/// (reflection); zeros padding keeps it.
pub(super) fn pad_coordinate(cx: &mut Cx<'_>, pixel: ValueId, size: i64, padding: i64, align: bool) -> Result<ValueId> {
    let mut pixel = pixel;
    if padding == 2 {
        let (twice_low, twice_high) = if align { (0, 2 * (size - 1)) } else { (-1, 2 * size - 1) };
        pixel = if twice_low == twice_high {
            cx.splat_like(pixel, Scalar::Int(0))?
        } else {
            let low = twice_low as f64 / 2.0;
            let span = (twice_high - twice_low) as f64 / 2.0;
            let from_low = cx.binary_scalar(BinaryOp::Subtract, pixel, Scalar::Float(low))?;
            let distance = cx.unary(ttpu_ir::UnaryOp::Abs, from_low)?;
            let extra = cx.binary_scalar(BinaryOp::Remainder, distance, Scalar::Float(span))?;
            let flips = cx.binary_scalar(BinaryOp::Divide, distance, Scalar::Float(span))?;
            let flips = cx.unary(ttpu_ir::UnaryOp::Floor, flips)?;
            let parity = cx.binary_scalar(BinaryOp::Remainder, flips, Scalar::Int(2))?;
            let zero = cx.splat_like(parity, Scalar::Int(0))?;
            let even = cx.compare(CompareDirection::Eq, parity, zero)?;
            let forward = cx.binary_scalar(BinaryOp::Add, extra, Scalar::Float(low))?;
            let back = cx.splat_like(extra, Scalar::Float(span + low))?;
            let back = cx.binary(BinaryOp::Subtract, back, extra)?;
            cx.select(even, forward, back)?
        };
    }
    if padding >= 1 {
        let zero = cx.splat_like(pixel, Scalar::Int(0))?;
        let top = cx.splat_like(pixel, Scalar::Int(size - 1))?;
        let clipped = cx.b.clamp(zero, pixel, top);
        pixel = cx.ok(clipped)?;
    }
    Ok(pixel)
}

/// `col2im(self, output_size, kernel_size, dilation, padding, stride)` (`F.fold`): every column
/// entry added into the output pixel it came from, through one `scatter` with constant positions
/// (entries landing in the padding are dropped).
pub(super) fn col2im(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let output = args.ints("output_size")?;
    let kernel = args.ints("kernel_size")?;
    let dilation = args.ints("dilation")?;
    let padding = args.ints("padding")?;
    let stride = args.ints("stride")?;
    let pairs = [&output, &kernel, &dilation, &padding, &stride];
    if pairs.iter().any(|values| values.len() != 2) || stride.iter().chain(&dilation).any(|&v| v < 1) {
        return Err(cx.bad("output_size, kernel_size, dilation, padding and stride need two values each"));
    }
    let mut sizes = cx.static_dims(x, "col2im")?.to_vec();
    let batched = sizes.len() == 3;
    if !batched {
        sizes.insert(0, 1);
    }
    let (n, rows, length) = (sizes[0], sizes[1], sizes[2]);
    let per_channel = cx.table(&kernel, "col2im")? as i64;
    cx.table(&[per_channel, length], "col2im")?;
    cx.table(&output, "col2im")?;
    // Every size is bounded now; what overflows is a padding or dilation no output could have.
    let block = |d: usize| -> Option<i64> {
        let span = dilation[d].checked_mul(kernel[d].checked_sub(1)?)?;
        let reach = output[d].checked_add(padding[d].checked_mul(2)?)?.checked_sub(span)?.checked_sub(1)?;
        Some(reach / stride[d] + 1)
    };
    let blocks: Vec<i64> = (0..2)
        .map(block)
        .collect::<Option<_>>()
        .ok_or_else(|| cx.bad(format!("padding {padding:?} and dilation {dilation:?} are out of range")))?;
    if rows % per_channel != 0 || blocks[0] * blocks[1] != length {
        return Err(cx.bad(format!("cannot fold {} into {output:?} with kernel {kernel:?}", cx.ty(x))));
    }
    let channels = rows / per_channel;
    let x = cx.reshape(x, Shape::from_static(&[n, channels, per_channel * length]))?;
    // [N, C, K*L] -> [K*L, N, C]: the scattered dim first.
    let x = cx.transpose(x, &[2, 0, 1])?;
    let (mut kept, mut targets) = (vec![], vec![]);
    for k in 0..per_channel {
        let (ki, kj) = (k / kernel[1], k % kernel[1]);
        for l in 0..length {
            let (bi, bj) = (l / blocks[1], l % blocks[1]);
            let h = bi * stride[0] - padding[0] + ki * dilation[0];
            let w = bj * stride[1] - padding[1] + kj * dilation[1];
            if (0..output[0]).contains(&h) && (0..output[1]).contains(&w) {
                kept.push(Scalar::Int(k * length + l));
                targets.push(Scalar::Int(h * output[1] + w));
            }
        }
    }
    let dtype = cx.dtype(x);
    let pixels = output[0] * output[1];
    let mut out = cx.splat(dtype, Scalar::Int(0), &Shape::from_static(&[pixels, n, channels]))?;
    if !kept.is_empty() {
        let count = kept.len() as i64;
        let kept = cx.literal(Literal::from_scalars(DType::I64, &[count], &kept).expect("one per entry"));
        let updates = super::layout::gather_dim(cx, x, 0, kept)?;
        let points = cx.literal(Literal::from_scalars(DType::I64, &[count, 1], &targets).expect("one per entry"));
        out = scatter_points(cx, out, points, updates, ScatterKind::Combine(ReduceKind::Sum))?;
    }
    let out = cx.transpose(out, &[1, 2, 0])?;
    let shape = if batched { vec![n, channels, output[0], output[1]] } else { vec![channels, output[0], output[1]] };
    tensor(cx.reshape(out, Shape::from_static(&shape))?)
}
