//! Separable resampling with PyTorch's per-axis taps: the antialiased upsamplings
//! (`_upsample_bilinear2d_aa`, `_upsample_bicubic2d_aa`) and the bilinear upsampling of `uint8`
//! images.
//!
//! PyTorch's CPU kernels (`separable_upsample_generic_Nd_kernel_impl`) resample one spatial dim at
//! a time, the last one first, skipping dims whose size does not change. Each output position
//! reads a window of input positions (`xmin`, `size`) with weights computed on the host in the
//! input's float type (or in `f64` and then rounded to `int16` fixed point for `uint8`). The
//! weights here are computed the same way, on the host, and applied tap by tap in PyTorch's
//! order: gather of the `k`-th input of every window, times its weight, summed from the first tap
//! on. Taps past a window's end are masked out, so an infinite or NaN input outside the window
//! never reaches a result.
//!
//! For `uint8`, each pass sums `input * int16 weight` in `i32` from `2^(precision - 1)` (the
//! rounding half), shifts right by the precision and clamps to `[0, 255]`, as
//! `basic_loop_aa_horizontal<uint8_t>` does; the pass between the two dims is stored as `uint8`.

use ttpu_ir::{BinaryOp, DType, Literal, Scalar, Shape, ValueId};

use super::elementwise::to_bool;
use super::pool::{upsample_output, upsampled};
use crate::args::Args;
use crate::ctx::{Cx, Imported, opmath};
use crate::error::Result;

/// The interpolation kernel of an axis.
#[derive(Copy, Clone, PartialEq)]
pub(super) enum Filter {
    /// Triangle (bilinear), two taps without antialiasing.
    Linear,
    /// Keys' cubic convolution (bicubic), four taps without antialiasing.
    Cubic,
}

impl Filter {
    fn taps(self) -> usize {
        match self {
            Filter::Linear => 2,
            Filter::Cubic => 4,
        }
    }
}

/// The arithmetic PyTorch computes weights in (`f32` for float inputs, `f64` for double and
/// `uint8`), so host-side weights round as its own do.
trait Real: Copy + PartialOrd + std::ops::Add<Output = Self> + std::ops::Sub<Output = Self> {
    fn of(value: f64) -> Self;
    fn get(self) -> f64;
    fn mul(self, other: Self) -> Self;
    fn div(self, other: Self) -> Self;
    fn abs(self) -> Self;
}

impl Real for f32 {
    fn of(value: f64) -> Self {
        value as f32
    }
    fn get(self) -> f64 {
        f64::from(self)
    }
    fn mul(self, other: Self) -> Self {
        self * other
    }
    fn div(self, other: Self) -> Self {
        self / other
    }
    fn abs(self) -> Self {
        f32::abs(self)
    }
}

impl Real for f64 {
    fn of(value: f64) -> Self {
        value
    }
    fn get(self) -> f64 {
        self
    }
    fn mul(self, other: Self) -> Self {
        self * other
    }
    fn div(self, other: Self) -> Self {
        self / other
    }
    fn abs(self) -> Self {
        f64::abs(self)
    }
}

/// PyTorch's `aa_filter` of `filter` at `x` (`a` = -0.5 for antialiased bicubic, -0.75 without,
/// as `HelperInterpCubic::aa_filter` chooses).
fn filter_at<T: Real>(filter: Filter, x: T, antialias: bool) -> T {
    let x = x.abs();
    let one = T::of(1.0);
    match filter {
        Filter::Linear => {
            if x < one {
                one - x
            } else {
                T::of(0.0)
            }
        }
        Filter::Cubic => {
            let a = T::of(if antialias { -0.5 } else { -0.75 });
            let two = T::of(2.0);
            if x < one {
                // cubic_convolution1: ((A + 2) * x - (A + 3)) * x * x + 1
                ((a + two).mul(x) - (a + T::of(3.0))).mul(x).mul(x) + one
            } else if x < two {
                // cubic_convolution2: ((A * x - 5A) * x + 8A) * x - 4A
                ((a.mul(x) - T::of(5.0).mul(a)).mul(x) + T::of(8.0).mul(a)).mul(x) - T::of(4.0).mul(a)
            } else {
                T::of(0.0)
            }
        }
    }
}

