//! Ops whose result sizes the data decides: `nonzero`, `masked_select`, `unique` and its
//! siblings, `bincount`, and `.item()` (`_local_scalar_dense`).
//!
//! Each size is a symbol of its own in the export (PyTorch's unbacked `u0`). An import that has a
//! value for it builds the op at that size; one that has none computes the size instead
//! ([`Cx::data_dim`]) and leaves the node out, making the graph a size program that the driver
//! runs first (see [`crate::DataSize`]). Both come from the same inputs, so the sizes always fit
//! the data. The selections are built from a running count of a mask and a scatter into a buffer
//! of the known size, so they keep PyTorch's row-major order.

use ttpu_ir::{BinaryOp, CompareDirection, DType, ReduceKind, Scalar, ScatterKind, Shape, ValueId};

use super::elementwise::tensor;
use super::index::{
    as_bool_mask, gather_points, iota, running_count, scatter_points, selected_positions, sort_last, stack_last,
    true_count,
};
use crate::args::Args;
use crate::ctx::{Cx, DataDim, Imported};
use crate::error::Result;
use crate::sym::SymExpr;

/// `x != 0` (a bool tensor as it is).
fn nonzero_mask(cx: &mut Cx<'_>, x: ValueId) -> Result<ValueId> {
    if cx.dtype(x).is_bool() {
        return Ok(x);
    }
    if cx.dtype(x).is_complex() {
        return Err(cx.bad("nonzero of a complex tensor is not supported"));
    }
    let zero = cx.splat_like(x, Scalar::Int(0))?;
    cx.compare(CompareDirection::Ne, x, zero)
}

/// `x == value` for an `i64` tensor.
fn equals(cx: &mut Cx<'_>, x: ValueId, value: i64) -> Result<ValueId> {
    let value = cx.splat_like(x, Scalar::Int(value))?;
    cx.compare(CompareDirection::Eq, x, value)
}

/// The coordinates of flat positions `[n]` in a tensor of `dims`: `[n, rank]` `i64`.
fn coordinates(cx: &mut Cx<'_>, positions: ValueId, dims: &[i64]) -> Result<ValueId> {
    let n = cx.static_dim(positions, 0, "nonzero")?;
    if dims.is_empty() {
        return cx.splat(DType::I64, Scalar::Int(0), &Shape::from_static(&[n, 0]));
    }
    let mut parts = Vec::with_capacity(dims.len());
    let mut stride = 1i64;
    let mut strides = vec![0i64; dims.len()];
    for (slot, &size) in strides.iter_mut().zip(dims).rev() {
        *slot = stride;
        stride = stride.saturating_mul(size.max(1));
    }
    for (&size, &stride) in dims.iter().zip(&strides) {
        let coordinate = cx.binary_scalar(BinaryOp::Divide, positions, Scalar::Int(stride))?;
        let coordinate = cx.binary_scalar(BinaryOp::Remainder, coordinate, Scalar::Int(size.max(1)))?;
        parts.push(coordinate);
    }
    stack_last(cx, &parts)
}

/// `nonzero(self)`: the coordinates of the nonzero elements, row-major, `[count, rank]`.
pub(super) fn nonzero(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let dims = cx.static_dims(x, "nonzero")?;
    let mask = nonzero_mask(cx, x)?;
    let count = match cx.data_dim(&[(None, 0)], "the number of nonzero elements", |cx| true_count(cx, mask))? {
        DataDim::Known(count) => count,
        DataDim::Pending => return Ok(Imported::Skipped),
    };
    let positions = selected_positions(cx, mask, count)?;
    tensor(coordinates(cx, positions, &dims)?)
}

