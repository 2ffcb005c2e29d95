//! Max pooling over windows that differ per output position: `adaptive_max_pool3d` (windows from
//! the sizes) and `fractional_max_pool2d/3d` (windows from the random samples, which are data).
//!
//! Every window is gathered whole, tap by tap (`[N, C, out.., taps..]`, taps past a shorter
//! window masked out), and reduced as PyTorch's loops do: a tap replaces the running maximum when
//! it is larger or NaN (`val > max || isnan(val)`), so the result is the first largest value or the
//! last NaN, and the index its position in the input plane (`t * H * W + h * W + w`).

use ttpu_ir::{BinaryOp, CompareDirection, DType, Literal, ReduceKind, Scalar, Shape, TensorType, ValueId};

use super::index::{gather_points, stack_last};
use crate::args::Args;
use crate::ctx::{Cx, Imported};
use crate::error::Result;

/// The spatial window of one pooled dim: per output position its start (`[N, C, out]` i64) and
/// which of `taps` offsets belong to it (`[out, taps]`, all when `None`).
struct Windows {
    starts: ValueId,
    taps: i64,
    valid: Option<Vec<bool>>,
}

/// The maximum and its plane index over the windows of `x` (`[N, C, spatial..]`).
fn window_max(cx: &mut Cx<'_>, x: ValueId, windows: &[Windows]) -> Result<(ValueId, ValueId)> {
    let sizes = cx.static_dims(x, "max pooling")?;
    let n = windows.len();
    let dtype = cx.dtype(x);
    let outs: Vec<i64> = windows.iter().map(|w| cx.static_dim(w.starts, 2, "max pooling")).collect::<Result<_>>()?;
    let taps: Vec<i64> = windows.iter().map(|w| w.taps).collect();
    let big_dims: Vec<i64> =
        sizes[..2].iter().copied().chain(outs.iter().copied()).chain(taps.iter().copied()).collect();
    cx.table(&big_dims, "max pooling")?;
    let big = Shape::from_static(&big_dims);
    let i64_type = TensorType::new(DType::I64, big.clone());
    let mut coords = Vec::with_capacity(n + 2);
    for dim in 0..2 {
        let built = cx.b.iota(i64_type.clone(), dim as i64);
        coords.push(cx.ok(built)?);
    }
    let mut valid: Option<ValueId> = None;
    for (d, window) in windows.iter().enumerate() {
        let start = cx.broadcast_in_dim(window.starts, &[0, 1, 2 + d as i64], big.clone())?;
        let built = cx.b.iota(i64_type.clone(), (2 + n + d) as i64);
        let offset = cx.ok(built)?;
        coords.push(cx.binary(BinaryOp::Add, start, offset)?);
        if let Some(flags) = &window.valid {
            let flags: Vec<Scalar> = flags.iter().map(|&flag| Scalar::Int(i64::from(flag))).collect();
            let flags = Literal::from_scalars(DType::I8, &[outs[d], window.taps], &flags).expect("one per tap");
            let flags = cx.literal(flags);
            let flags = super::elementwise::to_bool(cx, flags)?;
            let flags = cx.broadcast_in_dim(flags, &[2 + d as i64, (2 + n + d) as i64], big.clone())?;
            valid = Some(match valid {
                None => flags,
                Some(acc) => cx.binary(BinaryOp::And, acc, flags)?,
            });
        }
    }
    let points = stack_last(cx, &coords)?;
    let values = gather_points(cx, x, points)?;
    // The plane index of each tap.
    let mut plane = cx.splat(DType::I64, Scalar::Int(0), &big)?;
    for d in 0..n {
        let stride: i64 = sizes[3 + d..].iter().product();
        let scaled = cx.binary_scalar(BinaryOp::Multiply, coords[2 + d], Scalar::Int(stride))?;
        plane = cx.binary(BinaryOp::Add, plane, scaled)?;
    }
    // Flatten the taps in loop order (the first pooled dim outermost).
    let total_taps: i64 = taps.iter().product();
    let flat_dims: Vec<i64> = sizes[..2].iter().copied().chain(outs.iter().copied()).chain([total_taps]).collect();
    let flat = Shape::from_static(&flat_dims);
    let last = flat_dims.len() - 1;
    let values = cx.reshape(values, flat.clone())?;
    let plane = cx.reshape(plane, flat.clone())?;
    let valid = match valid {
        Some(valid) => cx.reshape(valid, flat.clone())?,
        None => cx.splat(DType::Bool, Scalar::Bool(true), &flat)?,
    };
    let lowest = cx.splat(dtype, ReduceKind::Max.identity(dtype), &flat)?;
    let candidates = cx.select(valid, values, lowest)?;
    let built = cx.b.iota(TensorType::new(DType::I64, flat.clone()), last as i64);
    let position = cx.ok(built)?;
    let kept: Vec<i64> = flat_dims[..last].to_vec();
    let kept_shape = Shape::from_static(&kept);
    let kept_dims: Vec<i64> = (0..last as i64).collect();
    let best = cx.reduce(candidates, ReduceKind::Max, &[last])?;
    let best_wide = cx.broadcast_in_dim(best, &kept_dims, flat.clone())?;
    let hit = cx.compare(CompareDirection::Eq, candidates, best_wide)?;
    let hit = cx.binary(BinaryOp::And, hit, valid)?;
    let beyond = cx.splat(DType::I64, Scalar::Int(total_taps), &flat)?;
    let first = cx.select(hit, position, beyond)?;
    let mut chosen = cx.reduce(first, ReduceKind::Min, &[last])?;
    let mut value = best;
    if dtype.is_float() {
        let nan = cx.compare(CompareDirection::Ne, candidates, candidates)?;
        let nan = cx.binary(BinaryOp::And, nan, valid)?;
        let any = cx.reduce(nan, ReduceKind::Or, &[last])?;
        let before = cx.splat(DType::I64, Scalar::Int(-1), &flat)?;
        let nan_positions = cx.select(nan, position, before)?;
        let last_nan = cx.reduce(nan_positions, ReduceKind::Max, &[last])?;
        chosen = cx.select(any, last_nan, chosen)?;
        let nan_value = cx.splat(dtype, Scalar::Float(f64::NAN), &kept_shape)?;
        value = cx.select(any, nan_value, value)?;
    }
    let chosen_wide = cx.broadcast_in_dim(chosen, &kept_dims, flat.clone())?;
    let at = cx.compare(CompareDirection::Eq, position, chosen_wide)?;
    let minus = cx.splat(DType::I64, Scalar::Int(-1), &flat)?;
    let index = cx.select(at, plane, minus)?;
    let index = cx.reduce(index, ReduceKind::Max, &[last])?;
    Ok((value, index))
}

