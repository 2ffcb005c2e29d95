//! Max and average pooling over the trailing 1 to 3 dims, with PyTorch's output-size rule
//! (`ceil_mode` adds high padding so the last window starts inside the input or the left
//! padding), average divisors (`count_include_pad`, `divisor_override`) and max-pool indices.
//!
//! Values use `reduce_window`, whose padding is the reduction's identity (`-inf` for max, 0 for
//! sum). Indices have no single IR op: the window is unrolled into one strided slice per kernel
//! offset and a running "first max wins, NaN wins" selection, exactly PyTorch's CPU loop.
//!
//! Adaptive average pooling and nearest upsampling live here too: both have per-output windows or
//! sources computed on the host, so they become constant matrices or gathers.

use smallvec::SmallVec;
use ttpu_ir::{BinaryOp, CompareDirection, DType, Dim, Literal, ReduceKind, Scalar, Shape, ValueId, Window};

use crate::args::Args;
use crate::ctx::{Cx, Imported, opmath};
use crate::error::Result;
use crate::sym::floor_div;

/// The geometry of one pooling call.
struct Pool {
    /// Leading dims left alone (batch and channels).
    lead: usize,
    /// Sizes of the pooled dims.
    input: Vec<i64>,
    kernel: Vec<i64>,
    stride: Vec<i64>,
    padding: Vec<i64>,
    dilation: Vec<i64>,
    /// Output sizes of the pooled dims.
    output: Vec<i64>,
    /// High padding added beyond `padding` so ceil-mode windows fit.
    extra: Vec<i64>,
}

impl Pool {
    /// Reads and checks the geometry for an `n`-D pool of `x` (`n + 1` or `n + 2` dims).
    fn new(cx: &Cx<'_>, args: &Args, x: ValueId, n: usize, dilated: bool) -> Result<Pool> {
        let rank = cx.rank(x);
        if rank != n + 1 && rank != n + 2 {
            return Err(cx.bad(format!("expects a tensor of rank {} or {}, found {}", n + 1, n + 2, cx.ty(x))));
        }
        let lead = rank - n;
        // Only the pooled dims need sizes; leading (batch, channel) dims may be symbolic.
        let ty = cx.ty(x);
        let sizes: Vec<i64> = ty.shape.dims()[lead..]
            .iter()
            .map(Dim::as_static)
            .collect::<Option<_>>()
            .ok_or_else(|| cx.site.dynamic(format!("pooling needs static pooled dims, found {ty}")))?;
        let per_dim = |name: &str, default: &[i64]| -> Result<Vec<i64>> {
            let values = if args.has_param(name) { args.ints_or(name, default)? } else { default.to_vec() };
            match values.len() {
                1 => Ok(vec![values[0]; n]),
                len if len == n => Ok(values),
                _ => Err(cx.bad(format!("`{name}` {values:?} needs 1 or {n} values"))),
            }
        };
        let kernel = per_dim("kernel_size", &[])?;
        // An empty stride means "the kernel size".
        let stride = if args.ints_or("stride", &[])?.is_empty() { kernel.clone() } else { per_dim("stride", &[])? };
        let padding = per_dim("padding", &[0])?;
        let dilation = if dilated { per_dim("dilation", &[1])? } else { vec![1; n] };
        let ceil_mode = args.bool_or("ceil_mode", false)?;
        let mut output = Vec::with_capacity(n);
        let mut extra = Vec::with_capacity(n);
        for index in 0..n {
            let (size, k, s, p, d) = (sizes[index], kernel[index], stride[index], padding[index], dilation[index]);
            if k < 1 || s < 1 || d < 1 || p < 0 {
                return Err(cx.bad("kernel sizes, strides and dilations must be positive, padding non-negative"));
            }
            let reach = d * (k - 1) + 1;
            if p > reach / 2 {
                return Err(cx.bad(format!("padding {p} must be at most half the kernel extent {reach}")));
            }
            let numerator = size + 2 * p - reach + if ceil_mode { s - 1 } else { 0 };
            let mut out = floor_div(numerator, s).unwrap_or(0) + 1;
            // Ceil mode must not start a window in the right padding.
            if ceil_mode && (out - 1) * s >= size + p {
                out -= 1;
            }
            if out < 1 {
                return Err(cx.bad(format!("output size {out} is too small for input size {size}")));
            }
            output.push(out);
            extra.push(((out - 1) * s + reach - (size + 2 * p)).max(0));
        }
        Ok(Pool { lead, input: sizes, kernel, stride, padding, dilation, output, extra })
    }

