//! Binning: `searchsorted`, `bucketize`, `histogram` and the `histogramdd` family.
//!
//! `searchsorted` and `bucketize` run PyTorch's binary search step for step (unrolled to the
//! sequence's `log2`), so a NaN in the values or in the sequence lands where its kernel's does.
//!
//! Histograms bin an element `x` at `upper_bound(edges, x) - 1`, the rightmost bin including its
//! right edge, and skip elements outside the edges or NaN: what PyTorch's kernel computes, by
//! binary search for given edges and by interpolation corrected by a local search for edges it
//! spaces evenly. Evenly spaced edges are PyTorch's `linspace` in the input's dtype: `start + step
//! * i` for the first half, `end - step * (steps - 1 - i)` for the rest.

use ttpu_ir::{BinaryOp, CompareDirection, DType, ReduceKind, Scalar, ScatterKind, Shape, TensorType, ValueId};

use super::elementwise::tensor;
use super::index::scatter_points;
use crate::args::{Args, Val};
use crate::ctx::{Cx, Imported, Operand};
use crate::error::Result;

/// PyTorch's binary search of each of `values` in `boundaries` (last dim; 1-D, or sharing
/// `values`'s leading dims), step for step: `mid = start + (end - start) / 2`, the lower bound going
/// right where `!(b[mid] >= v)`, the upper bound where `!(b[mid] > v)`, until `start == end`. A
/// sequence of `m` takes at most `floor(log2 m) + 1` steps, unrolled; each reads `b[mid]` of every
/// value through a one-hot mask over the sequence. Following the search itself (rather than
/// counting the boundaries on one side) keeps PyTorch's answer where a NaN breaks the order.
fn search(cx: &mut Cx<'_>, boundaries: ValueId, values: ValueId, right: bool) -> Result<ValueId> {
    let b_rank = cx.rank(boundaries);
    let v_shape = cx.shape(values);
    let v_rank = v_shape.rank();
    let m = cx.static_dim(boundaries, b_rank - 1, "searchsorted")?;
    let mut cube_dims: Vec<ttpu_ir::Dim> = v_shape.dims().to_vec();
    cube_dims.push(ttpu_ir::Dim::Static(m));
    let cube: Shape = cube_dims.into_iter().collect();
    let elements: i64 = cx.static_dims(values, "searchsorted")?.iter().product();
    cx.table(&[elements, m], "searchsorted")?;
    let leading: Vec<i64> = (0..v_rank as i64).collect();
    let b_dims: Vec<i64> =
        if b_rank == 1 { vec![v_rank as i64] } else { (0..b_rank as i64 - 1).chain([v_rank as i64]).collect() };
    let bounds_wide = cx.broadcast_in_dim(boundaries, &b_dims, cube.clone())?;
    let built = cx.b.iota(TensorType::new(DType::I64, cube.clone()), v_rank as i64);
    let positions = cx.ok(built)?;
    let zero = cx.splat_like(bounds_wide, Scalar::Int(0))?;
    let direction = if right { CompareDirection::Gt } else { CompareDirection::Ge };
    let mut start = cx.splat(DType::I64, Scalar::Int(0), &v_shape)?;
    let mut end = cx.splat(DType::I64, Scalar::Int(m), &v_shape)?;
    let steps = 64 - (m as u64).leading_zeros();
    for _ in 0..steps {
        let active = cx.compare(CompareDirection::Lt, start, end)?;
        let width = cx.binary(BinaryOp::Subtract, end, start)?;
        let half = cx.binary_scalar(BinaryOp::ShiftRightArithmetic, width, Scalar::Int(1))?;
        let mid = cx.binary(BinaryOp::Add, start, half)?;
        let mid_wide = cx.broadcast_in_dim(mid, &leading, cube.clone())?;
        let at_mid = cx.compare(CompareDirection::Eq, positions, mid_wide)?;
        let picked = cx.select(at_mid, bounds_wide, zero)?;
        let mid_value = cx.reduce(picked, ReduceKind::Sum, &[v_rank])?;
        let beyond = cx.compare(direction, mid_value, values)?;
        let go_right = cx.unary(ttpu_ir::UnaryOp::Not, beyond)?;
        let move_start = cx.binary(BinaryOp::And, active, go_right)?;
        let move_end = cx.binary(BinaryOp::And, active, beyond)?;
        let next = cx.binary_scalar(BinaryOp::Add, mid, Scalar::Int(1))?;
        start = cx.select(move_start, next, start)?;
        end = cx.select(move_end, mid, end)?;
    }
    Ok(start)
}