/// `nonzero_static(self, *, size, fill_value=-1)`: `nonzero` cut or padded to `size` rows, the
/// padding rows all `fill_value`. Its size is given, so nothing waits for the data.
pub(super) fn nonzero_static(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let size = args.int("size")?;
    let fill = args.int_or("fill_value", -1)?;
    if size < 0 {
        return Err(cx.bad(format!("size must be non-negative, found {size}")));
    }
    let dims = cx.static_dims(x, "nonzero_static")?;
    let total: i64 = dims.iter().product();
    let mask = nonzero_mask(cx, x)?;
    let positions = selected_positions(cx, mask, size)?;
    let found = coordinates(cx, positions, &dims)?;
    // Rows past the true count hold the position `total`, one past the end.
    let padding = equals(cx, positions, total)?;
    let rank = dims.len() as i64;
    let padding = cx.broadcast_in_dim(padding, &[0], Shape::from_static(&[size, rank]))?;
    let fill = cx.splat(DType::I64, Scalar::Int(fill), &Shape::from_static(&[size, rank]))?;
    tensor(cx.select(padding, fill, found)?)
}

/// `masked_select(self, mask)`: the elements where the mask (broadcast with `self`) is true, in
/// row-major order, `[count]`.
pub(super) fn masked_select(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let mask = args.tensor("mask")?;
    if !matches!(cx.dtype(mask), DType::Bool | DType::U8) {
        return Err(cx.bad(format!("the mask must be a bool tensor, found {}", cx.ty(mask))));
    }
    let shape = cx.broadcast_shape(&[cx.shape(x), cx.shape(mask)])?;
    let x = cx.broadcast_to(x, &shape)?;
    let mask = cx.broadcast_to(mask, &shape)?;
    let mask = as_bool_mask(cx, mask)?;
    let count = match cx.data_dim(&[(None, 0)], "the number of elements the mask selects", |cx| true_count(cx, mask))? {
        DataDim::Known(count) => count,
        DataDim::Pending => return Ok(Imported::Skipped),
    };
    if count == 0 {
        return tensor(cx.splat(cx.dtype(x), Scalar::Int(0), &Shape::from_static(&[0]))?);
    }
    let total: i64 = cx.static_dims(x, "masked_select")?.iter().product();
    let flat = cx.reshape(x, Shape::from_static(&[total]))?;
    let positions = selected_positions(cx, mask, count)?;
    let points = cx.reshape(positions, Shape::from_static(&[count, 1]))?;
    tensor(gather_points(cx, flat, points)?)
}

/// Groups of equal neighbours along dim 0 of `rows` (`[n]` or `[n, k]`): whether each row starts a
/// group (the first row, or one that differs from the row before in any entry; NaN differs from
/// everything, as PyTorch's `!=` says), `[n]` bool.
fn group_starts(cx: &mut Cx<'_>, rows: ValueId) -> Result<ValueId> {
    let dims = cx.static_dims(rows, "unique")?;
    let n = dims[0];
    if n == 0 {
        return cx.splat(DType::Bool, Scalar::Bool(false), &Shape::from_static(&[0]));
    }
    let rank = dims.len();
    let mut first_limit = dims.clone();
    first_limit[0] = 1;
    let mut previous_limit = dims.clone();
    previous_limit[0] = n - 1;
    let zeros = vec![0i64; rank];
    let ones = vec![1i64; rank];
    let first = cx.slice(rows, &zeros, &first_limit, &ones)?;
    let before = cx.slice(rows, &zeros, &previous_limit, &ones)?;
    let previous = cx.concatenate(&[first, before], 0)?;
    let differs = cx.compare(CompareDirection::Ne, rows, previous)?;
    let differs = if rank > 1 { cx.reduce(differs, ReduceKind::Or, &(1..rank).collect::<Vec<_>>())? } else { differs };
    let index = iota(cx, &Shape::from_static(&[n]), 0)?;
    let is_first = equals(cx, index, 0)?;
    cx.binary(BinaryOp::Or, is_first, differs)
}

/// The results of the `unique` family from rows grouped in their final order: the group starts
/// (`[n]` bool), the rows (`[n, ...]`) and where each row came from in the input (`None` when the
/// rows are in input order). Returns `(values, inverse, counts)` as PyTorch lays them out, or
/// `None` when the group count has no value yet.
struct Grouped {
    starts: ValueId,
    rows: ValueId,
    order: Option<ValueId>,
}