    /// The `reduce_window` window over the whole operand.
    fn window(&self) -> Window {
        let lead = |value: i64| std::iter::repeat_n(value, self.lead);
        Window {
            dimensions: lead(1).chain(self.kernel.iter().copied()).collect(),
            strides: lead(1).chain(self.stride.iter().copied()).collect(),
            base_dilations: lead(1).chain(std::iter::repeat_n(1, self.kernel.len())).collect(),
            window_dilations: lead(1).chain(self.dilation.iter().copied()).collect(),
            padding: std::iter::repeat_n((0, 0), self.lead)
                .chain(self.padding.iter().zip(&self.extra).map(|(&pad, &extra)| (pad, pad + extra)))
                .collect(),
        }
    }

    /// The output shape: the leading dims of `x`, then the pooled sizes.
    fn output_shape(&self, cx: &Cx<'_>, x: ValueId) -> Shape {
        let shape = cx.shape(x);
        shape.dims()[..self.lead].iter().cloned().chain(self.output.iter().map(|&size| Dim::Static(size))).collect()
    }
}

/// A per-output-position tensor that is a sum of per-dim terms: `terms[i][o_i]` summed over the
/// pooled dims, broadcast to `shape`. Pool indices and divisors are separable this way.
fn separable(
    cx: &mut Cx<'_>,
    pool: &Pool,
    terms: &[Vec<i64>],
    combine: BinaryOp,
    dtype: DType,
    shape: &Shape,
) -> Result<ValueId> {
    let mut acc: Option<ValueId> = None;
    for (index, term) in terms.iter().enumerate() {
        let values: Vec<Scalar> = term.iter().map(|&value| Scalar::Int(value)).collect();
        let literal = Literal::from_scalars(dtype, &[term.len() as i64], &values).expect("one value per position");
        let constant = cx.literal(literal);
        let wide = cx.broadcast_in_dim(constant, &[(pool.lead + index) as i64], shape.clone())?;
        acc = Some(match acc {
            Some(acc) => cx.binary(combine, acc, wide)?,
            None => wide,
        });
    }
    Ok(acc.expect("pools have at least one dim"))
}

/// `max_pool{2,3}d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode)` →
/// (values, flat indices into the pooled dims as `i64`).
pub(super) fn max_pool_with_indices(cx: &mut Cx<'_>, args: &Args, n: usize) -> Result<Imported> {
    let x = args.tensor("self")?;
    let dtype = cx.dtype(x);
    if dtype.is_bool() {
        return Err(cx.bad("max pooling is not defined for bool tensors"));
    }
    let pool = Pool::new(cx, args, x, n, true)?;
    let built = cx.b.reduce_window(x, ReduceKind::Max, pool.window());
    let mut values = cx.ok(built)?;
    if dtype.is_float() {
        // XLA's CPU max drops NaN (fast min/max); PyTorch's pooled value is NaN if its window holds one.
        let is_nan = cx.compare(CompareDirection::Ne, x, x)?;
        let built = cx.b.reduce_window(is_nan, ReduceKind::Or, pool.window());
        let any_nan = cx.ok(built)?;
        let nan = cx.splat_like(values, Scalar::Float(f64::NAN))?;
        values = cx.select(any_nan, nan, values)?;
    }
    let indices = max_pool_indices(cx, x, &pool)?;
    Ok(Imported::Tuple(vec![Imported::Tensor(values), Imported::Tensor(indices)]))
}