/// Both operands in their promoted dtype (PyTorch compares a sequence and values of different
/// dtypes in their common type).
fn common(cx: &mut Cx<'_>, boundaries: ValueId, values: Operand) -> Result<(ValueId, ValueId)> {
    let dtype = cx.result_type(&[Operand::Tensor(boundaries), values]);
    let boundaries = cx.convert(boundaries, dtype)?;
    let values = match values {
        Operand::Tensor(value) => cx.convert(value, dtype)?,
        Operand::Scalar(value) => cx.scalar(dtype, value),
    };
    Ok((boundaries, values))
}

/// The index dtype: `i32` when `out_int32`, else `i64`.
fn index_dtype(args: &Args) -> Result<DType> {
    Ok(if args.bool_or("out_int32", false)? { DType::I32 } else { DType::I64 })
}

/// `searchsorted.Tensor` / `.Scalar(sorted_sequence, self, *, out_int32, right, side, sorter)`.
pub(super) fn searchsorted(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let mut sequence = args.tensor("sorted_sequence")?;
    let values = args.operand("self")?;
    let mut right = args.bool_or("right", false)?;
    match args.opt_str("side")? {
        None => {}
        Some("left") if !right => {}
        Some("right") => right = true,
        Some(side) => {
            return Err(cx.bad(format!("side must be 'left' or 'right' (and agree with right), found '{side}'")));
        }
    }
    if cx.rank(sequence) == 0 {
        return Err(cx.bad("sorted_sequence must have at least one dim"));
    }
    if let Some(sorter) = args.opt_tensor("sorter")? {
        let last = cx.rank(sequence) - 1;
        sequence = super::index::take_along(cx, sequence, last, sorter)?;
    }
    if let Operand::Tensor(value) = values
        && cx.rank(sequence) > 1
    {
        let (s, v) = (cx.shape(sequence), cx.shape(value));
        if s.rank() != v.rank() || s.dims()[..s.rank() - 1] != v.dims()[..v.rank() - 1] {
            return Err(cx.bad(format!(
                "sorted_sequence {} and values {} must share their leading dims",
                cx.ty(sequence),
                cx.ty(value)
            )));
        }
    }
    let (sequence, values) = common(cx, sequence, values)?;
    let found = search(cx, sequence, values, right)?;
    tensor(cx.convert(found, index_dtype(args)?)?)
}

/// `bucketize.Tensor` / `.Scalar(self, boundaries, *, out_int32, right)`: `searchsorted` of a 1-D
/// sequence.
pub(super) fn bucketize(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let boundaries = args.tensor("boundaries")?;
    if cx.rank(boundaries) != 1 {
        return Err(cx.bad(format!("boundaries must be 1-D, found {}", cx.ty(boundaries))));
    }
    let (boundaries, values) = common(cx, boundaries, args.operand("self")?)?;
    let found = search(cx, boundaries, values, args.bool_or("right", false)?)?;
    tensor(cx.convert(found, index_dtype(args)?)?)
}

/// PyTorch's `linspace(start, end, steps)` in `dtype`, `start` and `end` being scalars of it.
fn linspace(cx: &mut Cx<'_>, start: ValueId, end: ValueId, steps: i64) -> Result<ValueId> {
    let dtype = cx.dtype(start);
    let shape = Shape::from_static(&[steps]);
    let span = cx.binary(BinaryOp::Subtract, end, start)?;
    let divisor = cx.scalar(dtype, Scalar::Int((steps - 1).max(1)));
    let step = cx.binary(BinaryOp::Divide, span, divisor)?;
    let built = cx.b.iota(TensorType::new(DType::I64, shape.clone()), 0);
    let index = cx.ok(built)?;
    let from_end = cx.binary_scalar(BinaryOp::Subtract, index, Scalar::Int(steps - 1))?;
    let from_end = cx.unary(ttpu_ir::UnaryOp::Negate, from_end)?;
    let (index_f, from_end_f) = (cx.convert(index, dtype)?, cx.convert(from_end, dtype)?);
    let step = cx.broadcast_to(step, &shape)?;
    let (start, end) = (cx.broadcast_to(start, &shape)?, cx.broadcast_to(end, &shape)?);
    let rise = cx.binary(BinaryOp::Multiply, step, index_f)?;
    let low = cx.binary(BinaryOp::Add, start, rise)?;
    let fall = cx.binary(BinaryOp::Multiply, step, from_end_f)?;
    let high = cx.binary(BinaryOp::Subtract, end, fall)?;
    let first_half = cx.binary_scalar(BinaryOp::Subtract, index, Scalar::Int(steps / 2))?;
    let zero = cx.splat_like(first_half, Scalar::Int(0))?;
    let first_half = cx.compare(CompareDirection::Lt, first_half, zero)?;
    cx.select(first_half, low, high)
}