/// The taps of one axis: per output position the first input position and the weights of the
/// window (`taps` per position, zero past the window's end).
struct Axis<T> {
    starts: Vec<i64>,
    sizes: Vec<i64>,
    weights: Vec<T>,
    taps: usize,
    largest: T,
}

/// `area_pixel_compute_scale`: the input step per output step.
fn pixel_scale<T: Real>(input: i64, output: i64, align_corners: bool, scale: Option<f64>) -> T {
    if align_corners {
        return if output > 1 { T::of((input - 1) as f64).div(T::of((output - 1) as f64)) } else { T::of(0.0) };
    }
    match scale {
        Some(scale) if scale > 0.0 => T::of(1.0).div(T::of(scale)),
        _ => T::of(input as f64).div(T::of(output as f64)),
    }
}

/// `_compute_index_ranges_weights` for one axis of `input` positions resampled to `output`; the
/// table of weights is checked against the importer's limits before it is allocated.
fn axis_weights<T: Real>(
    cx: &Cx<'_>,
    input: i64,
    output: i64,
    scale: T,
    filter: Filter,
    antialias: bool,
    align_corners: bool,
) -> Result<Axis<T>> {
    let zero = T::of(0.0);
    let interp = filter.taps() as f64;
    let (support, taps) = if antialias {
        let support = if scale >= T::of(1.0) { T::of(interp * 0.5).mul(scale) } else { T::of(interp * 0.5) };
        (support, (support.get().ceil() as i64).saturating_mul(2).saturating_add(1))
    } else {
        (T::of(interp * 0.5), filter.taps() as i64)
    };
    cx.table(&[output, taps], "resampling")?;
    let taps = taps as usize;
    let mut axis =
        Axis { starts: vec![], sizes: vec![], weights: vec![zero; output as usize * taps], taps, largest: zero };
    for i in 0..output {
        let row = &mut axis.weights[i as usize * taps..(i as usize + 1) * taps];
        let (start, size) = if antialias {
            // `_compute_indices_min_size_weights_aa`.
            let center = scale.mul(T::of(i as f64 + 0.5));
            let invscale = if scale >= T::of(1.0) { T::of(1.0).div(scale) } else { T::of(1.0) };
            let start = ((center - support + T::of(0.5)).get() as i64).max(0);
            let size = (((center + support + T::of(0.5)).get() as i64).min(input) - start).clamp(0, taps as i64);
            let mut total = zero;
            for (j, cell) in row.iter_mut().enumerate().take(size as usize) {
                let w = filter_at(filter, (T::of((j as i64 + start) as f64) - center + T::of(0.5)).mul(invscale), true);
                *cell = w;
                total = total + w;
            }
            if total.get() != 0.0 {
                for w in row.iter_mut().take(size as usize) {
                    *w = w.div(total);
                    if *w > axis.largest {
                        axis.largest = *w;
                    }
                }
            }
            (start, size)
        } else {
            // `_compute_indices_min_size_weights`: taps outside the input fold into the edge ones.
            let cubic = filter == Filter::Cubic;
            let real = if align_corners {
                scale.mul(T::of(i as f64))
            } else {
                let source = scale.mul(T::of(i as f64 + 0.5)) - T::of(0.5);
                if !cubic && source < zero { zero } else { source }
            };
            // `guard_index_and_lambda` floors in `float` (`floorf`).
            let index = ((real.get() as f32).floor() as i64).min(input - 1);
            let lambda = {
                let lambda = real - T::of(index as f64);
                if lambda < zero {
                    zero
                } else if lambda > T::of(1.0) {
                    T::of(1.0)
                } else {
                    lambda
                }
            };
            let half = (taps as f64 * 0.5) as i64;
            let (low, high) = (index - half + 1, index + half + 1);
            let start = low.max(0);
            let size = (high.min(input) - start).clamp(0, taps as i64);
            let mut slot = 0i64;
            for j in 0..taps as i64 {
                let w = filter_at(filter, T::of((j + 1 - half) as f64) - lambda, false);
                if low + j <= 0 {
                    slot = 0;
                } else if low + j >= input - 1 {
                    slot = size - 1;
                }
                if let Some(cell) = usize::try_from(slot).ok().and_then(|slot| row.get_mut(slot)) {
                    *cell = *cell + w;
                    if *cell > axis.largest {
                        axis.largest = *cell;
                    }
                }
                slot += 1;
            }
            (start, size)
        };
        axis.starts.push(start);
        axis.sizes.push(size);
    }
    Ok(axis)
}