/// The flat input index of each window's maximum, first occurrence winning and NaN counting as
/// the maximum, as in PyTorch's CPU kernel.
fn max_pool_indices(cx: &mut Cx<'_>, x: ValueId, pool: &Pool) -> Result<ValueId> {
    let dtype = cx.dtype(x);
    let n = pool.kernel.len();
    let shape = pool.output_shape(cx, x);
    let lowest = ReduceKind::Max.identity(dtype);
    // Row-major strides of the pooled dims: the flat index is over them only.
    let mut strides = vec![1i64; n];
    for index in (0..n.saturating_sub(1)).rev() {
        strides[index] = strides[index + 1] * pool.input[index + 1];
    }
    let starts: Vec<Vec<i64>> = (0..n)
        .map(|i| (0..pool.output[i]).map(|o| (o * pool.stride[i] - pool.padding[i]) * strides[i]).collect())
        .collect();
    // Before any element is taken, PyTorch's index is the window's first in-bounds position.
    let first_valid: Vec<Vec<i64>> = (0..n)
        .map(|i| {
            (0..pool.output[i])
                .map(|o| {
                    let start = o * pool.stride[i] - pool.padding[i];
                    let skip = if start < 0 { (-start + pool.dilation[i] - 1) / pool.dilation[i] } else { 0 };
                    (start + skip * pool.dilation[i]) * strides[i]
                })
                .collect()
        })
        .collect();
    let base = separable(cx, pool, &starts, BinaryOp::Add, DType::I64, &shape)?;
    let mut best_index = separable(cx, pool, &first_valid, BinaryOp::Add, DType::I64, &shape)?;
    let mut best = cx.splat(dtype, lowest, &shape)?;
    let fill = cx.scalar(dtype, lowest);
    let rank = pool.lead + n;
    let low: Vec<i64> = std::iter::repeat_n(0, pool.lead).chain(pool.padding.iter().copied()).collect();
    let high: Vec<i64> = std::iter::repeat_n(0, pool.lead)
        .chain(pool.padding.iter().zip(&pool.extra).map(|(&pad, &extra)| pad + extra))
        .collect();
    let padded = cx.pad(x, fill, &low, &high, &vec![0; rank])?;
    // Leading dims are taken whole (to their end when symbolic); pooled dims are static.
    let padded_sizes: SmallVec<[Dim; 4]> = cx.shape(padded).0;
    let offsets = cx.unroll(&pool.kernel, "pooling")?;
    for flat in 0..offsets {
        // Kernel offset of this step, row-major like PyTorch's nested loops.
        let mut rest = flat;
        let mut offset = vec![0i64; n];
        for i in (0..n).rev() {
            offset[i] = (rest % pool.kernel[i] as usize) as i64;
            rest /= pool.kernel[i] as usize;
        }
        let mut start: SmallVec<[i64; 4]> = SmallVec::from_elem(0, rank);
        let mut limit: SmallVec<[Dim; 4]> = padded_sizes.clone();
        let mut step: SmallVec<[i64; 4]> = SmallVec::from_elem(1, rank);
        let mut shift = 0;
        for i in 0..n {
            let begin = offset[i] * pool.dilation[i];
            start[pool.lead + i] = begin;
            limit[pool.lead + i] = Dim::Static(begin + (pool.output[i] - 1) * pool.stride[i] + 1);
            step[pool.lead + i] = pool.stride[i];
            shift += begin * strides[i];
        }
        let built = cx.b.slice_to(padded, &start, &limit, &step);
        let candidate = cx.ok(built)?;
        let candidate_index = cx.binary_scalar(BinaryOp::Add, base, Scalar::Int(shift))?;
        let mut take = cx.compare(CompareDirection::Gt, candidate, best)?;
        if dtype.is_float() {
            let nan = cx.compare(CompareDirection::Ne, candidate, candidate)?;
            take = cx.binary(BinaryOp::Or, take, nan)?;
        }
        best = cx.select(take, candidate, best)?;
        best_index = cx.select(take, candidate_index, best_index)?;
    }
    Ok(best_index)
}