fn unique_results(
    cx: &mut Cx<'_>,
    grouped: Grouped,
    return_inverse: bool,
    return_counts: bool,
    inverse_shape: &[i64],
    candidates: &[(Option<usize>, usize)],
) -> Result<Option<[ValueId; 3]>> {
    let Grouped { starts, rows, order } = grouped;
    let groups = match cx.data_dim(candidates, "the number of distinct values", |cx| true_count(cx, starts))? {
        DataDim::Known(count) => count,
        DataDim::Pending => return Ok(None),
    };
    let dims = cx.static_dims(rows, "unique")?;
    let n = dims[0];
    let values = if groups == 0 {
        let shape: Vec<i64> = [0].into_iter().chain(dims[1..].iter().copied()).collect();
        cx.splat(cx.dtype(rows), Scalar::Int(0), &Shape::from_static(&shape))?
    } else {
        let positions = selected_positions(cx, starts, groups)?;
        let points = cx.reshape(positions, Shape::from_static(&[groups, 1]))?;
        gather_points(cx, rows, points)?
    };
    // Each row's group: how many starts there are up to it, less one.
    let (_, running) = running_count(cx, starts, n)?;
    let group = cx.binary_scalar(BinaryOp::Subtract, running, Scalar::Int(1))?;
    let group_points = cx.reshape(group, Shape::from_static(&[n, 1]))?;
    let empty = |cx: &mut Cx<'_>| cx.splat(DType::I64, Scalar::Int(0), &Shape::from_static(&[0]));
    let inverse = if return_inverse {
        let in_input_order = match order {
            // Row `i` of the sorted rows came from input position `order[i]`.
            Some(order) => {
                let zeros = cx.splat(DType::I64, Scalar::Int(0), &Shape::from_static(&[n]))?;
                let targets = cx.reshape(order, Shape::from_static(&[n, 1]))?;
                scatter_points(cx, zeros, targets, group, ScatterKind::Replace)?
            }
            None => group,
        };
        cx.reshape(in_input_order, Shape::from_static(inverse_shape))?
    } else {
        empty(cx)?
    };
    let counts = if return_counts {
        let zeros = cx.splat(DType::I64, Scalar::Int(0), &Shape::from_static(&[groups]))?;
        let ones = cx.splat(DType::I64, Scalar::Int(1), &Shape::from_static(&[n]))?;
        scatter_points(cx, zeros, group_points, ones, ScatterKind::Combine(ReduceKind::Sum))?
    } else {
        empty(cx)?
    };
    Ok(Some([values, inverse, counts]))
}

fn triple(results: Option<[ValueId; 3]>) -> Imported {
    match results {
        Some(results) => Imported::Tuple(results.into_iter().map(Imported::Tensor).collect()),
        None => Imported::Skipped,
    }
}

/// `_unique2(self, sorted, return_inverse, return_counts)`: the distinct elements in ascending
/// order (PyTorch's CPU kernel sorts whether or not `sorted` is set; every NaN is distinct and
/// sorts last), each element's group, and the group sizes; unrequested results are empty.
pub(super) fn unique2(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let (return_inverse, return_counts) =
        (args.bool_or("return_inverse", false)?, args.bool_or("return_counts", false)?);
    let (grouped, dims) = sorted_groups(cx, x)?;
    let candidates = [(Some(0), 0), (Some(2), 0)];
    Ok(triple(unique_results(cx, grouped, return_inverse, return_counts, &dims, &candidates)?))
}

/// The elements of `x` flattened and sorted (NaN last), grouped into runs of equal values; and
/// `x`'s dims.
fn sorted_groups(cx: &mut Cx<'_>, x: ValueId) -> Result<(Grouped, Vec<i64>)> {
    let dims = cx.static_dims(x, "unique")?.to_vec();
    let total: i64 = dims.iter().product();
    let flat = cx.reshape(x, Shape::from_static(&[total]))?;
    let (sorted, order) = sort_last(cx, flat, false)?;
    let starts = group_starts(cx, sorted)?;
    Ok((Grouped { starts, rows: sorted, order: Some(order) }, dims))
}