/// Evenly spaced edges over `range` or the data's extremes along column `column` of `points`
/// (`[n, d]`), widened by a half each way when they meet, as PyTorch's `select_outer_bin_edges`.
fn even_edges(cx: &mut Cx<'_>, points: ValueId, column: i64, bins: i64, range: Option<(f64, f64)>) -> Result<ValueId> {
    let dtype = cx.dtype(points);
    let (low, high) = match range {
        Some((low, high)) => {
            if !low.is_finite() || !high.is_finite() || low > high {
                return Err(cx.bad(format!("range [{low}, {high}] must be finite and ordered")));
            }
            let (low, high) = if low == high { (low - 0.5, high + 0.5) } else { (low, high) };
            (cx.scalar(dtype, Scalar::Float(low)), cx.scalar(dtype, Scalar::Float(high)))
        }
        None => {
            let n = cx.static_dim(points, 0, "histogram")?;
            if n == 0 {
                (cx.scalar(dtype, Scalar::Float(-0.5)), cx.scalar(dtype, Scalar::Float(0.5)))
            } else {
                let col = cx.slice(points, &[0, column], &[n, column + 1], &[1, 1])?;
                let col = cx.reshape(col, Shape::from_static(&[n]))?;
                let low = cx.reduce(col, ReduceKind::Min, &[0])?;
                let high = cx.reduce(col, ReduceKind::Max, &[0])?;
                // In f64, then rounded once to the dtype, as PyTorch reads the extremes as doubles.
                let (wide_low, wide_high) = (cx.convert(low, DType::F64)?, cx.convert(high, DType::F64)?);
                let same = cx.compare(CompareDirection::Eq, wide_low, wide_high)?;
                let lower = cx.binary_scalar(BinaryOp::Subtract, wide_low, Scalar::Float(0.5))?;
                let higher = cx.binary_scalar(BinaryOp::Add, wide_high, Scalar::Float(0.5))?;
                let low = cx.select(same, lower, wide_low)?;
                let high = cx.select(same, higher, wide_high)?;
                (cx.convert(low, dtype)?, cx.convert(high, dtype)?)
            }
        }
    };
    linspace(cx, low, high, bins + 1)
}

/// The bin of each of `values` (`[n]`) among `edges` (`[bins + 1]`), and whether it has one.
fn bin_of(cx: &mut Cx<'_>, values: ValueId, edges: ValueId) -> Result<(ValueId, ValueId)> {
    let n = cx.static_dim(values, 0, "histogram")?;
    let count = cx.static_dim(edges, 0, "histogram")?;
    cx.table(&[n, count], "histogram")?;
    let upper = search(cx, edges, values, true)?;
    let position = cx.binary_scalar(BinaryOp::Subtract, upper, Scalar::Int(1))?;
    let last = cx.splat_like(position, Scalar::Int(count - 2))?;
    let position = cx.binary(BinaryOp::Minimum, position, last)?;
    let first = cx.slice(edges, &[0], &[1], &[1])?;
    let first = cx.reshape(first, Shape::scalar())?;
    let final_edge = cx.slice(edges, &[count - 1], &[count], &[1])?;
    let final_edge = cx.reshape(final_edge, Shape::scalar())?;
    let shape = cx.shape(values);
    let (first, final_edge) = (cx.broadcast_to(first, &shape)?, cx.broadcast_to(final_edge, &shape)?);
    let above = cx.compare(CompareDirection::Ge, values, first)?;
    let below = cx.compare(CompareDirection::Le, values, final_edge)?;
    let inside = cx.binary(BinaryOp::And, above, below)?;
    Ok((position, inside))
}