/// The weights of resampling a dim of `input` to `output` as PyTorch keeps them: `f32` for float
/// tensors of 32 bits or fewer, `f64` for double and `uint8` ones.
#[allow(clippy::too_many_arguments)]
fn axis_of(
    cx: &Cx<'_>,
    dtype: DType,
    input: i64,
    output: i64,
    filter: Filter,
    antialias: bool,
    align_corners: bool,
    scale: Option<f64>,
) -> Result<Axis<f64>> {
    Ok(match dtype {
        DType::F32 | DType::F16 | DType::BF16 => {
            let scale = pixel_scale::<f32>(input, output, align_corners, scale);
            let axis = axis_weights::<f32>(cx, input, output, scale, filter, antialias, align_corners)?;
            let weights = axis.weights.iter().map(|&w| f64::from(w)).collect();
            Axis { starts: axis.starts, sizes: axis.sizes, weights, taps: axis.taps, largest: f64::from(axis.largest) }
        }
        _ => {
            let scale = pixel_scale::<f64>(input, output, align_corners, scale);
            axis_weights::<f64>(cx, input, output, scale, filter, antialias, align_corners)?
        }
    })
}

/// One pass over `dim` of `x` (float or `uint8`) from `input` to `output` positions.
#[allow(clippy::too_many_arguments)]
fn resample_dim(
    cx: &mut Cx<'_>,
    x: ValueId,
    dim: usize,
    output: i64,
    filter: Filter,
    antialias: bool,
    align_corners: bool,
    scale: Option<f64>,
) -> Result<ValueId> {
    let input = cx.static_dim(x, dim, "resampling")?;
    let dtype = cx.dtype(x);
    let axis = axis_of(cx, dtype, input, output, filter, antialias, align_corners, scale)?;
    // `_compute_index_ranges_int16_weights` for `uint8`: the most bits (at most 22) that keep the
    // largest weight, doubled, inside int16.
    let fixed: Option<u32> = (dtype == DType::U8).then(|| {
        let mut precision = 0u32;
        while precision < 22 && ((0.5 + axis.largest * f64::from(1u32 << (precision + 1))) as i64) < (1 << 15) {
            precision += 1;
        }
        precision
    });
    let mut shape = cx.shape(x);
    shape.0[dim] = ttpu_ir::Dim::Static(output);
    let accumulate = match fixed {
        Some(_) => DType::I32,
        None => opmath(dtype),
    };
    let source = cx.convert(x, accumulate)?;
    let mut sum = match fixed {
        Some(precision) if precision > 0 => Some(cx.splat(DType::I32, Scalar::Int(1 << (precision - 1)), &shape)?),
        _ => None,
    };
    for k in 0..axis.taps {
        let mut positions = Vec::with_capacity(output as usize);
        let mut weights = Vec::with_capacity(output as usize);
        let mut inside = Vec::with_capacity(output as usize);
        for o in 0..output as usize {
            let within = (k as i64) < axis.sizes[o];
            positions.push(Scalar::Int(if within { axis.starts[o] + k as i64 } else { axis.starts[o].min(input - 1) }));
            let weight = axis.weights[o * axis.taps + k];
            weights.push(match fixed {
                // Rounded half away from zero, as PyTorch's `(int)(0.5 + v)`.
                Some(precision) => {
                    let v = weight * f64::from(1u32 << precision);
                    Scalar::Int(if v < 0.0 { (-0.5 + v) as i64 } else { (0.5 + v) as i64 })
                }
                None => Scalar::Float(weight),
            });
            inside.push(Scalar::Int(i64::from(within)));
        }
        if inside.iter().all(|flag| *flag == Scalar::Int(0)) {
            continue;
        }
        let positions = cx.literal(Literal::from_scalars(DType::I64, &[output], &positions).expect("one per output"));
        let taken = super::layout::gather_dim(cx, source, dim, positions)?;
        let weights = cx.literal(Literal::from_scalars(accumulate, &[output], &weights).expect("one per output"));
        let weights = cx.broadcast_in_dim(weights, &[dim as i64], shape.clone())?;
        let mut term = cx.binary(BinaryOp::Multiply, taken, weights)?;
        if inside.contains(&Scalar::Int(0)) {
            // An `i8` constant compared with zero: non-splat `bool` constants do not lower.
            let mask = cx.literal(Literal::from_scalars(DType::I8, &[output], &inside).expect("one per output"));
            let mask = to_bool(cx, mask)?;
            let mask = cx.broadcast_in_dim(mask, &[dim as i64], shape.clone())?;
            let zero = cx.splat(accumulate, Scalar::Int(0), &shape)?;
            term = cx.select(mask, term, zero)?;
        }
        sum = Some(match sum {
            None => term,
            Some(acc) => cx.binary(BinaryOp::Add, acc, term)?,
        });
    }
    let sum = match sum {
        Some(sum) => sum,
        None => cx.splat(accumulate, Scalar::Int(0), &shape)?,
    };
    match fixed {
        Some(precision) => {
            let shifted = cx.binary_scalar(BinaryOp::ShiftRightArithmetic, sum, Scalar::Int(i64::from(precision)))?;
            let low = cx.binary_scalar(BinaryOp::Maximum, shifted, Scalar::Int(0))?;
            let clamped = cx.binary_scalar(BinaryOp::Minimum, low, Scalar::Int(255))?;
            cx.convert(clamped, DType::U8)
        }
        None => cx.convert(sum, dtype),
    }
}

