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

use crate::error::Result;
use crate::import::args::Args;
use crate::import::ctx::{Cx, Imported, opmath};
use crate::import::sym::floor_div;

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
        let sizes = cx.static_dims(x, "pooling")?;
        let lead = rank - n;
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
            let (size, k, s, p, d) =
                (sizes[lead + index], kernel[index], stride[index], padding[index], dilation[index]);
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
        Ok(Pool { lead, input: sizes[lead..].to_vec(), kernel, stride, padding, dilation, output, extra })
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
    let values = cx.ok(built)?;
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
    let padded_sizes = cx.static_dims(padded, "pooling")?;
    let offsets: usize = pool.kernel.iter().map(|&k| k as usize).product();
    for flat in 0..offsets {
        // Kernel offset of this step, row-major like PyTorch's nested loops.
        let mut rest = flat;
        let mut offset = vec![0i64; n];
        for i in (0..n).rev() {
            offset[i] = (rest % pool.kernel[i] as usize) as i64;
            rest /= pool.kernel[i] as usize;
        }
        let mut start: SmallVec<[i64; 4]> = SmallVec::from_elem(0, rank);
        let mut limit: SmallVec<[i64; 4]> = padded_sizes.clone();
        let mut step: SmallVec<[i64; 4]> = SmallVec::from_elem(1, rank);
        let mut shift = 0;
        for i in 0..n {
            let begin = offset[i] * pool.dilation[i];
            start[pool.lead + i] = begin;
            limit[pool.lead + i] = begin + (pool.output[i] - 1) * pool.stride[i] + 1;
            step[pool.lead + i] = pool.stride[i];
            shift += begin * strides[i];
        }
        let candidate = cx.slice(padded, &start, &limit, &step)?;
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
    let divisor = match divisor_override {
        Some(0) => return Err(cx.bad("divisor_override must not be zero")),
        Some(divisor) => cx.splat_like(sums, Scalar::Int(divisor))?,
        None => {
            // Per dim: the window clipped to the padded input, or to the input itself.
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
                Some(count) => cx.splat_like(sums, Scalar::Int(count))?,
                None => {
                    let shape = cx.shape(sums);
                    separable(cx, &pool, &counts, BinaryOp::Multiply, compute, &shape)?
                }
            }
        }
    };
    let averaged = cx.binary(BinaryOp::Divide, sums, divisor)?;
    Ok(Imported::Tensor(cx.convert(averaged, dtype)?))
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
        let mut ones = Vec::with_capacity((out * input) as usize);
        let mut count = Vec::with_capacity(out as usize);
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

/// `upsample_nearest{1,2,3}d.vec(input, output_size, scale_factors)`: gathers the source index
/// PyTorch picks for each output position, `min(floor(dst * scale), in - 1)` in `f32`.
pub(super) fn upsample_nearest(cx: &mut Cx<'_>, args: &Args, n: usize) -> Result<Imported> {
    let x = args.tensor("input")?;
    let sizes = cx.static_dims(x, "upsampling")?;
    let rank = sizes.len();
    if rank != n + 2 {
        return Err(cx.bad(format!("expects a tensor of rank {}, found {}", n + 2, cx.ty(x))));
    }
    let scales: Option<Vec<f64>> = match args.get("scale_factors") {
        crate::import::args::Val::List(items) => Some(
            items
                .iter()
                .map(|item| match item {
                    crate::import::args::Val::Float(value) => Ok(*value),
                    crate::import::args::Val::Int(value) => Ok(*value as f64),
                    _ => Err(cx.bad("scale_factors must be numbers")),
                })
                .collect::<Result<_>>()?,
        ),
        _ => None,
    };
    let output: Vec<i64> = match (args.opt_ints("output_size")?, &scales) {
        (Some(output), _) => output,
        (None, Some(scales)) => {
            sizes[2..].iter().zip(scales).map(|(&size, &scale)| (size as f64 * scale) as i64).collect()
        }
        (None, None) => return Err(cx.bad("one of output_size and scale_factors must be given")),
    };
    if output.len() != n || scales.as_ref().is_some_and(|scales| scales.len() != n) {
        return Err(cx.bad(format!("needs {n} output sizes or scale factors")));
    }
    let mut value = x;
    for index in 0..n {
        let (input, out) = (sizes[2 + index], output[index]);
        let sources: Vec<Scalar> = (0..out)
            .map(|o| {
                let source = if out == input {
                    o
                } else if out == 2 * input {
                    o >> 1
                } else {
                    let scale = match &scales {
                        Some(scales) if scales[index] > 0.0 => (1.0 / scales[index]) as f32,
                        _ => input as f32 / out as f32,
                    };
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
