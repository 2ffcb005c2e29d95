//! Order statistics: `median`, `nanmedian` (whole tensor and along a dim) and `mode`.
//!
//! PyTorch's CPU kernels (`median_with_indices_impl`, `median_impl`) pick the element of rank
//! `(n - 1) / 2` under the order "value, then index", which makes the index of a median a rule:
//! the stable ascending sort puts that element at that position. A row holding a NaN has the
//! first NaN as its median; `nanmedian` skips NaN unless the row holds nothing else.
//!
//! `mode` sorts `(value, index)` pairs by value with `std::sort` and keeps the last element of the
//! first longest run: the smallest of the most frequent values, and, because `std::sort` sorts
//! runs of at most 16 elements by insertion, the last index holding it in rows of at most 16.
//! Longer rows reorder equal values in a way no rule describes, so their index is refused (the
//! value is still computed when only the value is read).

use ttpu_ir::{BinaryOp, CompareDirection, DType, ReduceKind, Scalar, Shape, TensorType, ValueId};

use super::index::{sort_dim, take_along};
use crate::args::Args;
use crate::ctx::{Cx, Imported, keepdim_shape};
use crate::error::Result;

/// The longest row whose `mode` index PyTorch's kernel decides by a rule (see the module docs).
const MODE_ORDERED_ROW: i64 = 16;

/// The operand as a tensor of rank one or more and the normalised dim (a zero-dim tensor is a row
/// of one).
fn row_view(cx: &mut Cx<'_>, x: ValueId, dim: i64) -> Result<(ValueId, usize)> {
    if cx.rank(x) == 0 {
        cx.norm_dim(dim, 0)?;
        return Ok((cx.reshape(x, Shape::from_static(&[1]))?, 0));
    }
    let dim = cx.norm_dim(dim, cx.rank(x))?;
    Ok((x, dim))
}

/// Checks the dtype (PyTorch's kernels take every real type but bool) and that `dim` is not empty.
fn check(cx: &Cx<'_>, x: ValueId, dim: usize, what: &str) -> Result<i64> {
    let dtype = cx.dtype(x);
    if dtype.is_bool() || dtype.is_complex() {
        return Err(cx.bad(format!("{what} takes real numbers, found {}", cx.ty(x))));
    }
    let size = cx.static_dim(x, dim, what)?;
    if size == 0 {
        return Err(cx.bad(format!("{what} of a dim of size 0 has no value")));
    }
    Ok(size)
}

/// `value` (reduced over `dim` of `shape`) shaped as `keepdim` asks.
fn shaped(
    cx: &mut Cx<'_>,
    value: ValueId,
    shape: &Shape,
    dim: usize,
    keepdim: bool,
    original_rank: usize,
) -> Result<ValueId> {
    if original_rank == 0 {
        return cx.reshape(value, Shape::scalar());
    }
    let kept = keepdim_shape(shape, &[dim]);
    if keepdim {
        return cx.reshape(value, kept);
    }
    let dims: Vec<_> =
        shape.dims().iter().enumerate().filter(|&(d, _)| d != dim).map(|(_, size)| size.clone()).collect();
    cx.reshape(value, dims.into_iter().collect())
}

/// Values and indices of the median along `dim` (kept as size 1).
fn median_along(cx: &mut Cx<'_>, x: ValueId, dim: usize, skip_nan: bool, what: &str) -> Result<(ValueId, ValueId)> {
    let size = check(cx, x, dim, what)?;
    let shape = cx.shape(x);
    let kept = keepdim_shape(&shape, &[dim]);
    // Ascending, ties by index, NaN last.
    let (sorted, order) = sort_dim(cx, x, dim, false)?;
    let is_float = cx.dtype(x).is_float();
    let position = if skip_nan && is_float {
        // `(non_nan - 1) / 2` in C++ (truncating: 0 for a row of NaN only).
        let nan = cx.compare(CompareDirection::Ne, x, x)?;
        let numbers = cx.unary(ttpu_ir::UnaryOp::Not, nan)?;
        let numbers = cx.convert(numbers, DType::I64)?;
        let count = cx.reduce(numbers, ReduceKind::Sum, &[dim])?;
        let count = cx.reshape(count, kept.clone())?;
        let less = cx.binary_scalar(BinaryOp::Subtract, count, Scalar::Int(1))?;
        let half = cx.binary_scalar(BinaryOp::Divide, less, Scalar::Int(2))?;
        let zero = cx.splat_like(half, Scalar::Int(0))?;
        cx.binary(BinaryOp::Maximum, half, zero)?
    } else {
        cx.splat(DType::I64, Scalar::Int((size - 1) / 2), &kept)?
    };
    let mut values = take_along(cx, sorted, dim, position)?;
    let mut indices = take_along(cx, order, dim, position)?;
    if !skip_nan && is_float {
        // A row holding a NaN: its first NaN.
        let nan = cx.compare(CompareDirection::Ne, x, x)?;
        let any = cx.reduce(nan, ReduceKind::Or, &[dim])?;
        let any = cx.reshape(any, kept.clone())?;
        let built = cx.b.iota(TensorType::new(DType::I64, shape.clone()), dim as i64);
        let positions = cx.ok(built)?;
        let beyond = cx.splat(DType::I64, Scalar::Int(size), &shape)?;
        let nan_positions = cx.select(nan, positions, beyond)?;
        let first = cx.reduce(nan_positions, ReduceKind::Min, &[dim])?;
        let first = cx.reshape(first, kept.clone())?;
        let nan_value = cx.splat(cx.dtype(x), Scalar::Float(f64::NAN), &kept)?;
        values = cx.select(any, nan_value, values)?;
        indices = cx.select(any, first, indices)?;
    }
    Ok((values, indices))
}