/// `avg_pool{1,2,3}d(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
/// divisor_override)`.
pub(super) fn avg_pool(cx: &mut Cx<'_>, args: &Args, n: usize) -> Result<Imported> {
    let x = args.tensor("self")?;
    let dtype = cx.dtype(x);
    if dtype.is_bool() {
        return Err(cx.bad("average pooling is not defined for bool tensors"));
    }
    let pool = Pool::new(cx, args, x, n, false)?;
    let include_pad = args.bool_or("count_include_pad", true)?;
    let divisor_override = if args.has_param("divisor_override") { args.opt_int("divisor_override")? } else { None };
    let compute = opmath(dtype);
    let xc = cx.convert(x, compute)?;
    let built = cx.b.reduce_window(xc, ReduceKind::Sum, pool.window());
    let sums = cx.ok(built)?;
    let divisor = avg_divisor(cx, &pool, include_pad, divisor_override, sums)?;
    let averaged = cx.binary(BinaryOp::Divide, sums, divisor)?;
    Ok(Imported::Tensor(cx.convert(averaged, dtype)?))
}

/// The divisor of each average-pooling window, shaped and typed like `sums`: the override, or
/// the window clipped to the padded input (`count_include_pad`) or to the input itself.
fn avg_divisor(
    cx: &mut Cx<'_>,
    pool: &Pool,
    include_pad: bool,
    divisor_override: Option<i64>,
    sums: ValueId,
) -> Result<ValueId> {
    let n = pool.kernel.len();
    match divisor_override {
        Some(0) => Err(cx.bad("divisor_override must not be zero")),
        Some(divisor) => cx.splat_like(sums, Scalar::Int(divisor)),
        None => {
            let counts: Vec<Vec<i64>> = (0..n)
                .map(|i| {
                    (0..pool.output[i])
                        .map(|o| {
                            let (size, pad) = (pool.input[i], pool.padding[i]);
                            let start = o * pool.stride[i] - pad;
                            let end = (start + pool.kernel[i]).min(size + pad);
                            let count = if include_pad { end - start } else { end.min(size) - start.max(0) };
                            count.max(1)
                        })
                        .collect()
                })
                .collect();
            let uniform: Option<i64> = counts
                .iter()
                .map(|count| count.iter().all(|&c| c == count[0]).then_some(count[0]))
                .try_fold(1, |acc, count| count.map(|count| acc * count));
            match uniform {
                Some(count) => cx.splat_like(sums, Scalar::Int(count)),
                None => {
                    let shape = cx.shape(sums);
                    let dtype = cx.dtype(sums);
                    separable(cx, pool, &counts, BinaryOp::Multiply, dtype, &shape)
                }
            }
        }
    }
}

/// `avg_pool{2,3}d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode,
/// count_include_pad, divisor_override)`: each output's gradient over its divisor, added back to
/// every position of its window (one strided `pad` per kernel offset), the padding cropped.
pub(super) fn avg_pool_backward(cx: &mut Cx<'_>, args: &Args, n: usize) -> Result<Imported> {
    let grad = args.tensor("grad_output")?;
    let x = args.tensor("self")?;
    let dtype = cx.dtype(x);
    let pool = Pool::new(cx, args, x, n, false)?;
    if cx.shape(grad) != pool.output_shape(cx, x) {
        return Err(cx.bad(format!("gradient {} does not match the pooled shape of {}", cx.ty(grad), cx.ty(x))));
    }
    let include_pad = args.bool_or("count_include_pad", true)?;
    let divisor_override = args.opt_int("divisor_override")?;
    let compute = opmath(dtype);
    let grad = cx.convert(grad, compute)?;
    let divisor = avg_divisor(cx, &pool, include_pad, divisor_override, grad)?;
    let share = cx.binary(BinaryOp::Divide, grad, divisor)?;
    let rank = pool.lead + n;
    let padded: Vec<i64> = (0..n).map(|i| pool.input[i] + 2 * pool.padding[i] + pool.extra[i]).collect();
    let zero = cx.scalar(compute, Scalar::Int(0));
    let offsets = cx.unroll(&pool.kernel, "pooling")?;
    let mut total: Option<ValueId> = None;
    for flat in 0..offsets {
        let mut rest = flat;
        let (mut low, mut high, mut interior) = (vec![0; rank], vec![0; rank], vec![0; rank]);
        for i in (0..n).rev() {
            let offset = (rest % pool.kernel[i] as usize) as i64;
            rest /= pool.kernel[i] as usize;
            low[pool.lead + i] = offset;
            high[pool.lead + i] = padded[i] - (offset + (pool.output[i] - 1) * pool.stride[i] + 1);
            interior[pool.lead + i] = pool.stride[i] - 1;
        }
        let spread = cx.pad(share, zero, &low, &high, &interior)?;
        total = Some(match total {
            None => spread,
            Some(acc) => cx.binary(BinaryOp::Add, acc, spread)?,
        });
    }
    let total = total.expect("kernels have at least one position");
    let sizes = cx.static_dims(total, if n == 2 { "avg_pool2d_backward" } else { "avg_pool3d_backward" })?;
    let mut start = vec![0; rank];
    let mut limit = sizes.to_vec();
    for i in 0..n {
        start[pool.lead + i] = pool.padding[i];
        limit[pool.lead + i] = pool.padding[i] + pool.input[i];
    }
    let cropped = cx.slice(total, &start, &limit, &vec![1; rank])?;
    Ok(Imported::Tensor(cx.convert(cropped, dtype)?))
}

