//! Reductions: sum, mean, prod, amax/amin, max/min, any/all, argmax/argmin, var/std, cumsum.
//!
//! PyTorch's dtype rules apply: sums and products of integers and bools are `i64` unless a dtype
//! is given, `mean` needs a float, and `f16`/`bf16` accumulate in `f32` as PyTorch's CPU kernels
//! do. An empty or missing dim list reduces every dim.

use smallvec::SmallVec;
use ttpu_ir::{
    BinaryOp, CompareDirection, DType, Dim, ReduceKind, Scalar, Shape, TensorType, UnaryOp, ValueId, Window,
};

use super::elementwise::{tensor, to_bool};
use crate::args::Args;
use crate::ctx::{Cx, Imported, opmath};
use crate::error::Result;

/// The reduced dims: the `dim` argument (one int or a list), or all dims when it is absent,
/// `None` or empty.
fn reduced_dims(cx: &Cx<'_>, args: &Args, x: ValueId) -> Result<Vec<usize>> {
    let rank = cx.rank(x);
    let dims = if args.has_param("dim") { args.opt_ints("dim")?.unwrap_or_default() } else { Vec::new() };
    if dims.is_empty() {
        return Ok((0..rank).collect());
    }
    let dims = cx.norm_dims(&dims, rank)?;
    // A rank-0 tensor accepts dim 0 / -1 but has nothing to reduce.
    Ok(if rank == 0 { Vec::new() } else { dims })
}

fn keepdim(args: &Args) -> Result<bool> {
    if args.has_param("keepdim") { args.bool_or("keepdim", false) } else { Ok(false) }
}

/// The dtype of a sum or product: the given one, else `i64` for integers and bools.
fn accumulate_dtype(args: &Args, input: DType) -> Result<DType> {
    Ok(args.opt_dtype("dtype")?.unwrap_or(if input.is_float() { input } else { DType::I64 }))
}

/// Reduces `x` converted to `dtype`, accumulating in its opmath dtype.
pub(super) fn reduce_in(
    cx: &mut Cx<'_>,
    x: ValueId,
    kind: ReduceKind,
    dims: &[usize],
    keep: bool,
    dtype: DType,
) -> Result<ValueId> {
    let x = cx.convert(x, dtype)?;
    let compute = cx.convert(x, opmath(dtype))?;
    let reduced = cx.reduce_keep(compute, kind, dims, keep)?;
    cx.convert(reduced, dtype)
}

/// `sum.default` / `sum.dim_IntList`.
pub(super) fn sum(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let dims = reduced_dims(cx, args, x)?;
    let dtype = accumulate_dtype(args, cx.dtype(x))?;
    tensor(reduce_in(cx, x, ReduceKind::Sum, &dims, keepdim(args)?, dtype)?)
}

/// `prod.default` / `prod.dim_int`.
pub(super) fn prod(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let dims = reduced_dims(cx, args, x)?;
    let dtype = accumulate_dtype(args, cx.dtype(x))?;
    tensor(reduce_in(cx, x, ReduceKind::Product, &dims, keepdim(args)?, dtype)?)
}

/// The number of elements in `dims` of `x`, which must be static.
fn count(cx: &Cx<'_>, x: ValueId, dims: &[usize]) -> Result<i64> {
    dims.iter().try_fold(1i64, |acc, &dim| Ok(acc * cx.static_dim(x, dim, "averaging")?))
}

/// `mean.default` / `mean.dim`: the sum over the count, in floats only.
pub(super) fn mean(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let dtype = args.opt_dtype("dtype")?.unwrap_or(cx.dtype(x));
    if !dtype.is_float() {
        return Err(cx.bad(format!("mean needs a floating-point input or dtype, found {dtype}")));
    }
    let dims = reduced_dims(cx, args, x)?;
    tensor(mean_in(cx, x, &dims, keepdim(args)?, dtype)?)
}