/// `x` with `dim` moved first and the rest flattened: `[size, rest]`, and the permutation used.
fn rows_along(cx: &mut Cx<'_>, x: ValueId, dim: usize) -> Result<(ValueId, Vec<i64>)> {
    let dims = cx.static_dims(x, "unique")?;
    let mut perm: Vec<i64> = vec![dim as i64];
    perm.extend((0..dims.len() as i64).filter(|&axis| axis != dim as i64));
    let moved = cx.transpose(x, &perm)?;
    let rest: i64 = dims.iter().enumerate().filter(|&(axis, _)| axis != dim).map(|(_, &size)| size).product();
    Ok((cx.reshape(moved, Shape::from_static(&[dims[dim], rest]))?, perm))
}

/// Rows `[n, k]` back to `x`'s layout with `groups` entries along `dim`.
fn rows_back(cx: &mut Cx<'_>, rows: ValueId, x: ValueId, dim: usize, perm: &[i64]) -> Result<ValueId> {
    let dims = cx.static_dims(x, "unique")?;
    let groups = cx.static_dim(rows, 0, "unique")?;
    let mut moved: Vec<i64> = vec![groups];
    moved.extend(dims.iter().enumerate().filter(|&(axis, _)| axis != dim).map(|(_, &size)| size));
    let reshaped = cx.reshape(rows, Shape::from_static(&moved))?;
    let mut inverse = vec![0i64; perm.len()];
    for (position, &axis) in perm.iter().enumerate() {
        inverse[axis as usize] = position as i64;
    }
    cx.transpose(reshaped, &inverse)
}

/// `unique_dim(self, dim, sorted, return_inverse, return_counts)`: the distinct slices along
/// `dim`, in lexicographic order (a stable sort by each column from the last to the first).
pub(super) fn unique_dim(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let dim = cx.norm_dim(args.int("dim")?, cx.rank(x))?;
    let (return_inverse, return_counts) =
        (args.bool_or("return_inverse", false)?, args.bool_or("return_counts", false)?);
    let (rows, perm) = rows_along(cx, x, dim)?;
    let [n, k] = cx.static_dims(rows, "unique")?[..] else { unreachable!("rows are two-dimensional") };
    cx.unroll(&[k], "unique_dim's column sorts")?;
    let mut order = iota(cx, &Shape::from_static(&[n]), 0)?;
    for column in (0..k).rev() {
        let keys = cx.slice(rows, &[0, column], &[n, column + 1], &[1, 1])?;
        let keys = cx.reshape(keys, Shape::from_static(&[n]))?;
        let points = cx.reshape(order, Shape::from_static(&[n, 1]))?;
        let keys = gather_points(cx, keys, points)?;
        let (_, step) = sort_last(cx, keys, false)?;
        let points = cx.reshape(step, Shape::from_static(&[n, 1]))?;
        order = gather_points(cx, order, points)?;
    }
    let points = cx.reshape(order, Shape::from_static(&[n, 1]))?;
    let sorted = gather_points(cx, rows, points)?;
    let starts = group_starts(cx, sorted)?;
    let grouped = Grouped { starts, rows: sorted, order: Some(order) };
    let candidates = [(Some(0), dim), (Some(2), 0)];
    let Some([values, inverse, counts]) =
        unique_results(cx, grouped, return_inverse, return_counts, &[n], &candidates)?
    else {
        return Ok(Imported::Skipped);
    };
    let values = rows_back(cx, values, x, dim, &perm)?;
    Ok(triple(Some([values, inverse, counts])))
}

