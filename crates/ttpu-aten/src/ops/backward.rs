//! Gradient overloads of the Core ATen opset that appear in exported training graphs:
//! `embedding_dense_backward`, `max_pool2d_with_indices_backward`, `_adaptive_avg_pool{2,3}d_backward`,
//! `native_layer_norm_backward`, `native_group_norm_backward` and `convolution_backward`
//! (`avg_pool2d_backward` lives with the pooling code, whose window geometry it shares).
//!
//! Each is the adjoint of its forward decomposition: scatter-adds for the gathers, the transposed
//! window matrices for adaptive pooling, and the closed-form layer-norm gradient.

use ttpu_ir::{BinaryOp, CompareDirection, DType, DotDims, Literal, ReduceKind, Scalar, ScatterKind, Shape, ValueId};

use smallvec::SmallVec;

use super::elementwise::tensor;
use super::index::{iota, scatter_points, stack_last};
use super::nn::{ConvGeometry, conv_core};
use crate::args::{Args, Val};
use crate::ctx::{Cx, Imported, opmath};
use crate::error::Result;

/// `embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)`:
/// each gradient row added into the weight row it was read from; rows read at `padding_idx` give
/// nothing, and `scale_grad_by_freq` divides each by how often its index occurs.
pub(super) fn embedding_dense_backward(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let grad = args.tensor("grad_output")?;
    let indices = args.tensor("indices")?;
    let rows = args.int("num_weights")?;
    let padding_idx = args.int("padding_idx")?;
    let scale = args.bool_or("scale_grad_by_freq", false)?;
    let grad_sizes = cx.static_dims(grad, "embedding_dense_backward")?;
    let width = *grad_sizes.last().ok_or_else(|| cx.bad("grad_output must have a feature dim"))?;
    let count: i64 = cx.static_dims(indices, "embedding_dense_backward")?.iter().product();
    if grad_sizes.iter().product::<i64>() != count * width {
        return Err(cx.bad(format!("grad_output {} does not match indices {}", cx.ty(grad), cx.ty(indices))));
    }
    let dtype = cx.dtype(grad);
    let grad = cx.reshape(grad, Shape::from_static(&[count, width]))?;
    let indices = cx.reshape(indices, Shape::from_static(&[count]))?;
    let indices = cx.convert(indices, DType::I64)?;
    tensor(add_rows_at(cx, grad, indices, rows, scale, padding_idx, dtype)?)
}

/// A `[rows, width]` gradient of `dtype` with each row of `grad` (`[count, width]`) added at the
/// row its index names: divided first by how often its index occurs under `scale` (PyTorch's
/// `scale_grad_by_freq`), and nothing from indices equal to `padding_idx`.
fn add_rows_at(
    cx: &mut Cx<'_>,
    mut grad: ValueId,
    indices: ValueId,
    rows: i64,
    scale: bool,
    padding_idx: i64,
    dtype: DType,
) -> Result<ValueId> {
    let (count, wide) = (cx.static_dim(indices, 0, "embedding backward")?, cx.shape(grad));
    let width = cx.static_dim(grad, 1, "embedding backward")?;
    let compute = cx.dtype(grad);
    let points = cx.reshape(indices, Shape::from_static(&[count, 1]))?;
    if scale {
        let zeros = cx.splat(compute, Scalar::Int(0), &Shape::from_static(&[rows]))?;
        let ones = cx.splat(compute, Scalar::Int(1), &Shape::from_static(&[count]))?;
        let frequency = scatter_points(cx, zeros, points, ones, ScatterKind::Combine(ReduceKind::Sum))?;
        let per_row = super::layout::gather_dim(cx, frequency, 0, indices)?;
        let per_row = cx.broadcast_in_dim(per_row, &[0], wide.clone())?;
        grad = cx.binary(BinaryOp::Divide, grad, per_row)?;
    }
    if padding_idx >= 0 {
        let padding = cx.splat(DType::I64, Scalar::Int(padding_idx), &Shape::from_static(&[count]))?;
        let real = cx.compare(CompareDirection::Ne, indices, padding)?;
        let real = cx.broadcast_in_dim(real, &[0], wide.clone())?;
        let zeros = cx.splat(compute, Scalar::Int(0), &wide)?;
        grad = cx.select(real, grad, zeros)?;
    }
    let zeros = cx.splat(compute, Scalar::Int(0), &Shape::from_static(&[rows, width]))?;
    let summed = scatter_points(cx, zeros, points, grad, ScatterKind::Combine(ReduceKind::Sum))?;
    cx.convert(summed, dtype)
}