/// The mean of `x` over `dims` as `dtype`, accumulated in opmath.
fn mean_in(cx: &mut Cx<'_>, x: ValueId, dims: &[usize], keep: bool, dtype: DType) -> Result<ValueId> {
    let n = ttpu_torch::graph::count(&mut cx.b, x, dims);
    let n = cx.ok(n)?;
    let x = cx.convert(x, dtype)?;
    let compute = cx.convert(x, opmath(dtype))?;
    let total = cx.reduce_keep(compute, ReduceKind::Sum, dims, keep)?;
    let mean = ttpu_torch::graph::divide_by_count(&mut cx.b, total, n, 0.0);
    let mean = cx.ok(mean)?;
    cx.convert(mean, dtype)
}

/// `amax` / `amin`.
pub(super) fn extremum(cx: &mut Cx<'_>, args: &Args, kind: ReduceKind) -> Result<Imported> {
    let x = args.tensor("self")?;
    let dims = reduced_dims(cx, args, x)?;
    let reduced = cx.reduce_propagating_nan(x, kind, &dims)?;
    if !keepdim(args)? {
        return tensor(reduced);
    }
    let kept = crate::ctx::keepdim_shape(&cx.shape(x), &dims);
    tensor(cx.reshape(reduced, kept)?)
}

/// `any` / `all`: a bool reduction of `x != 0`.
pub(super) fn any_all(cx: &mut Cx<'_>, args: &Args, kind: ReduceKind) -> Result<Imported> {
    let x = args.tensor("self")?;
    let dims = reduced_dims(cx, args, x)?;
    let as_bool = to_bool(cx, x)?;
    let reduced = cx.reduce_keep(as_bool, kind, &dims, keepdim(args)?)?;
    // PyTorch keeps `uint8` for `uint8` inputs; everything else gives bool.
    let out = if cx.dtype(x) == DType::U8 { DType::U8 } else { DType::Bool };
    tensor(cx.convert(reduced, out)?)
}

/// `argmax` / `argmin`: the first index of the extremum along `dim` (NaN counts as the extremum,
/// as in PyTorch), or of the flattened tensor when `dim` is `None`.
pub(super) fn arg_extremum(cx: &mut Cx<'_>, args: &Args, kind: ReduceKind) -> Result<Imported> {
    let x = args.tensor("self")?;
    let keep = args.bool_or("keepdim", false)?;
    match args.opt_int("dim")? {
        Some(dim) => {
            let dim = cx.norm_dim(dim, cx.rank(x))?;
            tensor(extreme_and_index(cx, x, dim, kind, keep)?.1)
        }
        None => {
            let n = count(cx, x, &(0..cx.rank(x)).collect::<Vec<_>>())?;
            let flat = cx.reshape(x, Shape::from_static(&[n]))?;
            let index = extreme_and_index(cx, flat, 0, kind, false)?.1;
            let shape = if keep { Shape::from_static(&vec![1; cx.rank(x)]) } else { Shape::scalar() };
            tensor(cx.reshape(index, shape)?)
        }
    }
}

/// `max.dim` / `min.dim` → (values, indices).
pub(super) fn extremum_dim(cx: &mut Cx<'_>, args: &Args, kind: ReduceKind) -> Result<Imported> {
    let x = args.tensor("self")?;
    let dim = cx.norm_dim(args.int("dim")?, cx.rank(x))?;
    let (values, indices) = extreme_and_index(cx, x, dim, kind, args.bool_or("keepdim", false)?)?;
    Ok(Imported::Tuple(vec![Imported::Tensor(values), Imported::Tensor(indices)]))
}

/// `max.default` / `min.default`: the extremum of every element.
pub(super) fn extremum_all(cx: &mut Cx<'_>, args: &Args, kind: ReduceKind) -> Result<Imported> {
    let x = args.tensor("self")?;
    let dims: Vec<usize> = (0..cx.rank(x)).collect();
    tensor(cx.reduce_propagating_nan(x, kind, &dims)?)
}