/// The window `[start, end)` of output `index` of adaptive pooling `input` to `output` positions.
fn adaptive_window(index: i64, input: i64, output: i64) -> (i64, i64) {
    ((index * input) / output, ((index + 1) * input + output - 1) / output)
}

/// `_adaptive_avg_pool2d(self, output_size)`: each window summed with a 0/1 matrix per pooled
/// dim (`dot_general`), then divided by its size.
pub(super) fn adaptive_avg_pool(cx: &mut Cx<'_>, args: &Args, n: usize) -> Result<Imported> {
    let x = args.tensor("self")?;
    let dtype = cx.dtype(x);
    let sizes = cx.static_dims(x, "adaptive pooling")?;
    let rank = sizes.len();
    let output = args.ints("output_size")?;
    if !dtype.is_float() || (rank != n + 1 && rank != n + 2) || output.len() != n || output.iter().any(|&o| o < 1) {
        return Err(cx.bad(format!("cannot pool {} to {output:?}", cx.ty(x))));
    }
    let compute = opmath(dtype);
    let mut value = cx.convert(x, compute)?;
    let mut counts = Vec::with_capacity(n);
    // Contract the pooled dims from the last; each contraction appends the new dim at the end,
    // so after all of them the pooled dims are in reverse order.
    for index in (0..n).rev() {
        let dim = rank - n + index;
        let (input, out) = (sizes[dim], output[index]);
        cx.table(&[out], "upsampling")?;
        let mut ones = Vec::with_capacity(cx.table(&[out, input], "adaptive pooling")?);
        let mut count = Vec::with_capacity(cx.table(&[out], "adaptive pooling")?);
        for o in 0..out {
            let (start, end) = adaptive_window(o, input, out);
            count.push(end - start);
            ones.extend((0..input).map(|i| Scalar::Int(i64::from(start <= i && i < end))));
        }
        counts.push(count);
        let matrix = Literal::from_scalars(compute, &[out, input], &ones).expect("one value per entry");
        let matrix = cx.literal(matrix);
        let current = cx.rank(value);
        let dims = ttpu_ir::DotDims {
            lhs_contracting: [(current - (n - index)) as i64].into_iter().collect(),
            rhs_contracting: [1].into_iter().collect(),
            ..ttpu_ir::DotDims::default()
        };
        value = cx.dot_general(value, matrix, dims)?;
    }
    let lead = rank - n;
    let permutation: Vec<i64> = (0..lead as i64).chain((lead..rank).rev().map(|dim| dim as i64)).collect();
    let summed = cx.transpose(value, &permutation)?;
    counts.reverse();
    let pool = Pool {
        lead,
        input: sizes[lead..].to_vec(),
        kernel: vec![1; n],
        stride: vec![1; n],
        padding: vec![0; n],
        dilation: vec![1; n],
        output: output.clone(),
        extra: vec![0; n],
    };
    let shape = cx.shape(summed);
    let divisor = separable(cx, &pool, &counts, BinaryOp::Multiply, compute, &shape)?;
    let averaged = cx.binary(BinaryOp::Divide, summed, divisor)?;
    Ok(Imported::Tensor(cx.convert(averaged, dtype)?))
}