/// The backward overloads of the max poolings that return indices (`max_pool{2,3}d_with_indices`,
/// `adaptive_max_pool{2,3}d`, `fractional_max_pool{2,3}d`): each output gradient added at the
/// position its maximum came from, an index into the `n` pooled dims of its plane flattened.
pub(super) fn max_pool_backward(cx: &mut Cx<'_>, args: &Args, n: usize, name: &str) -> Result<Imported> {
    let grad = args.tensor("grad_output")?;
    let x = args.tensor("self")?;
    let indices = args.tensor("indices")?;
    let sizes = cx.static_dims(x, name)?;
    let rank = sizes.len();
    if (rank != n + 1 && rank != n + 2) || cx.shape(grad) != cx.shape(indices) || cx.rank(grad) != rank {
        return Err(cx.bad(format!(
            "cannot route {} through indices {} into {}",
            cx.ty(grad),
            cx.ty(indices),
            cx.ty(x)
        )));
    }
    let lead = rank - n;
    if cx.static_dims(grad, name)?[..lead] != sizes[..lead] {
        return Err(cx.bad(format!("gradient {} does not match input {}", cx.ty(grad), cx.ty(x))));
    }
    let plane: i64 = sizes[lead..].iter().product();
    let flat: Vec<i64> = sizes[..lead].iter().copied().chain([plane]).collect();
    let zeros = cx.splat(cx.dtype(x), Scalar::Int(0), &Shape::from_static(&flat))?;
    let shape = cx.shape(grad);
    let mut parts = Vec::with_capacity(lead + 1);
    for dim in 0..lead {
        parts.push(iota(cx, &shape, dim)?);
    }
    parts.push(cx.convert(indices, DType::I64)?);
    let points = stack_last(cx, &parts)?;
    let grad = cx.convert(grad, cx.dtype(x))?;
    let routed = scatter_points(cx, zeros, points, grad, ScatterKind::Combine(ReduceKind::Sum))?;
    tensor(cx.reshape(routed, Shape::from_static(&sizes))?)
}

/// `_adaptive_avg_pool{2,3}d_backward(grad_output, self)`: the gradient over each window's
/// size, spread back with the transposed 0/1 window matrices of the forward pass, one pooled dim
/// (`n` of them, the last) at a time.
pub(super) fn adaptive_avg_pool_backward(cx: &mut Cx<'_>, args: &Args, n: usize) -> Result<Imported> {
    let name = if n == 2 { "_adaptive_avg_pool2d_backward" } else { "_adaptive_avg_pool3d_backward" };
    let grad = args.tensor("grad_output")?;
    let x = args.tensor("self")?;
    let sizes = cx.static_dims(x, name)?;
    let out = cx.static_dims(grad, name)?;
    let rank = sizes.len();
    if (rank != n + 1 && rank != n + 2) || out.len() != rank || out[..rank - n] != sizes[..rank - n] {
        return Err(cx.bad(format!("gradient {} does not match input {}", cx.ty(grad), cx.ty(x))));
    }
    let dtype = cx.dtype(x);
    if !dtype.is_float() || out[rank - n..].iter().any(|&o| o < 1) {
        return Err(cx.bad(format!("gradient {} does not match input {}", cx.ty(grad), cx.ty(x))));
    }
    let compute = opmath(dtype);
    let mut value = cx.convert(grad, compute)?;
    let mut divisor: Vec<i64> = vec![1];
    let mut matrices = vec![];
    for dim in rank - n..rank {
        let (input, output) = (sizes[dim], out[dim]);
        let mut ones = Vec::with_capacity(cx.table(&[output, input], "adaptive pooling's backward")?);
        let mut count = Vec::with_capacity(cx.table(&[output], "adaptive pooling's backward")?);
        for o in 0..output {
            let (start, end) = ((o * input) / output, ((o + 1) * input + output - 1) / output);
            count.push(end - start);
            ones.extend((0..input).map(|i| Scalar::Int(i64::from(start <= i && i < end))));
        }
        cx.table(&[divisor.len() as i64, output], "adaptive pooling's backward")?;
        divisor = divisor.iter().flat_map(|&outer| count.iter().map(move |&c| outer * c)).collect();
        matrices.push(cx.literal(Literal::from_scalars(compute, &[output, input], &ones).expect("one per entry")));
    }
    let pooled = &out[rank - n..];
    let divisor: Vec<Scalar> = divisor.into_iter().map(Scalar::Int).collect();
    let divisor = cx.literal(Literal::from_scalars(compute, pooled, &divisor).expect("one per window"));
    let shape = cx.shape(value);
    let dims: Vec<i64> = (rank - n..rank).map(|dim| dim as i64).collect();
    let divisor = cx.broadcast_in_dim(divisor, &dims, shape)?;
    value = cx.binary(BinaryOp::Divide, value, divisor)?;
    // Contract the last pooled dim with its matrix (the input size lands last), then rotate it to
    // the front of the pooled dims; after `n` steps every pooled dim is back in its place:
    // (.., OD, OH, OW) -> (.., W, OD, OH) -> (.., H, W, OD) -> (.., D, H, W).
    for matrix in matrices.into_iter().rev() {
        let dims = DotDims {
            lhs_contracting: [rank as i64 - 1].into_iter().collect(),
            rhs_contracting: [0].into_iter().collect(),
            ..DotDims::default()
        };
        value = cx.dot_general(value, matrix, dims)?;
        let lead = (rank - n) as i64;
        let perm: Vec<i64> = (0..lead).chain(std::iter::once(rank as i64 - 1)).chain(lead..rank as i64 - 1).collect();
        value = cx.transpose(value, &perm)?;
    }
    tensor(cx.convert(value, dtype)?)
}