/// Resamples the spatial dims of `x` (rank `2 + n`) to `output`, the last dim first, each dim
/// whose size changes once, as PyTorch's separable kernel does.
pub(super) fn separable(
    cx: &mut Cx<'_>,
    x: ValueId,
    output: &[i64],
    scales: Option<&[f64]>,
    filter: Filter,
    antialias: bool,
    align_corners: bool,
) -> Result<ValueId> {
    let sizes = cx.static_dims(x, "resampling")?;
    let n = output.len();
    let mut value = x;
    for index in (0..n).rev() {
        let dim = 2 + index;
        if sizes[dim] == output[index] {
            continue;
        }
        if sizes[dim] == 0 || output[index] <= 0 {
            return Err(cx.bad(format!("cannot resample dim {dim} of {} to {}", cx.ty(x), output[index])));
        }
        let scale = scales.and_then(|scales| scales.get(index).copied()).filter(|&scale| scale > 0.0);
        value = resample_dim(cx, value, dim, output[index], filter, antialias, align_corners, scale)?;
    }
    Ok(value)
}

/// `_upsample_bilinear2d_aa` / `_upsample_bicubic2d_aa` (`.default` and `.vec`): antialiased
/// resampling of a float or `uint8` image batch.
pub(super) fn upsample_aa(cx: &mut Cx<'_>, args: &Args, filter: Filter) -> Result<Imported> {
    let x = upsampled(args)?;
    let dtype = cx.dtype(x);
    let sizes = cx.static_dims(x, "upsampling")?;
    if sizes.len() != 4 || !(matches!(dtype, DType::F32 | DType::F64 | DType::U8)) {
        return Err(cx.bad(format!("expects a float32, float64 or uint8 tensor of rank 4, found {}", cx.ty(x))));
    }
    let align_corners = args.bool_or("align_corners", false)?;
    let (output, scales) = upsample_output(cx, args, &sizes)?;
    if output.len() != 2 || scales.as_ref().is_some_and(|scales| scales.len() != 2) {
        return Err(cx.bad("needs 2 output sizes or scale factors"));
    }
    let value = separable(cx, x, &output, scales.as_deref(), filter, true, align_corners)?;
    Ok(Imported::Tensor(value))
}