/// The spatial output size of an upsampling op and its `scale_factors`, if given: `output_size`
/// wins, else each input size times its scale, rounded down as PyTorch does.
pub(super) fn upsample_output(cx: &Cx<'_>, args: &Args, sizes: &[i64]) -> Result<(Vec<i64>, Option<Vec<f64>>)> {
    if !args.has_param("scale_factors") {
        // The `.default` overloads: an output size, and an optional scale per spatial dim
        // (`scales`, or `scales_d`/`scales_h`/`scales_w`) that only changes the source index.
        let output = args.ints("output_size")?;
        let mut scales = Vec::new();
        for name in ["scales", "scales_d", "scales_h", "scales_w"] {
            if args.has_param(name) {
                scales.push(args.opt_scalar(name)?.map_or(0.0, |scale| scale.as_f64()));
            }
        }
        return Ok((output, Some(scales).filter(|scales| scales.iter().any(|&scale| scale > 0.0))));
    }
    let scales: Option<Vec<f64>> = match args.get("scale_factors") {
        crate::args::Val::List(items) => Some(
            items
                .iter()
                .map(|item| match item {
                    crate::args::Val::Float(value) => Ok(*value),
                    crate::args::Val::Int(value) => Ok(*value as f64),
                    _ => Err(cx.bad("scale_factors must be numbers")),
                })
                .collect::<Result<_>>()?,
        ),
        _ => None,
    };
    let output: Vec<i64> = match (args.opt_ints("output_size")?, &scales) {
        (Some(output), _) => output,
        (None, Some(scales)) => {
            sizes[2..].iter().zip(scales).map(|(&size, &scale)| (size as f64 * scale).floor() as i64).collect()
        }
        (None, None) => return Err(cx.bad("one of output_size and scale_factors must be given")),
    };
    Ok((output, scales))
}

/// The tensor an upsampling reads: `input` in the `.vec` overloads, `self` in `.default`.
pub(super) fn upsampled(args: &Args) -> Result<ValueId> {
    if args.has_param("input") { args.tensor("input") } else { args.tensor("self") }
}

/// `upsample_nearest{1,2,3}d` (`.vec` and `.default`): gathers the source index PyTorch picks
/// for each output position, `min(floor(dst * scale), in - 1)` in `f32`.
pub(super) fn upsample_nearest(cx: &mut Cx<'_>, args: &Args, n: usize) -> Result<Imported> {
    upsample_nearest_rounding(cx, args, n, false)
}

/// `_upsample_nearest_exact{1,2,3}d`: `min(floor((dst + 0.5) * scale), in - 1)`, the rounding
/// that matches PIL and scikit-image.
pub(super) fn upsample_nearest_exact(cx: &mut Cx<'_>, args: &Args, n: usize) -> Result<Imported> {
    upsample_nearest_rounding(cx, args, n, true)
}