/// `unique_consecutive(self, return_inverse, return_counts, dim)`: runs of equal neighbours
/// (elements of the flattened tensor, or slices along `dim`) collapsed to one, in input order.
pub(super) fn unique_consecutive(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let (return_inverse, return_counts) =
        (args.bool_or("return_inverse", false)?, args.bool_or("return_counts", false)?);
    let dims = cx.static_dims(x, "unique_consecutive")?;
    match args.opt_int("dim")? {
        None => {
            let total: i64 = dims.iter().product();
            let flat = cx.reshape(x, Shape::from_static(&[total]))?;
            let starts = group_starts(cx, flat)?;
            let grouped = Grouped { starts, rows: flat, order: None };
            let candidates = [(Some(0), 0), (Some(2), 0)];
            Ok(triple(unique_results(cx, grouped, return_inverse, return_counts, &dims, &candidates)?))
        }
        Some(dim) => {
            let dim = cx.norm_dim(dim, dims.len())?;
            let (rows, perm) = rows_along(cx, x, dim)?;
            let starts = group_starts(cx, rows)?;
            let grouped = Grouped { starts, rows, order: None };
            let candidates = [(Some(0), dim), (Some(2), 0)];
            let Some([values, inverse, counts]) =
                unique_results(cx, grouped, return_inverse, return_counts, &[dims[dim]], &candidates)?
            else {
                return Ok(Imported::Skipped);
            };
            let values = rows_back(cx, values, x, dim, &perm)?;
            Ok(triple(Some([values, inverse, counts])))
        }
    }
}

/// `unique_dim_consecutive(self, dim, return_inverse, return_counts)`: `unique_consecutive` along
/// `dim`.
pub(super) fn unique_dim_consecutive(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    unique_consecutive(cx, args)
}

/// `_unique(self, sorted, return_inverse)`: `_unique2` without counts, two results.
pub(super) fn unique(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let return_inverse = args.bool_or("return_inverse", false)?;
    let (grouped, dims) = sorted_groups(cx, x)?;
    match unique_results(cx, grouped, return_inverse, false, &dims, &[(Some(0), 0)])? {
        Some([values, inverse, _]) => Ok(Imported::Tuple(vec![Imported::Tensor(values), Imported::Tensor(inverse)])),
        None => Ok(Imported::Skipped),
    }
}

/// `-1` where `bad` holds, else `size`: a size that no range admits, so a run whose data PyTorch
/// would reject (negative counts, say) fails its range check instead of computing a wrong shape.
fn unless(cx: &mut Cx<'_>, bad: ValueId, size: ValueId) -> Result<ValueId> {
    let invalid = cx.scalar(DType::I64, Scalar::Int(-1));
    cx.select(bad, invalid, size)
}

/// Whether any element of the integer tensor `x` is negative, as a bool scalar.
fn any_negative(cx: &mut Cx<'_>, x: ValueId) -> Result<ValueId> {
    let zero = cx.splat_like(x, Scalar::Int(0))?;
    let negative = cx.compare(CompareDirection::Lt, x, zero)?;
    let dims: Vec<usize> = (0..cx.rank(negative)).collect();
    cx.reduce(negative, ReduceKind::Or, &dims)
}