/// `native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias,
/// output_mask)` → (grad_input, grad_weight, grad_bias), each `None` when its mask entry is false:
/// with `x̂ = (x - mean) * rstd` and `g = grad_out * weight`,
/// `grad_input = rstd * (g - mean(g) - x̂ * mean(g * x̂))` over the normalised dims.
pub(super) fn layer_norm_backward(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let grad = args.tensor("grad_out")?;
    let x = args.tensor("input")?;
    let normalized = args.ints("normalized_shape")?;
    let (mean, rstd) = (args.tensor("mean")?, args.tensor("rstd")?);
    let (weight, bias) = (args.opt_tensor("weight")?, args.opt_tensor("bias")?);
    let mask: Vec<bool> = match args.get("output_mask") {
        Val::List(items) => items.iter().map(|item| matches!(item, Val::Bool(true))).collect(),
        _ => return Err(cx.bad("output_mask must be a list of three bools")),
    };
    let sizes = cx.static_dims(x, "native_layer_norm_backward")?;
    let rank = sizes.len();
    let dtype = cx.dtype(x);
    if mask.len() != 3 || normalized.len() > rank || sizes[rank - normalized.len()..] != normalized[..] {
        return Err(cx.bad(format!("normalized_shape {normalized:?} does not end {}", cx.ty(x))));
    }
    let axis = rank - normalized.len();
    let inner: Vec<usize> = (axis..rank).collect();
    let outer: Vec<usize> = (0..axis).collect();
    let n = normalized.iter().product::<i64>();
    let compute = opmath(dtype);
    let shape = cx.shape(x);
    let stats_dims: Vec<i64> = (0..axis as i64).collect();
    let widen = |cx: &mut Cx<'_>, stat: ValueId| -> Result<ValueId> {
        let stat = cx.convert(stat, compute)?;
        let outer_shape: Vec<i64> = sizes[..axis].to_vec();
        let stat = cx.reshape(stat, Shape::from_static(&outer_shape))?;
        cx.broadcast_in_dim(stat, &stats_dims, shape.clone())
    };
    let param_dims: Vec<i64> = (axis as i64..rank as i64).collect();
    let xc = cx.convert(x, compute)?;
    let gc = cx.convert(grad, compute)?;
    let mean_wide = widen(cx, mean)?;
    let rstd_wide = widen(cx, rstd)?;
    let centered = cx.binary(BinaryOp::Subtract, xc, mean_wide)?;
    let normed = cx.binary(BinaryOp::Multiply, centered, rstd_wide)?;
    let mut results = vec![Imported::None, Imported::None, Imported::None];
    if mask[0] {
        let g = match weight {
            Some(weight) => {
                let weight = cx.convert(weight, compute)?;
                let weight = cx.broadcast_in_dim(weight, &param_dims, shape.clone())?;
                cx.binary(BinaryOp::Multiply, gc, weight)?
            }
            None => gc,
        };
        let mean_of = |cx: &mut Cx<'_>, value: ValueId| -> Result<ValueId> {
            let total = cx.reduce_keep(value, ReduceKind::Sum, &inner, true)?;
            let total = cx.binary_scalar(BinaryOp::Divide, total, Scalar::Int(n))?;
            cx.broadcast_to(total, &shape)
        };
        let g_mean = mean_of(cx, g)?;
        let gx = cx.binary(BinaryOp::Multiply, g, normed)?;
        let gx_mean = mean_of(cx, gx)?;
        let projected = cx.binary(BinaryOp::Multiply, normed, gx_mean)?;
        let inside = cx.binary(BinaryOp::Subtract, g, g_mean)?;
        let inside = cx.binary(BinaryOp::Subtract, inside, projected)?;
        let grad_input = cx.binary(BinaryOp::Multiply, inside, rstd_wide)?;
        results[0] = Imported::Tensor(cx.convert(grad_input, dtype)?);
    }
    for (slot, param, value) in [(1, weight, Some(normed)), (2, bias, None)] {
        if !mask[slot] {
            continue;
        }
        let param_dtype = param.map_or(dtype, |param| cx.dtype(param));
        let term = match value {
            Some(normed) => cx.binary(BinaryOp::Multiply, gc, normed)?,
            None => gc,
        };
        let summed = cx.reduce(term, ReduceKind::Sum, &outer)?;
        results[slot] = Imported::Tensor(cx.convert(summed, param_dtype)?);
    }
    Ok(Imported::Tuple(results))
}