/// `median.dim` / `nanmedian.dim(self, dim, keepdim)` → (values, indices).
pub(super) fn median_dim(cx: &mut Cx<'_>, args: &Args, skip_nan: bool) -> Result<Imported> {
    let original = args.tensor("self")?;
    let rank = cx.rank(original);
    let (x, dim) = row_view(cx, original, args.int("dim")?)?;
    let keepdim = args.bool_or("keepdim", false)?;
    let what = if skip_nan { "nanmedian" } else { "median" };
    let (values, indices) = median_along(cx, x, dim, skip_nan, what)?;
    let shape = cx.shape(x);
    let values = shaped(cx, values, &shape, dim, keepdim, rank)?;
    let indices = shaped(cx, indices, &shape, dim, keepdim, rank)?;
    Ok(Imported::Tuple(vec![Imported::Tensor(values), Imported::Tensor(indices)]))
}

/// `median.default` / `nanmedian.default(self)`: the median of every element.
pub(super) fn median_all(cx: &mut Cx<'_>, args: &Args, skip_nan: bool) -> Result<Imported> {
    let x = args.tensor("self")?;
    let count: i64 = cx.static_dims(x, "median")?.iter().product();
    let flat = cx.reshape(x, Shape::from_static(&[count]))?;
    let what = if skip_nan { "nanmedian" } else { "median" };
    let (values, _) = median_along(cx, flat, 0, skip_nan, what)?;
    Ok(Imported::Tensor(cx.reshape(values, Shape::scalar())?))
}

/// `mode(self, dim, keepdim)` → (values, indices): the smallest of the most frequent values along
/// `dim` and the last index holding it (see the module docs for rows longer than 16).
pub(super) fn mode(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let original = args.tensor("self")?;
    let rank = cx.rank(original);
    let (x, dim) = row_view(cx, original, args.int_or("dim", -1)?)?;
    let keepdim = args.bool_or("keepdim", false)?;
    let size = check(cx, x, dim, "mode")?;
    if size > MODE_ORDERED_ROW && cx.result_read(1) {
        return Err(cx.bad(format!(
            "the index of mode along a dim of {size} is refused: PyTorch's CPU kernel sorts rows of more than \
             {MODE_ORDERED_ROW} with an unstable sort, so which index of the most frequent value it returns follows \
             no rule"
        )));
    }
    let shape = cx.shape(x);
    let sizes = cx.static_dims(x, "mode")?;
    cx.table(&[sizes.iter().product::<i64>(), size], "mode")?;
    // Pairwise equality along `dim`: a cube with the dim twice (`j` next to `i`).
    let rank_x = sizes.len();
    let cube_dims: Vec<i64> = sizes.iter().copied().chain([size]).collect();
    let cube = Shape::from_static(&cube_dims);
    let all: Vec<i64> = (0..rank_x as i64).collect();
    let left = cx.broadcast_in_dim(x, &all, cube.clone())?;
    let mut moved: Vec<i64> = (0..rank_x as i64).collect();
    moved[dim] = rank_x as i64;
    let right = cx.broadcast_in_dim(x, &moved, cube)?;
    let equal = cx.compare(CompareDirection::Eq, left, right)?;
    let equal = cx.convert(equal, DType::I64)?;
    let counts = cx.reduce(equal, ReduceKind::Sum, &[rank_x])?;
    let kept = keepdim_shape(&shape, &[dim]);
    let most = cx.reduce(counts, ReduceKind::Max, &[dim])?;
    let most = cx.reshape(most, kept.clone())?;
    let most = cx.broadcast_to(most, &shape)?;
    let frequent = cx.compare(CompareDirection::Eq, counts, most)?;
    let dtype = cx.dtype(x);
    let highest = cx.splat(dtype, ReduceKind::Min.identity(dtype), &shape)?;
    let candidates = cx.select(frequent, x, highest)?;
    let value = cx.reduce(candidates, ReduceKind::Min, &[dim])?;
    let value = cx.reshape(value, kept.clone())?;
    let wide = cx.broadcast_to(value, &shape)?;
    let hit = cx.compare(CompareDirection::Eq, x, wide)?;
    let built = cx.b.iota(TensorType::new(DType::I64, shape.clone()), dim as i64);
    let positions = cx.ok(built)?;
    let before = cx.splat(DType::I64, Scalar::Int(-1), &shape)?;
    let positions = cx.select(hit, positions, before)?;
    let index = cx.reduce(positions, ReduceKind::Max, &[dim])?;
    let index = cx.reshape(index, kept)?;
    let value = shaped(cx, value, &shape, dim, keepdim, rank)?;
    let index = shaped(cx, index, &shape, dim, keepdim, rank)?;
    Ok(Imported::Tuple(vec![Imported::Tensor(value), Imported::Tensor(index)]))
}