/// The extremum along `dim` and the first index holding it (NaN counts as the extremum).
fn extreme_and_index(
    cx: &mut Cx<'_>,
    x: ValueId,
    dim: usize,
    kind: ReduceKind,
    keep: bool,
) -> Result<(ValueId, ValueId)> {
    if cx.rank(x) == 0 {
        let zero = cx.splat(DType::I64, Scalar::Int(0), &Shape::scalar())?;
        return Ok((x, zero));
    }
    let shape = cx.shape(x);
    // With a NaN in the row the extremum is NaN, so the first NaN is also the first hit below.
    let reduced = cx.reduce_propagating_nan(x, kind, &[dim])?;
    let kept = cx.reshape(reduced, crate::ctx::keepdim_shape(&shape, &[dim]))?;
    let wide = cx.broadcast_to(kept, &shape)?;
    let mut hit = cx.compare(CompareDirection::Eq, x, wide)?;
    if cx.dtype(x).is_float() {
        let nan = cx.compare(CompareDirection::Ne, x, x)?;
        hit = cx.binary(BinaryOp::Or, hit, nan)?;
    }
    let positions = cx.b.iota(TensorType::new(DType::I64, shape.clone()), dim as i64);
    let positions = cx.ok(positions)?;
    // Misses get a position past the end, so the minimum is the first hit.
    let beyond = match &shape[dim] {
        Dim::Static(size) => *size,
        Dim::Sym(_) | Dim::Expr(_) => i64::MAX,
    };
    let beyond = cx.splat(DType::I64, Scalar::Int(beyond), &shape)?;
    let candidates = cx.select(hit, positions, beyond)?;
    let index = cx.reduce_keep(candidates, ReduceKind::Min, &[dim], keep)?;
    let values = if keep { kept } else { reduced };
    Ok((values, index))
}

/// The window of a running reduction along `dim` (of `size` elements, in a rank-`rank` tensor):
/// each position reduces itself and everything before it, the window reaching back over the whole
/// dim into padding that holds the reduction's identity.
pub(super) fn scan_window(rank: usize, dim: usize, size: i64) -> Window {
    let mut window = Window {
        dimensions: SmallVec::from_elem(1, rank),
        strides: SmallVec::from_elem(1, rank),
        base_dilations: SmallVec::from_elem(1, rank),
        window_dilations: SmallVec::from_elem(1, rank),
        padding: SmallVec::from_elem((0, 0), rank),
    };
    window.dimensions[dim] = size.max(1);
    window.padding[dim] = ((size - 1).max(0), 0);
    window
}

/// `cumsum(self, dim, dtype)`: a `reduce_window` sum whose window reaches back over the whole dim.
pub(super) fn cumsum(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    running(cx, args, ReduceKind::Sum)
}

/// `cumprod(self, dim, *, dtype)`: a running product (integers wrap as in PyTorch).
pub(super) fn cumprod(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    running(cx, args, ReduceKind::Product)
}

/// A running sum or product along `dim`: a `reduce_window` scan in the accumulation dtype's
/// opmath.
fn running(cx: &mut Cx<'_>, args: &Args, kind: ReduceKind) -> Result<Imported> {
    let x = args.tensor("self")?;
    let rank = cx.rank(x);
    let dim = cx.norm_dim(args.int("dim")?, rank)?;
    let dtype = accumulate_dtype(args, cx.dtype(x))?;
    if rank == 0 {
        return tensor(cx.convert(x, dtype)?);
    }
    let x = cx.convert(x, dtype)?;
    let compute = cx.convert(x, opmath(dtype))?;
    let Some(size) = cx.shape(x)[dim].as_static() else {
        // A symbolic dim has no static window: every prefix reduces its own masked copy.
        let scanned = super::scan::masked_scan(cx, compute, dim, kind)?;
        return tensor(cx.convert(scanned, dtype)?);
    };
    let built = cx.b.reduce_window(compute, kind, scan_window(rank, dim, size));
    let scanned = cx.ok(built)?;
    tensor(cx.convert(scanned, dtype)?)
}