/// `native_group_norm_backward(grad_out, input, mean, rstd, weight, N, C, HxW, group,
/// output_mask)` → (grad_input, grad_weight, grad_bias): the layer-norm gradient within each group
/// of channels (`x̂` and `g = grad_out * weight` averaged over the group's elements), and the
/// affine gradients summed over batch and space per channel.
pub(super) fn group_norm_backward(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let grad = args.tensor("grad_out")?;
    let x = args.tensor("input")?;
    let (mean, rstd) = (args.tensor("mean")?, args.tensor("rstd")?);
    let weight = args.opt_tensor("weight")?;
    let groups = args.int("group")?;
    let mask: Vec<bool> = match args.get("output_mask") {
        Val::List(items) => items.iter().map(|item| matches!(item, Val::Bool(true))).collect(),
        _ => return Err(cx.bad("output_mask must be a list of three bools")),
    };
    let sizes = cx.static_dims(x, "native_group_norm_backward")?;
    let dtype = cx.dtype(x);
    if mask.len() != 3 || sizes.len() < 2 || groups < 1 || sizes[1] % groups != 0 || cx.shape(grad) != cx.shape(x) {
        return Err(cx.bad(format!("cannot take group-norm gradients of {} in {groups} groups", cx.ty(x))));
    }
    let (n, channels) = (sizes[0], sizes[1]);
    let per_group = channels / groups;
    let spatial: i64 = sizes[2..].iter().product();
    let grouped = Shape::from_static(&[n, groups, per_group, spatial]);
    let compute = opmath(dtype);
    let xc = cx.convert(x, compute)?;
    let xc = cx.reshape(xc, grouped.clone())?;
    let gc = cx.convert(grad, compute)?;
    let gc = cx.reshape(gc, grouped.clone())?;
    let mut stats = vec![];
    for stat in [mean, rstd] {
        let stat = cx.convert(stat, compute)?;
        let stat = cx.reshape(stat, Shape::from_static(&[n, groups]))?;
        stats.push(cx.broadcast_in_dim(stat, &[0, 1], grouped.clone())?);
    }
    let centered = cx.binary(BinaryOp::Subtract, xc, stats[0])?;
    let normed = cx.binary(BinaryOp::Multiply, centered, stats[1])?;
    let mut results = vec![Imported::None, Imported::None, Imported::None];
    if mask[0] {
        let g = match weight {
            Some(weight) => {
                let weight = cx.convert(weight, compute)?;
                let weight = cx.reshape(weight, Shape::from_static(&[groups, per_group]))?;
                let weight = cx.broadcast_in_dim(weight, &[1, 2], grouped.clone())?;
                cx.binary(BinaryOp::Multiply, gc, weight)?
            }
            None => gc,
        };
        let count = per_group * spatial;
        let group_mean = |cx: &mut Cx<'_>, value: ValueId| -> Result<ValueId> {
            let total = cx.reduce(value, ReduceKind::Sum, &[2, 3])?;
            let total = cx.binary_scalar(BinaryOp::Divide, total, Scalar::Int(count))?;
            cx.broadcast_in_dim(total, &[0, 1], grouped.clone())
        };
        let g_mean = group_mean(cx, g)?;
        let gx = cx.binary(BinaryOp::Multiply, g, normed)?;
        let gx_mean = group_mean(cx, gx)?;
        let projected = cx.binary(BinaryOp::Multiply, normed, gx_mean)?;
        let inside = cx.binary(BinaryOp::Subtract, g, g_mean)?;
        let inside = cx.binary(BinaryOp::Subtract, inside, projected)?;
        let grad_input = cx.binary(BinaryOp::Multiply, inside, stats[1])?;
        let grad_input = cx.reshape(grad_input, Shape::from_static(&sizes))?;
        results[0] = Imported::Tensor(cx.convert(grad_input, dtype)?);
    }
    for (slot, value) in [(1, Some(normed)), (2, None)] {
        if !mask[slot] {
            continue;
        }
        let param_dtype = weight.map_or(dtype, |weight| cx.dtype(weight));
        let term = match value {
            Some(normed) => cx.binary(BinaryOp::Multiply, gc, normed)?,
            None => gc,
        };
        let summed = cx.reduce(term, ReduceKind::Sum, &[0, 3])?;
        let summed = cx.reshape(summed, Shape::from_static(&[channels]))?;
        results[slot] = Imported::Tensor(cx.convert(summed, param_dtype)?);
    }
    Ok(Imported::Tuple(results))
}