/// `bincount(self, weights=None, minlength=0)`: how often each value of a 1-D non-negative
/// integer tensor occurs (or the sum of its weights), `max(max + 1, minlength)` bins. The bin
/// count is decided by the data; a negative value (which PyTorch rejects) fails the run.
pub(super) fn bincount(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let minlength = args.int_or("minlength", 0)?;
    if cx.rank(x) != 1 || !cx.dtype(x).is_integer() {
        return Err(cx.bad(format!("bincount takes a 1-D integer tensor, found {}", cx.ty(x))));
    }
    if minlength < 0 {
        return Err(cx.bad(format!("minlength must be non-negative, found {minlength}")));
    }
    let weights = args.opt_tensor("weights")?;
    let n = cx.static_dim(x, 0, "bincount")?;
    let values = cx.convert(x, DType::I64)?;
    let bins = cx.data_dim(&[(None, 0)], "the number of bins (the largest value plus one)", |cx| {
        let largest = cx.reduce(values, ReduceKind::Max, &[0])?;
        let past = cx.binary_scalar(BinaryOp::Add, largest, Scalar::Int(1))?;
        let minlength = cx.scalar(DType::I64, Scalar::Int(minlength));
        let bins = cx.binary(BinaryOp::Maximum, past, minlength)?;
        let negative = any_negative(cx, values)?;
        unless(cx, negative, bins)
    })?;
    let bins = match bins {
        DataDim::Known(bins) => bins,
        DataDim::Pending => return Ok(Imported::Skipped),
    };
    // PyTorch counts in `i64` without weights and sums float weights in their dtype (`f64` for
    // any other weights).
    let (dtype, updates) = match weights {
        None => (DType::I64, cx.splat(DType::I64, Scalar::Int(1), &Shape::from_static(&[n]))?),
        Some(weights) => {
            let dtype = match cx.dtype(weights) {
                dtype @ (DType::F32 | DType::F64) => dtype,
                _ => DType::F64,
            };
            if cx.shape(weights) != cx.shape(x) {
                return Err(cx.bad(format!("weights {} must have the shape of self {}", cx.ty(weights), cx.ty(x))));
            }
            (dtype, cx.convert(weights, dtype)?)
        }
    };
    let zeros = cx.splat(dtype, Scalar::Int(0), &Shape::from_static(&[bins]))?;
    let points = cx.reshape(values, Shape::from_static(&[n, 1]))?;
    tensor(scatter_points(cx, zeros, points, updates, ScatterKind::Combine(ReduceKind::Sum))?)
}

/// The length of `repeat_interleave.Tensor(repeats)` without `output_size`: the sum of
/// `repeats`, decided by the data (a negative repeat, which PyTorch rejects, fails the run).
pub(super) fn repeat_length(cx: &mut Cx<'_>, repeats: ValueId) -> Result<DataDim> {
    cx.data_dim(&[(None, 0)], "the sum of the repeats", |cx| {
        let values = cx.convert(repeats, DType::I64)?;
        let dims: Vec<usize> = (0..cx.rank(values)).collect();
        let total = cx.reduce(values, ReduceKind::Sum, &dims)?;
        let negative = any_negative(cx, values)?;
        unless(cx, negative, total)
    })
}

/// `_local_scalar_dense(self)` (`.item()` of an integer tensor): a number the data decides. With
/// its value given it is that number; without, the size program reads it back.
pub(super) fn local_scalar_dense(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    if cx.static_dims(x, ".item()")?.iter().product::<i64>() != 1 {
        return Err(cx.bad(format!(".item() needs a one-element tensor, found {}", cx.ty(x))));
    }
    let dtype = cx.dtype(x);
    match cx.annotated_sym.clone() {
        Some(SymExpr::Int(value)) => Ok(Imported::SymInt(SymExpr::Int(value))),
        Some(SymExpr::Symbol(name)) if cx.is_data_symbol(&name) && dtype.is_integer() => {
            let scalar = cx.reshape(x, Shape::from_static(&[]))?;
            match cx.data_sym(&name, "the value `.item()` reads", scalar)? {
                DataDim::Known(value) => Ok(Imported::SymInt(SymExpr::Int(value))),
                DataDim::Pending => Ok(Imported::Skipped),
            }
        }
        _ if dtype.is_integer() => Err(cx.bad(format!(
            ".item() of a {dtype} tensor needs a symbol of its own as its annotation (`Sym(u0)`), found {}",
            cx.annotated_sym.as_ref().map_or("none".to_string(), |expr| format!("`Sym({})`", crate::sym::Show(expr)))
        ))),
        _ => Err(cx.bad(format!(
            ".item() of a {dtype} tensor gives a Python {} the data decides; only integer values are read back \
             (compute with the tensor instead)",
            if dtype.is_float() { "float" } else { "value" },
        ))),
    }
}