/// `logcumsumexp(self, dim)`: `log(sum(exp(x[..=i])))` for every prefix, each prefix's own
/// log-sum-exp with its maximum taken out (so a prefix far below later values stays finite, and
/// an all `-inf` prefix gives `-inf`), computed over an `[.., n, n]` lower-triangular mask.
pub(super) fn logcumsumexp(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let rank = cx.rank(x);
    let dim = cx.norm_dim(args.int("dim")?, rank)?;
    let dtype = cx.dtype(x);
    if !dtype.is_float() {
        return Err(cx.bad(format!("logcumsumexp needs floating point, found {dtype}")));
    }
    if rank == 0 {
        return tensor(x);
    }
    let size = cx.shape(x)[dim].clone();
    let compute = cx.convert(x, opmath(dtype))?;
    // [.., n] with `dim` last, then [.., n (prefix end i), n (element j)].
    let mut order: Vec<i64> = (0..rank as i64).filter(|&d| d != dim as i64).collect();
    order.push(dim as i64);
    let last = cx.transpose(compute, &order)?;
    let mut wide: Vec<Dim> = cx.shape(last).dims().to_vec();
    wide.insert(rank - 1, size);
    let wide: Shape = wide.into_iter().collect();
    let mut keep: Vec<i64> = (0..rank as i64 - 1).collect();
    keep.push(rank as i64);
    let rows = cx.broadcast_in_dim(last, &keep, wide.clone())?;
    let i_ty = TensorType::new(DType::I64, wide.clone());
    let built = cx.b.iota(i_ty.clone(), rank as i64 - 1);
    let i = cx.ok(built)?;
    let built = cx.b.iota(i_ty, rank as i64);
    let j = cx.ok(built)?;
    let inside = cx.compare(CompareDirection::Le, j, i)?;
    let minus_inf = cx.splat_like(rows, Scalar::Float(f64::NEG_INFINITY))?;
    let masked = cx.select(inside, rows, minus_inf)?;
    let top = cx.reduce_keep(masked, ReduceKind::Max, &[rank], true)?;
    // An infinite maximum (all -inf, or a +inf) is taken out as 0 so no inf - inf appears.
    let finite = cx.unary(UnaryOp::IsFinite, top)?;
    let zero = cx.splat_like(top, Scalar::Float(0.0))?;
    let shift = cx.select(finite, top, zero)?;
    let shift_wide = cx.broadcast_to(shift, &wide)?;
    let centered = cx.binary(BinaryOp::Subtract, masked, shift_wide)?;
    let exp = cx.unary(UnaryOp::Exponential, centered)?;
    let total = cx.reduce_keep(exp, ReduceKind::Sum, &[rank], false)?;
    let log = cx.unary(UnaryOp::Log, total)?;
    let shift = cx.reshape(shift, cx.shape(log))?;
    let value = cx.binary(BinaryOp::Add, log, shift)?;
    // Back to the original dim order.
    let mut inverse = vec![0i64; rank];
    for (position, &d) in order.iter().enumerate() {
        inverse[d as usize] = position as i64;
    }
    let value = cx.transpose(value, &inverse)?;
    tensor(cx.convert(value, dtype)?)
}