/// `convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
/// transposed, output_padding, groups, output_mask)` → (grad_input, grad_weight, grad_bias):
/// the input gradient is the convolution in the other direction with the same weight (a
/// transposed one, with the output padding that restores the input's size, for a plain
/// convolution); the weight gradient correlates the two activations once per kernel offset
/// (a `dot_general` over batch and positions, block-diagonal over groups); the bias gradient sums
/// every dim but the channels.
pub(super) fn convolution_backward(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let grad = args.tensor("grad_output")?;
    let x = args.tensor("input")?;
    let w = args.tensor("weight")?;
    let transposed = args.bool_or("transposed", false)?;
    let groups = args.int_or("groups", 1)?;
    let mask: Vec<bool> = match args.get("output_mask") {
        Val::List(items) => items.iter().map(|item| matches!(item, Val::Bool(true))).collect(),
        _ => return Err(cx.bad("output_mask must be a list of three bools")),
    };
    let dtype = cx.dtype(x);
    let (x_sizes, w_sizes, g_sizes) = (
        cx.static_dims(x, "convolution_backward")?,
        cx.static_dims(w, "convolution_backward")?,
        cx.static_dims(grad, "convolution_backward")?,
    );
    let spatial = w_sizes.len().saturating_sub(2);
    if spatial == 0 || x_sizes.len() != spatial + 2 || g_sizes.len() != spatial + 2 || mask.len() != 3 || groups < 1 {
        return Err(cx.bad(format!("cannot differentiate a convolution of {} with {}", cx.ty(x), cx.ty(w))));
    }
    let per_dim = |name: &str, default: i64| -> Result<SmallVec<[i64; 3]>> {
        let values = args.ints_or(name, &[default])?;
        match values.len() {
            1 => Ok(std::iter::repeat_n(values[0], spatial).collect()),
            n if n == spatial => Ok(values.into_iter().collect()),
            _ => Err(args.bad(format!("`{name}` {values:?} needs 1 or {spatial} values"))),
        }
    };
    let (stride, padding, dilation) = (per_dim("stride", 1)?, per_dim("padding", 0)?, per_dim("dilation", 1)?);
    let compute = opmath(dtype);
    let gc = cx.convert(grad, compute)?;
    let xc = cx.convert(x, compute)?;
    let wc = cx.convert(w, compute)?;
    let mut results = vec![Imported::None, Imported::None, Imported::None];
    if mask[0] {
        // Output padding of the reverse direction: what the forward's floor division dropped.
        let output_padding: SmallVec<[i64; 3]> = (0..spatial)
            .map(|i| {
                if transposed {
                    0
                } else {
                    let reach = dilation[i] * (w_sizes[i + 2] - 1) + 1;
                    x_sizes[i + 2] - ((g_sizes[i + 2] - 1) * stride[i] - 2 * padding[i] + reach)
                }
            })
            .collect();
        let geometry = ConvGeometry {
            stride: stride.clone(),
            padding: padding.clone(),
            dilation: dilation.clone(),
            output_padding,
            groups,
            transposed: !transposed,
        };
        let mut grad_input = conv_core(cx, gc, wc, &geometry)?;
        if transposed {
            // An output padding of at least the stride (allowed while it is below the dilation)
            // makes the forward's output long enough for the reverse convolution to reach past
            // the input: those positions are the padding's, not the input's.
            let got = cx.static_dims(grad_input, "convolution_backward")?;
            for dim in 2..got.len().min(x_sizes.len()) {
                if got[dim] > x_sizes[dim] {
                    grad_input = cx.slice_dim(grad_input, dim, 0, x_sizes[dim], 1)?;
                }
            }
        }
        if cx.static_dims(grad_input, "convolution_backward")? != x_sizes {
            return Err(cx.bad(format!("input gradient {} does not match input {}", cx.ty(grad_input), cx.ty(x))));
        }
        results[0] = Imported::Tensor(cx.convert(grad_input, dtype)?);
    }
    if mask[1] {
        // Plain: grad_w[o, i, k] = Σ grad[n, o, p] · x[n, i, p·s - pad + k·d].
        // Transposed: grad_w[i, o, k] = Σ x[n, i, p] · grad[n, o, p·s - pad + k·d].
        let (a, b) = if transposed { (xc, gc) } else { (gc, xc) };
        let (a_sizes, b_sizes) = if transposed { (&x_sizes, &g_sizes) } else { (&g_sizes, &x_sizes) };
        let kernel: Vec<i64> = w_sizes[2..].to_vec();
        let mut low = vec![0; spatial + 2];
        let mut high = vec![0; spatial + 2];
        for i in 0..spatial {
            let needed = dilation[i] * (kernel[i] - 1) + (a_sizes[i + 2] - 1) * stride[i] + 1;
            low[i + 2] = padding[i];
            high[i + 2] = (needed - (padding[i] + b_sizes[i + 2])).max(0);
        }
        let zero = cx.scalar(compute, Scalar::Int(0));
        let b = cx.pad(b, zero, &low, &high, &vec![0; spatial + 2])?;
        let b_padded = cx.static_dims(b, "convolution_backward")?;
        let (a_channels, b_channels, batch) = (a_sizes[1], b_sizes[1], a_sizes[0]);
        if a_channels % groups != 0 || b_channels % groups != 0 {
            return Err(cx.bad(format!("channels do not split into {groups} groups")));
        }
        let positions: i64 = a_sizes[2..].iter().product();
        let a = cx.reshape(a, Shape::from_static(&[batch, groups, a_channels / groups, positions]))?;
        let offsets = cx.unroll(&kernel, "the convolution's weight gradient")? as i64;
        let mut taps = Vec::with_capacity(offsets as usize);
        for flat in 0..offsets {
            let mut rest = flat;
            let mut start = vec![0; spatial + 2];
            let mut limit = b_padded.to_vec();
            let mut step = vec![1; spatial + 2];
            for i in (0..spatial).rev() {
                let offset = rest % kernel[i];
                rest /= kernel[i];
                start[i + 2] = offset * dilation[i];
                limit[i + 2] = start[i + 2] + (a_sizes[i + 2] - 1) * stride[i] + 1;
                step[i + 2] = stride[i];
            }
            let tap = cx.slice(b, &start, &limit, &step)?;
            let tap = cx.reshape(tap, Shape::from_static(&[batch, groups, b_channels / groups, positions]))?;
            let dims = DotDims {
                lhs_batch: [1].into_iter().collect(),
                rhs_batch: [1].into_iter().collect(),
                lhs_contracting: [0, 3].into_iter().collect(),
                rhs_contracting: [0, 3].into_iter().collect(),
            };
            // [g, A/g, B/g] -> [A, B/g, 1]
            let product = cx.dot_general(a, tap, dims)?;
            let product = cx.reshape(product, Shape::from_static(&[a_channels, b_channels / groups, 1]))?;
            taps.push(product);
        }
        let stacked = if taps.len() == 1 { taps[0] } else { cx.concatenate(&taps, 2)? };
        let grad_weight = cx.reshape(stacked, Shape::from_static(&w_sizes))?;
        results[1] = Imported::Tensor(cx.convert(grad_weight, cx.dtype(w))?);
    }
    if mask[2] {
        let dims: Vec<usize> = (0..spatial + 2).filter(|&dim| dim != 1).collect();
        let grad_bias = cx.reduce(gc, ReduceKind::Sum, &dims)?;
        results[2] = Imported::Tensor(cx.convert(grad_bias, dtype)?);
    }
    Ok(Imported::Tuple(results))
}