fn upsample_nearest_rounding(cx: &mut Cx<'_>, args: &Args, n: usize, exact: bool) -> Result<Imported> {
    let x = upsampled(args)?;
    let sizes = cx.static_dims(x, "upsampling")?;
    let rank = sizes.len();
    if rank != n + 2 {
        return Err(cx.bad(format!("expects a tensor of rank {}, found {}", n + 2, cx.ty(x))));
    }
    let (output, scales) = upsample_output(cx, args, &sizes)?;
    if output.len() != n || scales.as_ref().is_some_and(|scales| scales.len() != n) {
        return Err(cx.bad(format!("needs {n} output sizes or scale factors")));
    }
    let mut value = x;
    for index in 0..n {
        let (input, out) = (sizes[2 + index], output[index]);
        cx.table(&[out], "upsampling")?;
        let sources: Vec<Scalar> = (0..out)
            .map(|o| {
                let scale = match &scales {
                    Some(scales) if scales[index] > 0.0 => (1.0 / scales[index]) as f32,
                    _ => input as f32 / out as f32,
                };
                let source = if exact {
                    (((o as f32 + 0.5) * scale).floor() as i64).min(input - 1)
                } else if out == input && scales.is_none() {
                    o
                } else if out == 2 * input && scales.is_none() {
                    o >> 1
                } else {
                    ((o as f32 * scale).floor() as i64).min(input - 1)
                };
                Scalar::Int(source)
            })
            .collect();
        let literal = Literal::from_scalars(DType::I64, &[out], &sources).expect("one value per position");
        let positions = cx.literal(literal);
        value = super::layout::gather_dim(cx, value, 2 + index, positions)?;
    }
    Ok(Imported::Tensor(value))
}

/// `upsample_bilinear2d.vec(input, output_size, align_corners, scale_factors)`: per spatial dim,
/// the two source rows PyTorch reads for each output position (gathered with constant indices)
/// mixed with constant weights, computed on the host as PyTorch's
/// `area_pixel_compute_source_index` does.
pub(super) fn upsample_bilinear(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = upsampled(args)?;
    let dtype = cx.dtype(x);
    let sizes = cx.static_dims(x, "upsampling")?;
    if sizes.len() == 4 && dtype == DType::U8 {
        return super::resample::upsample_bilinear_u8(cx, args, x, &sizes);
    }
    if sizes.len() != 4 || !dtype.is_float() {
        return Err(cx.bad(format!("expects a float or uint8 tensor of rank 4, found {}", cx.ty(x))));
    }
    let align_corners = args.bool_or("align_corners", false)?;
    let (output, scales) = upsample_output(cx, args, &sizes)?;
    if output.len() != 2 || scales.as_ref().is_some_and(|scales| scales.len() != 2) {
        return Err(cx.bad("needs 2 output sizes or scale factors"));
    }
    let compute = opmath(dtype);
    let mut value = cx.convert(x, compute)?;
    for index in 0..2 {
        let dim = 2 + index;
        let (input, out) = (sizes[dim], output[index]);
        cx.table(&[out], "upsampling")?;
        let scale = scales.as_ref().map(|scales| scales[index]);
        // PyTorch's `area_pixel_compute_scale` and source index, in the opmath dtype (f32).
        let ratio: f32 = if align_corners {
            if out > 1 { (input - 1) as f32 / (out - 1) as f32 } else { 0.0 }
        } else {
            match scale {
                Some(scale) if scale > 0.0 => (1.0 / scale) as f32,
                _ => input as f32 / out as f32,
            }
        };
        let (mut low, mut high, mut weight_low, mut weight_high) = (vec![], vec![], vec![], vec![]);
        for o in 0..out {
            let source = if align_corners { ratio * o as f32 } else { (ratio * (o as f32 + 0.5) - 0.5).max(0.0) };
            let i0 = (source as i64).min(input - 1);
            let i1 = (i0 + 1).min(input - 1);
            let lambda1 = (source - i0 as f32).clamp(0.0, 1.0);
            low.push(Scalar::Int(i0));
            high.push(Scalar::Int(i1));
            weight_low.push(Scalar::Float(f64::from(1.0 - lambda1)));
            weight_high.push(Scalar::Float(f64::from(lambda1)));
        }
        let mut mixed = None;
        for (positions, weights) in [(low, weight_low), (high, weight_high)] {
            let positions = Literal::from_scalars(DType::I64, &[out], &positions).expect("one index per position");
            let positions = cx.literal(positions);
            let rows = super::layout::gather_dim(cx, value, dim, positions)?;
            let weights = Literal::from_scalars(compute, &[out], &weights).expect("one weight per position");
            let weights = cx.literal(weights);
            let shape = cx.shape(rows);
            let weights = cx.broadcast_in_dim(weights, &[dim as i64], shape)?;
            let term = cx.binary(BinaryOp::Multiply, rows, weights)?;
            mixed = Some(match mixed {
                None => term,
                Some(acc) => cx.binary(BinaryOp::Add, acc, term)?,
            });
        }
        value = mixed.expect("two terms");
    }
    Ok(Imported::Tensor(cx.convert(value, dtype)?))
}