/// `cummax` / `cummin(self, dim)`: the running extreme along `dim` and, for each position, the
/// index it came from, as PyTorch computes them: a tie moves the index to the later element, and
/// from the first NaN on the value is NaN and the index that of the latest NaN.
///
/// Values are a `reduce_window` scan like `cumsum`. An element is a *hit* when it equals the
/// running extreme at its own position (or is NaN); the running extreme at `i` then came from
/// the last hit at or before `i`, because the extreme only changes at a hit. So the indices are a
/// running maximum of the hits' positions (`-1` elsewhere).
pub(super) fn cumulative_extreme(cx: &mut Cx<'_>, args: &Args, kind: ReduceKind) -> Result<Imported> {
    let x = args.tensor("self")?;
    let rank = cx.rank(x);
    let dim = cx.norm_dim(args.int("dim")?, rank)?;
    if rank == 0 {
        let zero = cx.splat(DType::I64, Scalar::Int(0), &Shape::scalar())?;
        return Ok(Imported::Tuple(vec![Imported::Tensor(x), Imported::Tensor(zero)]));
    }
    let size = cx.static_dim(x, dim, "a running extreme")?;
    let dtype = cx.dtype(x);
    let scan = |cx: &mut Cx<'_>, value: ValueId, kind: ReduceKind| {
        let built = cx.b.reduce_window(value, kind, scan_window(rank, dim, size));
        cx.ok(built)
    };
    // Bools scan as integers (a max of bools is an `or`, which the window has no identity for).
    let compute = if dtype.is_bool() { cx.convert(x, DType::I32)? } else { x };
    let mut running = scan(cx, compute, kind)?;
    let mut nan = None;
    if dtype.is_float() {
        // XLA's CPU max and min may drop NaN: put it back from the first NaN on, before the hits
        // are found (a number after a NaN is never a hit).
        let is_nan = cx.compare(CompareDirection::Ne, x, x)?;
        let as_int = cx.convert(is_nan, DType::I32)?;
        let seen = scan(cx, as_int, ReduceKind::Max)?;
        let zero = cx.splat_like(seen, Scalar::Int(0))?;
        let seen = cx.compare(CompareDirection::Gt, seen, zero)?;
        let nans = cx.splat_like(x, Scalar::Float(f64::NAN))?;
        running = cx.select(seen, nans, running)?;
        nan = Some(is_nan);
    }
    let mut hit = cx.compare(CompareDirection::Eq, compute, running)?;
    if let Some(nan) = nan {
        hit = cx.binary(BinaryOp::Or, hit, nan)?;
    }
    let shape = cx.shape(x);
    let positions = cx.b.iota(TensorType::new(DType::I64, shape.clone()), dim as i64);
    let positions = cx.ok(positions)?;
    let miss = cx.splat(DType::I64, Scalar::Int(-1), &shape)?;
    let candidates = cx.select(hit, positions, miss)?;
    let indices = scan(cx, candidates, ReduceKind::Max)?;
    let values = cx.convert(running, dtype)?;
    Ok(Imported::Tuple(vec![Imported::Tensor(values), Imported::Tensor(indices)]))
}

/// `var.correction` / `std.correction` / `var.dim`: the mean squared deviation over
/// `n - correction` (`var.dim` takes `unbiased`: a correction of 1 or 0).
pub(super) fn var(cx: &mut Cx<'_>, args: &Args, sqrt: bool) -> Result<Imported> {
    let (result, _) = var_and_mean(cx, args, sqrt)?;
    tensor(result)
}

/// `var_mean.correction`: (var, mean).
pub(super) fn var_mean(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (var, mean) = var_and_mean(cx, args, false)?;
    Ok(Imported::Tuple(vec![Imported::Tensor(var), Imported::Tensor(mean)]))
}

fn var_and_mean(cx: &mut Cx<'_>, args: &Args, sqrt: bool) -> Result<(ValueId, ValueId)> {
    let x = args.tensor("self")?;
    let dtype = cx.dtype(x);
    if !dtype.is_float() {
        return Err(cx.bad(format!("var/std need a floating-point input, found {dtype}")));
    }
    let dims = reduced_dims(cx, args, x)?;
    let keep = args.bool_or("keepdim", false)?;
    let correction = if args.has_param("unbiased") {
        f64::from(u8::from(args.bool_or("unbiased", true)?))
    } else {
        args.scalar_or("correction", Scalar::Int(1))?.as_f64()
    };
    let built = ttpu_torch::decomp::var_mean(&mut cx.b, x, &dims, correction, keep, sqrt);
    cx.ok(built)
}