/// The histogram of `points` (`[n, d]`) over `edges` (one `[bins_i + 1]` tensor per column),
/// weighted, normalised to a density if asked.
fn histogramdd(
    cx: &mut Cx<'_>,
    points: ValueId,
    edges: &[ValueId],
    weight: Option<ValueId>,
    density: bool,
) -> Result<ValueId> {
    let dtype = cx.dtype(points);
    let n = cx.static_dim(points, 0, "histogram")?;
    let bins: Vec<i64> =
        edges.iter().map(|&e| cx.static_dim(e, 0, "histogram").map(|c| c - 1)).collect::<Result<_>>()?;
    cx.table(&bins, "histogram")?;
    let shape = Shape::from_static(&[n]);
    let mut flat_index = cx.splat(DType::I64, Scalar::Int(0), &shape)?;
    let mut keep = cx.splat(DType::Bool, Scalar::Bool(true), &shape)?;
    for (column, &edge) in edges.iter().enumerate() {
        let col = cx.slice(points, &[0, column as i64], &[n, column as i64 + 1], &[1, 1])?;
        let col = cx.reshape(col, shape.clone())?;
        let (position, inside) = bin_of(cx, col, edge)?;
        let stride: i64 = bins[column + 1..].iter().product();
        let position = cx.binary_scalar(BinaryOp::Multiply, position, Scalar::Int(stride))?;
        flat_index = cx.binary(BinaryOp::Add, flat_index, position)?;
        keep = cx.binary(BinaryOp::And, keep, inside)?;
    }
    let total: i64 = bins.iter().product();
    // Skipped elements go one past the end, which the scatter drops.
    let nowhere = cx.splat(DType::I64, Scalar::Int(total), &shape)?;
    let flat_index = cx.select(keep, flat_index, nowhere)?;
    let points_index = cx.reshape(flat_index, Shape::from_static(&[n, 1]))?;
    let updates = match weight {
        Some(weight) => {
            let weight = cx.reshape(weight, shape.clone())?;
            cx.convert(weight, dtype)?
        }
        None => cx.splat(dtype, Scalar::Float(1.0), &shape)?,
    };
    let empty = cx.splat(dtype, Scalar::Float(0.0), &Shape::from_static(&[total]))?;
    let mut hist = scatter_points(cx, empty, points_index, updates, ScatterKind::Combine(ReduceKind::Sum))?;
    if density {
        let sum = cx.reduce(hist, ReduceKind::Sum, &[0])?;
        let sum = cx.broadcast_to(sum, &Shape::from_static(&[total]))?;
        hist = cx.binary(BinaryOp::Divide, hist, sum)?;
        hist = cx.reshape(hist, Shape::from_static(&bins))?;
        for (column, &edge) in edges.iter().enumerate() {
            let count = bins[column];
            let upper = cx.slice(edge, &[1], &[count + 1], &[1])?;
            let lower = cx.slice(edge, &[0], &[count], &[1])?;
            let width = cx.binary(BinaryOp::Subtract, upper, lower)?;
            let width = cx.broadcast_in_dim(width, &[column as i64], Shape::from_static(&bins))?;
            hist = cx.binary(BinaryOp::Divide, hist, width)?;
        }
    }
    cx.reshape(hist, Shape::from_static(&bins))
}

/// The float input of a histogram as `[n, d]` points: the last dim holds the coordinates
/// (`d = 1` for `histogram`, whose input is flattened).
fn as_points(cx: &mut Cx<'_>, x: ValueId, columns: Option<i64>) -> Result<ValueId> {
    if !cx.dtype(x).is_float() {
        return Err(cx.bad(format!("histograms take floating-point tensors, found {}", cx.ty(x))));
    }
    let sizes = cx.static_dims(x, "histogram")?;
    let total: i64 = sizes.iter().product();
    let d = match columns {
        Some(d) => d,
        None => *sizes.last().ok_or_else(|| cx.bad("histogramdd needs a tensor of rank 1 or more"))?,
    };
    let n = if d == 0 { 0 } else { total / d };
    cx.reshape(x, Shape::from_static(&[n, d]))
}