/// The pieces `_weight_norm_interface` and its backward share: the dims other than `dim`
/// (reduced), the op math dtype, and the dtype PyTorch keeps the norms in (`f32` for `f16` and
/// `bf16` weights, as its CPU and CUDA kernels do; the weights' dtype otherwise).
fn weight_norm_dims(cx: &Cx<'_>, v: ValueId, g: ValueId, dim: i64, what: &str) -> Result<(Vec<usize>, DType, DType)> {
    let (v_ty, g_ty) = (cx.ty(v), cx.ty(g));
    if !v_ty.dtype.is_float() || !g_ty.dtype.is_float() || v_ty.rank() == 0 {
        return Err(cx.bad(format!("{what} needs float weights, found {v_ty} and {g_ty}")));
    }
    let rank = v_ty.rank();
    // PyTorch's kernels take the first or the last dim only, unwrapped (`_weight_norm` sends
    // other dims, and -1 for the whole tensor, through `norm_except_dim` instead).
    let dim = match usize::try_from(dim) {
        Ok(dim) if dim == 0 || dim + 1 == rank => dim,
        _ => return Err(cx.bad(format!("{what}: fused kernels can only be applied for first or last dim, not {dim}"))),
    };
    let reduced: Vec<usize> = (0..rank).filter(|&d| d != dim).collect();
    let norm_dtype = if matches!(g_ty.dtype, DType::F16 | DType::BF16) { DType::F32 } else { g_ty.dtype };
    Ok((reduced, opmath(v_ty.dtype), norm_dtype))
}

/// `_weight_norm_interface(v, g, dim)` → (w, norms): `norms` is the 2-norm of `v` over every dim
/// but `dim` (kept as size 1; `|v|` for a 1-d `v`) and `w = v * g / norms`, computed in op math
/// and rounded once as PyTorch's kernels do.
pub(super) fn weight_norm(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (v, g) = (args.tensor("v")?, args.tensor("g")?);
    let dim = args.int_or("dim", 0)?;
    let (reduced, compute, norm_dtype) = weight_norm_dims(cx, v, g, dim, "_weight_norm_interface")?;
    let shape = cx.shape(v);
    let vc = cx.convert(v, compute)?;
    let norms = if reduced.is_empty() {
        cx.unary(ttpu_ir::UnaryOp::Abs, vc)?
    } else {
        let squares = cx.binary(BinaryOp::Multiply, vc, vc)?;
        let total = cx.reduce_keep(squares, ReduceKind::Sum, &reduced, true)?;
        cx.unary(ttpu_ir::UnaryOp::Sqrt, total)?
    };
    let gc = cx.convert(g, compute)?;
    let gc = cx.broadcast_to(gc, &cx.shape(norms))?;
    let scale = cx.binary(BinaryOp::Divide, gc, norms)?;
    let scale = cx.broadcast_to(scale, &shape)?;
    let w = cx.binary(BinaryOp::Multiply, vc, scale)?;
    let w = cx.convert(w, cx.dtype(v))?;
    let norms = cx.convert(norms, norm_dtype)?;
    Ok(Imported::Tuple(vec![Imported::Tensor(w), Imported::Tensor(norms)]))
}