/// The input as `[N, C, spatial..]` and whether it had no batch dim.
fn batched(cx: &mut Cx<'_>, x: ValueId, n: usize, what: &str) -> Result<(ValueId, bool)> {
    let sizes = cx.static_dims(x, what)?;
    if sizes.len() == n + 1 {
        let shape: Vec<i64> = [1].into_iter().chain(sizes.iter().copied()).collect();
        return Ok((cx.reshape(x, Shape::from_static(&shape))?, true));
    }
    if sizes.len() != n + 2 || sizes.contains(&0) {
        return Err(cx.bad(format!(
            "{what} needs a non-empty tensor of rank {} or {}, found {}",
            n + 1,
            n + 2,
            cx.ty(x)
        )));
    }
    Ok((x, false))
}

/// Values and indices back to the input's batching.
fn unbatched(cx: &mut Cx<'_>, value: ValueId, index: ValueId, drop: bool) -> Result<Imported> {
    let (value, index) = if drop {
        let shape: Vec<i64> = cx.static_dims(value, "max pooling")?[1..].to_vec();
        (cx.reshape(value, Shape::from_static(&shape))?, cx.reshape(index, Shape::from_static(&shape))?)
    } else {
        (value, index)
    };
    Ok(Imported::Tuple(vec![Imported::Tensor(value), Imported::Tensor(index)]))
}

/// `adaptive_max_pool3d(self, output_size)` → (values, indices): each output cell pools
/// `[floor(i * in / out), ceil((i + 1) * in / out))` per dim.
pub(super) fn adaptive_max_pool3d(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (x, drop) = batched(cx, args.tensor("self")?, 3, "adaptive_max_pool3d")?;
    let output = args.ints("output_size")?;
    let sizes = cx.static_dims(x, "adaptive_max_pool3d")?;
    if output.len() != 3 || output.iter().any(|&o| o < 1) {
        return Err(cx.bad(format!("output_size {output:?} must hold 3 positive sizes")));
    }
    let mut windows = Vec::with_capacity(3);
    for (d, &out) in output.iter().enumerate() {
        let input = sizes[2 + d];
        cx.table(&[out, input], "adaptive_max_pool3d")?;
        let bounds: Vec<(i64, i64)> =
            (0..out).map(|i| ((i * input) / out, ((i + 1) * input + out - 1) / out)).collect();
        let taps = bounds.iter().map(|(start, end)| end - start).max().unwrap_or(1);
        let starts: Vec<Scalar> = bounds.iter().map(|&(start, _)| Scalar::Int(start)).collect();
        let starts = cx.literal(Literal::from_scalars(DType::I64, &[out], &starts).expect("one per output"));
        let starts = cx.broadcast_in_dim(starts, &[2], Shape::from_static(&[sizes[0], sizes[1], out]))?;
        let valid = bounds.iter().flat_map(|&(start, end)| (0..taps).map(move |k| k < end - start)).collect();
        windows.push(Windows { starts, taps, valid: Some(valid) });
    }
    let (value, index) = window_max(cx, x, &windows)?;
    unbatched(cx, value, index, drop)
}