/// `range` as a list of (low, high) per column.
fn ranges(cx: &Cx<'_>, args: &Args, columns: usize) -> Result<Option<Vec<(f64, f64)>>> {
    let values = match args.get("range") {
        Val::Missing | Val::None => return Ok(None),
        Val::List(items) => items
            .iter()
            .map(|item| match item {
                Val::Float(v) => Ok(*v),
                Val::Int(v) => Ok(*v as f64),
                _ => Err(cx.bad("range must hold numbers")),
            })
            .collect::<Result<Vec<f64>>>()?,
        _ => return Err(cx.bad("range must be a list of numbers")),
    };
    if values.len() != 2 * columns {
        return Err(cx.bad(format!("range needs {} numbers, found {}", 2 * columns, values.len())));
    }
    Ok(Some(values.chunks(2).map(|pair| (pair[0], pair[1])).collect()))
}

/// `histogram.bin_ct(self, bins, *, range, weight, density)` and
/// `histogram.bins_tensor(self, bins, *, weight, density)` → (hist, bin_edges).
pub(super) fn histogram(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let points = as_points(cx, x, Some(1))?;
    let edges = match args.get("bins") {
        Val::Tensor(edges) => {
            let edges = *edges;
            if cx.rank(edges) != 1 || cx.dtype(edges) != cx.dtype(x) || cx.static_dim(edges, 0, "histogram")? < 2 {
                return Err(cx.bad(format!("bins {} must be 1-D edges of the input's dtype", cx.ty(edges))));
            }
            edges
        }
        _ => {
            let bins = args.int_or("bins", 100)?;
            if bins <= 0 {
                return Err(cx.bad(format!("bins must be positive, found {bins}")));
            }
            let range = ranges(cx, args, 1)?.map(|ranges| ranges[0]);
            even_edges(cx, points, 0, bins, range)?
        }
    };
    let weight = args.opt_tensor("weight")?;
    let hist = histogramdd(cx, points, &[edges], weight, args.bool_or("density", false)?)?;
    Ok(Imported::Tuple(vec![Imported::Tensor(hist), Imported::Tensor(edges)]))
}

/// The bin counts of `_histogramdd_bin_edges` / `_histogramdd_from_bin_cts`, one per column.
fn bin_counts(cx: &mut Cx<'_>, args: &Args, columns: i64) -> Result<Vec<i64>> {
    let bins = args.ints("bins")?;
    let bins = if bins.len() == 1 && columns > 1 { vec![bins[0]; columns as usize] } else { bins };
    if bins.len() as i64 != columns || bins.iter().any(|&b| b <= 0) {
        return Err(cx.bad(format!("bins {bins:?} must give a positive count for each of {columns} columns")));
    }
    Ok(bins)
}

/// The evenly spaced edges of `_histogramdd_bin_edges` / `_histogramdd_from_bin_cts`.
fn dd_edges(cx: &mut Cx<'_>, args: &Args, points: ValueId) -> Result<Vec<ValueId>> {
    let columns = cx.static_dim(points, 1, "histogramdd")?;
    let bins = bin_counts(cx, args, columns)?;
    let ranges = ranges(cx, args, columns as usize)?;
    (0..columns)
        .map(|column| {
            let range = ranges.as_ref().map(|ranges| ranges[column as usize]);
            even_edges(cx, points, column, bins[column as usize], range)
        })
        .collect()
}

/// `_histogramdd_bin_edges(self, bins, *, range, weight, density)` → the edges per column.
pub(super) fn histogramdd_bin_edges(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let points = as_points(cx, args.tensor("self")?, None)?;
    let edges = dd_edges(cx, args, points)?;
    Ok(Imported::Tuple(edges.into_iter().map(Imported::Tensor).collect()))
}

/// `_histogramdd_from_bin_cts(self, bins, *, range, weight, density)` → the histogram.
pub(super) fn histogramdd_from_bin_cts(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let points = as_points(cx, args.tensor("self")?, None)?;
    let edges = dd_edges(cx, args, points)?;
    let weight = args.opt_tensor("weight")?;
    tensor(histogramdd(cx, points, &edges, weight, args.bool_or("density", false)?)?)
}

/// `_histogramdd_from_bin_tensors(self, bins, *, weight, density)` → the histogram over given
/// edges.
pub(super) fn histogramdd_from_bin_tensors(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let points = as_points(cx, args.tensor("self")?, None)?;
    let edges = args.tensors("bins")?;
    let columns = cx.static_dim(points, 1, "histogramdd")?;
    if edges.len() as i64 != columns {
        return Err(cx.bad(format!("bins must hold edges for each of {columns} columns, found {}", edges.len())));
    }
    let weight = args.opt_tensor("weight")?;
    tensor(histogramdd(cx, points, &edges, weight, args.bool_or("density", false)?)?)
}