/// `adaptive_max_pool2d(self, output_size)` → (values, indices): every input position masked
/// into every output window (a `[.., out_h, out_w, h, w]` select), reduced with max; the index is
/// the first position (`h * w_in + w`) holding the maximum, as PyTorch's kernel picks it.
pub(super) fn adaptive_max_pool(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let sizes = cx.static_dims(x, "adaptive pooling")?;
    let rank = sizes.len();
    let output = args.ints("output_size")?;
    if (rank != 3 && rank != 4) || output.len() != 2 || output.iter().any(|&o| o < 1) {
        return Err(cx.bad(format!("cannot pool {} to {output:?}", cx.ty(x))));
    }
    let lead = rank - 2;
    let (h, w) = (sizes[lead], sizes[lead + 1]);
    let (oh, ow) = (output[0], output[1]);
    let mut inside = Vec::with_capacity(cx.table(&[oh, ow, h, w], "adaptive max pooling")?);
    for i in 0..oh {
        let (h0, h1) = adaptive_window(i, h, oh);
        for j in 0..ow {
            let (w0, w1) = adaptive_window(j, w, ow);
            for y in 0..h {
                for z in 0..w {
                    inside.push(Scalar::Int(i64::from(h0 <= y && y < h1 && w0 <= z && z < w1)));
                }
            }
        }
    }
    // An `i8` constant compared with zero: non-splat `bool` constants do not survive lowering yet.
    let mask = Literal::from_scalars(DType::I8, &[oh, ow, h, w], &inside).expect("one flag per pair");
    let mask = cx.literal(mask);
    let mask = super::elementwise::to_bool(cx, mask)?;
    let cube_dims: Vec<i64> = sizes[..lead].iter().copied().chain([oh, ow, h, w]).collect();
    let cube = Shape::from_static(&cube_dims);
    let window_dims: Vec<i64> = (lead as i64..lead as i64 + 4).collect();
    let mask = cx.broadcast_in_dim(mask, &window_dims, cube.clone())?;
    let x_dims: Vec<i64> = (0..lead as i64).chain([lead as i64 + 2, lead as i64 + 3]).collect();
    let spread = cx.broadcast_in_dim(x, &x_dims, cube.clone())?;
    let lowest = cx.splat(cx.dtype(x), ReduceKind::Max.identity(cx.dtype(x)), &cube)?;
    let candidates = cx.select(mask, spread, lowest)?;
    let values = cx.reduce(candidates, ReduceKind::Max, &[lead + 2, lead + 3])?;
    let value_dims: Vec<i64> = (0..lead as i64 + 2).collect();
    let best = cx.broadcast_in_dim(values, &value_dims, cube.clone())?;
    let hit = cx.compare(CompareDirection::Eq, candidates, best)?;
    let hit = cx.binary(BinaryOp::And, hit, mask)?;
    let row = cx.b.iota(ttpu_ir::TensorType::new(DType::I64, cube.clone()), lead as i64 + 2);
    let row = cx.ok(row)?;
    let col = cx.b.iota(ttpu_ir::TensorType::new(DType::I64, cube.clone()), lead as i64 + 3);
    let col = cx.ok(col)?;
    let flat = cx.binary_scalar(BinaryOp::Multiply, row, Scalar::Int(w))?;
    let flat = cx.binary(BinaryOp::Add, flat, col)?;
    let beyond = cx.splat(DType::I64, Scalar::Int(h * w), &cube)?;
    let positions = cx.select(hit, flat, beyond)?;
    let indices = cx.reduce(positions, ReduceKind::Min, &[lead + 2, lead + 3])?;
    Ok(Imported::Tuple(vec![Imported::Tensor(values), Imported::Tensor(indices)]))
}