/// `_weight_norm_interface_backward(grad_w, saved_v, saved_g, saved_norms, dim)` → (grad_v,
/// grad_g), as PyTorch's kernels compute them in op math: `grad_g = sum(grad_w * v) / norms`
/// over every dim but `dim`, `grad_v = (g / norms) * (grad_w - v * grad_g / norms)`.
pub(super) fn weight_norm_backward(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let grad = args.tensor("grad_w")?;
    let (v, g, norms) = (args.tensor("saved_v")?, args.tensor("saved_g")?, args.tensor("saved_norms")?);
    let dim = args.int("dim")?;
    let (reduced, compute, _) = weight_norm_dims(cx, v, g, dim, "_weight_norm_interface_backward")?;
    let shape = cx.shape(v);
    if cx.shape(grad) != shape {
        return Err(cx.bad(format!("grad_w {} does not match the weights {}", cx.ty(grad), cx.ty(v))));
    }
    let keep = cx.shape(norms);
    let kept: Vec<i64> = shape
        .as_static()
        .expect("static weights")
        .iter()
        .enumerate()
        .map(|(d, &size)| if reduced.contains(&d) { 1 } else { size })
        .collect();
    if keep.as_static().as_deref() != Some(&kept[..]) || cx.shape(g).as_static().as_deref() != Some(&kept[..]) {
        return Err(cx.bad(format!(
            "saved_g {} and saved_norms {} must have the shape {kept:?}",
            cx.ty(g),
            cx.ty(norms)
        )));
    }
    let (vc, gradc) = (cx.convert(v, compute)?, cx.convert(grad, compute)?);
    let (gc, normc) = (cx.convert(g, compute)?, cx.convert(norms, compute)?);
    let product = cx.binary(BinaryOp::Multiply, gradc, vc)?;
    let sums = if reduced.is_empty() { product } else { cx.reduce_keep(product, ReduceKind::Sum, &reduced, true)? };
    let grad_g = cx.binary(BinaryOp::Divide, sums, normc)?;
    let ratio = cx.binary(BinaryOp::Divide, grad_g, normc)?;
    let ratio = cx.broadcast_to(ratio, &shape)?;
    let projected = cx.binary(BinaryOp::Multiply, vc, ratio)?;
    let inside = cx.binary(BinaryOp::Subtract, gradc, projected)?;
    let scale = cx.binary(BinaryOp::Divide, gc, normc)?;
    let scale = cx.broadcast_to(scale, &shape)?;
    let grad_v = cx.binary(BinaryOp::Multiply, scale, inside)?;
    let grad_v = cx.convert(grad_v, cx.dtype(v))?;
    let grad_g = cx.convert(grad_g, cx.dtype(g))?;
    Ok(Imported::Tuple(vec![Imported::Tensor(grad_v), Imported::Tensor(grad_g)]))
}

/// `_embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices,
/// num_weights, scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx)` and
/// `_embedding_bag_dense_backward` (the same without `offsets` and `sparse`): the dense gradient
/// of the weight. Sum and mean: each member's row gets its bag's gradient (divided by the bag's
/// size for mean, times its per-sample weight, divided by its index's frequency under
/// `scale_grad_by_freq`; members at `padding_idx` give nothing). Max: each bag's gradient goes to
/// the row its maximum came from, per feature; empty bags give nothing. An empty `offset2bag`
/// (PyTorch's CPU forward leaves it so for sums) is made from `offsets`, as PyTorch's backward
/// makes it. Sparse gradients are refused.
pub(super) fn embedding_bag_backward(cx: &mut Cx<'_>, args: &Args, dense_only: bool) -> Result<Imported> {
    let grad = args.tensor("grad")?;
    let indices = args.tensor("indices")?;
    let offset2bag = args.tensor("offset2bag")?;
    let bag_size = args.tensor("bag_size")?;
    let maximum_indices = args.tensor("maximum_indices")?;
    let rows = args.int("num_weights")?;
    let scale = args.bool_or("scale_grad_by_freq", false)?;
    let mode = args.int("mode")?;
    let per_sample = args.opt_tensor("per_sample_weights")?;
    let padding_idx = args.int_or("padding_idx", -1)?;
    let name = if dense_only { "_embedding_bag_dense_backward" } else { "_embedding_bag_backward" };
    if !dense_only && args.bool_or("sparse", false)? {
        return Err(cx.bad("sparse gradients of embedding_bag are not supported on the ttpu device (sparse=False is)"));
    }
    let [bags, width] = cx.static_dims(grad, name)?[..] else {
        return Err(cx.bad(format!("{name}: grad must be a matrix, found {}", cx.ty(grad))));
    };
    if cx.rank(indices) != 1 || !(0..=2).contains(&mode) || rows < 0 {
        return Err(cx.bad(format!("{name}: indices {} and mode {mode} cannot be bagged", cx.ty(indices))));
    }
    let count = cx.static_dim(indices, 0, name)?;
    cx.table(&[bags.max(1), count.max(1)], name)?;
    let dtype = cx.dtype(grad);
    let compute = opmath(dtype);
    let gradc = cx.convert(grad, compute)?;
    let zeros = cx.splat(compute, Scalar::Int(0), &Shape::from_static(&[rows, width]))?;
    if mode == 2 {
        // Each feature of each non-empty bag to the row its maximum came from.
        if cx.static_dims(maximum_indices, name)?[..] != [bags, width] {
            return Err(cx.bad(format!("{name}: maximum_indices {} must be [{bags}, {width}]", cx.ty(maximum_indices))));
        }
        let sizes = cx.convert(bag_size, DType::I64)?;
        let none = cx.splat(DType::I64, Scalar::Int(0), &Shape::from_static(&[bags]))?;
        let filled = cx.compare(CompareDirection::Gt, sizes, none)?;
        let filled = cx.broadcast_in_dim(filled, &[0], Shape::from_static(&[bags, width]))?;
        let nothing = cx.splat(compute, Scalar::Int(0), &Shape::from_static(&[bags, width]))?;
        let routed = cx.select(filled, gradc, nothing)?;
        let row = cx.convert(maximum_indices, DType::I64)?;
        let plane = Shape::from_static(&[bags, width]);
        let column = iota(cx, &plane, 1)?;
        let points = stack_last(cx, &[row, column])?;
        let points = cx.reshape(points, Shape::from_static(&[bags * width, 2]))?;
        let routed = cx.reshape(routed, Shape::from_static(&[bags * width]))?;
        let summed = scatter_points(cx, zeros, points, routed, ScatterKind::Combine(ReduceKind::Sum))?;
        return tensor(cx.convert(summed, dtype)?);
    }
    let indices = cx.convert(indices, DType::I64)?;
    let offsets = if dense_only { None } else { Some(args.tensor("offsets")?) };
    let bag_of = bag_of_each_index(cx, offset2bag, offsets, count, name)?;
    let wide = Shape::from_static(&[count, width]);
    let mut member = super::layout::gather_dim(cx, gradc, 0, bag_of)?;
    if mode == 1 {
        let sizes = cx.convert(bag_size, compute)?;
        let sizes = super::layout::gather_dim(cx, sizes, 0, bag_of)?;
        let sizes = cx.broadcast_in_dim(sizes, &[0], wide.clone())?;
        member = cx.binary(BinaryOp::Divide, member, sizes)?;
    }
    if let Some(per_sample) = per_sample {
        let per_sample = cx.convert(per_sample, compute)?;
        let per_sample = cx.broadcast_in_dim(per_sample, &[0], wide.clone())?;
        member = cx.binary(BinaryOp::Multiply, member, per_sample)?;
    }
    tensor(add_rows_at(cx, member, indices, rows, scale, padding_idx, dtype)?)
}