/// `upsample_bilinear2d` of a `uint8` image batch: PyTorch's fixed-point separable kernel.
pub(super) fn upsample_bilinear_u8(cx: &mut Cx<'_>, args: &Args, x: ValueId, sizes: &[i64]) -> Result<Imported> {
    let align_corners = args.bool_or("align_corners", false)?;
    let (output, scales) = upsample_output(cx, args, sizes)?;
    if output.len() != 2 || scales.as_ref().is_some_and(|scales| scales.len() != 2) {
        return Err(cx.bad("needs 2 output sizes or scale factors"));
    }
    let shape = Shape::from_static(&[sizes[0], sizes[1], output[0], output[1]]);
    let value = separable(cx, x, &output, scales.as_deref(), Filter::Linear, false, align_corners)?;
    Ok(Imported::Tensor(cx.reshape(value, shape)?))
}

/// `_upsample_bilinear2d_aa_backward` / `_upsample_bicubic2d_aa_backward(grad_output,
/// output_size, input_size, align_corners, scales_h, scales_w)`: each output pixel's gradient
/// spread back over the input pixels it weighed, with the forward's weights (the transpose of
/// its separable resampling, a dense `[output, input]` matrix per resized dim).
pub(super) fn upsample_aa_backward(cx: &mut Cx<'_>, args: &Args, filter: Filter) -> Result<Imported> {
    let grad = args.tensor("grad_output")?;
    let (output, input) = (args.ints("output_size")?, args.ints("input_size")?);
    let align_corners = args.bool_or("align_corners", false)?;
    let scales = [args.opt_scalar("scales_h")?, args.opt_scalar("scales_w")?];
    let dtype = cx.dtype(grad);
    let sizes = cx.static_dims(grad, "upsampling backward")?;
    if !matches!(dtype, DType::F32 | DType::F64)
        || output.len() != 2
        || input.len() != 4
        || sizes[..] != [input[0], input[1], output[0], output[1]]
        || input.iter().any(|&size| size <= 0)
    {
        return Err(cx.bad(format!(
            "grad_output {} does not fit output_size {output:?} of input_size {input:?} (float32 or float64)",
            cx.ty(grad)
        )));
    }
    let compute = opmath(dtype);
    let mut value = cx.convert(grad, compute)?;
    for index in 0..2 {
        let dim = 2 + index;
        if input[dim] == output[index] {
            continue;
        }
        cx.table(&[output[index], input[dim]], "upsampling backward")?;
        let scale = scales[index].map(|scale| scale.as_f64()).filter(|&scale| scale > 0.0);
        let axis = axis_of(cx, dtype, input[dim], output[index], filter, true, align_corners, scale)?;
        let mut matrix = vec![0.0f64; (output[index] * input[dim]) as usize];
        for o in 0..output[index] as usize {
            for k in 0..axis.sizes[o].min(axis.taps as i64) as usize {
                let at = o * input[dim] as usize + (axis.starts[o] as usize + k);
                matrix[at] += axis.weights[o * axis.taps + k];
            }
        }
        let matrix: Vec<Scalar> = matrix.into_iter().map(Scalar::Float).collect();
        let matrix =
            Literal::from_scalars(compute, &[output[index], input[dim]], &matrix).expect("one weight per pair");
        let matrix = cx.literal(matrix);
        // Contract the output positions of `dim`; the input positions come out last.
        let dims = ttpu_ir::DotDims {
            lhs_batch: smallvec::SmallVec::new(),
            rhs_batch: smallvec::SmallVec::new(),
            lhs_contracting: [dim as i64].into_iter().collect(),
            rhs_contracting: [0].into_iter().collect(),
        };
        let built = cx.b.dot_general(value, matrix, dims);
        value = cx.ok(built)?;
        if dim != 3 {
            value = cx.transpose(value, &[0, 1, 3, 2])?;
        }
    }
    Ok(Imported::Tensor(cx.convert(value, dtype)?))
}