/// `fractional_max_pool2d/3d(self, kernel_size, output_size, random_samples)` → (values,
/// indices): windows of the kernel's size starting at PyTorch's `generate_intervals` of each
/// plane's samples (`trunc((i + u) * alpha) - trunc(u * alpha)`, `alpha = (in - k) / (out - 1)`,
/// in the input's dtype; the last window ends at the input's end). The 2-D samples hold W then
/// H; the 3-D ones T, H, W.
pub(super) fn fractional_max_pool(cx: &mut Cx<'_>, args: &Args, n: usize) -> Result<Imported> {
    let what = if n == 2 { "fractional_max_pool2d" } else { "fractional_max_pool3d" };
    let (x, drop) = batched(cx, args.tensor("self")?, n, what)?;
    let dtype = cx.dtype(x);
    if !matches!(dtype, DType::F32 | DType::F64) {
        return Err(cx.bad(format!("{what} takes float32 or float64 tensors, found {}", cx.ty(x))));
    }
    let kernel = args.ints("kernel_size")?;
    let output = args.ints("output_size")?;
    let samples = args.tensor("random_samples")?;
    let sizes = cx.static_dims(x, what)?;
    let (batch, channels) = (sizes[0], sizes[1]);
    if kernel.len() != n
        || output.len() != n
        || cx.static_dims(samples, what)?.as_slice() != [batch, channels, n as i64]
    {
        return Err(cx.bad(format!(
            "needs {n} kernel and output sizes and samples of shape [{batch}, {channels}, {n}], found {:?}, {:?} and {}",
            kernel,
            output,
            cx.ty(samples)
        )));
    }
    let samples = cx.convert(samples, dtype)?;
    let mut windows = Vec::with_capacity(n);
    for d in 0..n {
        let (input, k, out) = (sizes[2 + d], kernel[d], output[d]);
        if k < 1 || out < 1 || k + out - 1 > input {
            return Err(cx.bad(format!("kernel {k} and output {out} do not fit an input of {input}")));
        }
        // The sample column of this dim: W, H in 2-D; T, H, W in 3-D.
        let column = if n == 2 { (1 - d) as i64 } else { d as i64 };
        let sample = cx.slice(samples, &[0, 0, column], &[batch, channels, column + 1], &[1, 1, 1])?;
        let plane = Shape::from_static(&[batch, channels, out]);
        let sample = cx.broadcast_in_dim(sample, &[0, 1, 2], plane.clone())?;
        let starts = if out > 1 {
            let alpha = cx.scalar(dtype, Scalar::Float((input - k) as f64));
            let steps = cx.scalar(dtype, Scalar::Float((out - 1) as f64));
            let alpha = cx.binary(BinaryOp::Divide, alpha, steps)?;
            let alpha = cx.broadcast_to(alpha, &plane)?;
            let built = cx.b.iota(TensorType::new(dtype, plane.clone()), 2);
            let i = cx.ok(built)?;
            let shifted = cx.binary(BinaryOp::Add, i, sample)?;
            let scaled = cx.binary(BinaryOp::Multiply, shifted, alpha)?;
            let base = cx.binary(BinaryOp::Multiply, sample, alpha)?;
            // `static_cast<int>` truncates toward zero.
            let scaled = cx.convert(scaled, DType::I64)?;
            let base = cx.convert(base, DType::I64)?;
            let starts = cx.binary(BinaryOp::Subtract, scaled, base)?;
            let built = cx.b.iota(TensorType::new(DType::I64, plane.clone()), 2);
            let position = cx.ok(built)?;
            let final_position = cx.splat(DType::I64, Scalar::Int(out - 1), &plane)?;
            let is_last = cx.compare(CompareDirection::Eq, position, final_position)?;
            let end = cx.splat(DType::I64, Scalar::Int(input - k), &plane)?;
            cx.select(is_last, end, starts)?
        } else {
            cx.splat(DType::I64, Scalar::Int(input - k), &plane)?
        };
        windows.push(Windows { starts, taps: k, valid: None });
    }
    let (value, index) = window_max(cx, x, &windows)?;
    unbatched(cx, value, index, drop)
}