/// The bag of each of `count` indices: `offset2bag` as the forward gave it, or, where PyTorch's
/// forward left it empty (a sum's fast path), counted from `offsets` as PyTorch's backward counts
/// it: the number of bags starting at or before the index, less one.
fn bag_of_each_index(
    cx: &mut Cx<'_>,
    offset2bag: ValueId,
    offsets: Option<ValueId>,
    count: i64,
    name: &str,
) -> Result<ValueId> {
    if cx.rank(offset2bag) == 1 && cx.static_dim(offset2bag, 0, name)? == count {
        return cx.convert(offset2bag, DType::I64);
    }
    let Some(offsets) = offsets.filter(|&offsets| cx.rank(offsets) == 1) else {
        return Err(cx.bad(format!("{name}: offset2bag {} must have one bag per index", cx.ty(offset2bag))));
    };
    let offsets = cx.convert(offsets, DType::I64)?;
    let given = cx.static_dim(offsets, 0, name)?;
    cx.table(&[count.max(1), given.max(1)], name)?;
    let grid = Shape::from_static(&[count, given]);
    let position = iota(cx, &grid, 0)?;
    let starts = cx.broadcast_in_dim(offsets, &[1], grid)?;
    let started = cx.compare(CompareDirection::Le, starts, position)?;
    let started = cx.convert(started, DType::I64)?;
    let started = cx.reduce(started, ReduceKind::Sum, &[1])?;
    cx.binary_scalar(BinaryOp::Subtract, started, Scalar::Int(1))
}

/// `_embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, offset2bag, mode,
/// padding_idx)`: the gradient of each per-sample weight, the dot product of its bag's gradient
/// with the weight row it scaled (0 at `padding_idx`). Only sums take per-sample weights.
pub(super) fn embedding_bag_per_sample_weights_backward(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let name = "_embedding_bag_per_sample_weights_backward";
    let (grad, weight, indices) = (args.tensor("grad")?, args.tensor("weight")?, args.tensor("indices")?);
    let (offsets, offset2bag) = (args.tensor("offsets")?, args.tensor("offset2bag")?);
    let mode = args.int("mode")?;
    let padding_idx = args.int_or("padding_idx", -1)?;
    if mode != 0 {
        return Err(cx.bad(format!("{name}: per-sample weights need mode sum, not mode {mode}")));
    }
    let width = cx.static_dim(grad, 1, name)?;
    if cx.rank(grad) != 2 || cx.rank(weight) != 2 || cx.rank(indices) != 1 || cx.static_dim(weight, 1, name)? != width {
        return Err(cx.bad(format!("{name}: grad {} and weight {} do not fit", cx.ty(grad), cx.ty(weight))));
    }
    let count = cx.static_dim(indices, 0, name)?;
    let dtype = cx.dtype(grad);
    let compute = opmath(dtype);
    let indices = cx.convert(indices, DType::I64)?;
    let bag_of = bag_of_each_index(cx, offset2bag, Some(offsets), count, name)?;
    let gradc = cx.convert(grad, compute)?;
    let grads = super::layout::gather_dim(cx, gradc, 0, bag_of)?;
    let weightc = cx.convert(weight, compute)?;
    let rows = super::layout::gather_dim(cx, weightc, 0, indices)?;
    let products = cx.binary(BinaryOp::Multiply, grads, rows)?;
    let mut dots = cx.reduce(products, ReduceKind::Sum, &[1])?;
    if padding_idx >= 0 {
        let padding = cx.splat(DType::I64, Scalar::Int(padding_idx), &Shape::from_static(&[count]))?;
        let real = cx.compare(CompareDirection::Ne, indices, padding)?;
        let nothing = cx.splat(compute, Scalar::Int(0), &Shape::from_static(&[count]))?;
        dots = cx.select(real, dots, nothing)?;
    }
    tensor(cx.convert(dots, dtype)?)
}
