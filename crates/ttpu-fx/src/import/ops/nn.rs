//! Neural-network ops: activations, softmax, matrix products, layer and batch norm, convolution
//! and embedding.
//!
//! Formulas follow PyTorch's CPU kernels (GELU's erf and tanh forms, biased variance with `eps`
//! inside the square root, max-subtracted softmax); `f16`/`bf16` inputs compute in `f32` and round
//! once at the end, which is what PyTorch's kernels and its f32-accumulating GEMMs do.

use smallvec::SmallVec;
use ttpu_ir::{
    BinaryOp, CompareDirection, ConvDims, DType, DotDims, GatherDims, Literal, ReduceKind, Scalar, Shape, UnaryOp,
    ValueId,
};

use super::elementwise::{erf, tensor};
use super::layout::reverse;
use crate::error::Result;
use crate::import::args::Args;
use crate::import::ctx::{Cx, Imported, opmath};

/// `relu`: `max(x, 0)` (NaN stays NaN).
pub(super) fn relu(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    if cx.dtype(x).is_bool() {
        return Err(cx.bad("relu is not defined for bool tensors"));
    }
    let zero = cx.splat_like(x, Scalar::Int(0))?;
    tensor(cx.binary(BinaryOp::Maximum, x, zero)?)
}

/// A float input of an activation, converted to its opmath dtype; also returns the input dtype.
fn float_input(cx: &mut Cx<'_>, args: &Args, op: &str) -> Result<(ValueId, DType)> {
    let x = args.tensor("self")?;
    let dtype = cx.dtype(x);
    if !dtype.is_float() {
        return Err(cx.bad(format!("{op} needs a floating-point input, found {}", cx.ty(x))));
    }
    Ok((cx.convert(x, opmath(dtype))?, dtype))
}

/// `gelu(self, approximate)`: `x/2 * (1 + erf(x/√2))`, or the tanh approximation.
pub(super) fn gelu(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (x, dtype) = float_input(cx, args, "gelu")?;
    let approximate = args.opt_str("approximate")?.unwrap_or("none").to_owned();
    let half_x = cx.binary_scalar(BinaryOp::Multiply, x, Scalar::Float(0.5))?;
    let inner = match approximate.as_str() {
        "none" => {
            let scaled = cx.binary_scalar(BinaryOp::Multiply, x, Scalar::Float(std::f64::consts::FRAC_1_SQRT_2))?;
            erf(cx, scaled)?
        }
        "tanh" => {
            // PyTorch: kBeta = √2 · (2/√π) · 0.5 = √(2/π), kKappa = 0.044715.
            let beta = std::f64::consts::SQRT_2 * std::f64::consts::FRAC_2_SQRT_PI * 0.5;
            let square = cx.binary(BinaryOp::Multiply, x, x)?;
            let cube = cx.binary(BinaryOp::Multiply, square, x)?;
            let kappa_cube = cx.binary_scalar(BinaryOp::Multiply, cube, Scalar::Float(0.044715))?;
            let sum = cx.binary(BinaryOp::Add, x, kappa_cube)?;
            let scaled = cx.binary_scalar(BinaryOp::Multiply, sum, Scalar::Float(beta))?;
            cx.unary(UnaryOp::Tanh, scaled)?
        }
        other => return Err(cx.bad(format!("approximate must be 'none' or 'tanh', found '{other}'"))),
    };
    let one_plus = cx.binary_scalar(BinaryOp::Add, inner, Scalar::Int(1))?;
    let result = cx.binary(BinaryOp::Multiply, half_x, one_plus)?;
    tensor(cx.convert(result, dtype)?)
}

/// `silu`: `x * sigmoid(x)`.
pub(super) fn silu(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (x, dtype) = float_input(cx, args, "silu")?;
    let sigmoid = cx.unary(UnaryOp::Logistic, x)?;
    let result = cx.binary(BinaryOp::Multiply, x, sigmoid)?;
    tensor(cx.convert(result, dtype)?)
}

/// `hardtanh(self, min_val, max_val)`: a clamp keeping the input dtype.
pub(super) fn hardtanh(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let low = args.scalar_or("min_val", Scalar::Int(-1))?;
    let high = args.scalar_or("max_val", Scalar::Int(1))?;
    let raised = cx.binary_scalar(BinaryOp::Maximum, x, low)?;
    tensor(cx.binary_scalar(BinaryOp::Minimum, raised, high)?)
}

/// `leaky_relu(self, negative_slope)`: `x > 0 ? x : x * slope`.
pub(super) fn leaky_relu(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (x, dtype) = float_input(cx, args, "leaky_relu")?;
    let slope = args.scalar_or("negative_slope", Scalar::Float(0.01))?;
    let zero = cx.splat_like(x, Scalar::Int(0))?;
    let positive = cx.compare(CompareDirection::Gt, x, zero)?;
    let scaled = cx.binary_scalar(BinaryOp::Multiply, x, slope)?;
    let result = cx.select(positive, x, scaled)?;
    tensor(cx.convert(result, dtype)?)
}

/// `hardsigmoid`: `min(max(x + 3, 0), 6) / 6`.
pub(super) fn hardsigmoid(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (x, dtype) = float_input(cx, args, "hardsigmoid")?;
    let result = relu6_over_6(cx, x)?;
    tensor(cx.convert(result, dtype)?)
}

/// `hardswish`: `x * min(max(x + 3, 0), 6) / 6`.
pub(super) fn hardswish(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (x, dtype) = float_input(cx, args, "hardswish")?;
    let gate = relu6_over_6(cx, x)?;
    let result = cx.binary(BinaryOp::Multiply, x, gate)?;
    tensor(cx.convert(result, dtype)?)
}

/// `min(max(x + 3, 0), 6) / 6`.
fn relu6_over_6(cx: &mut Cx<'_>, x: ValueId) -> Result<ValueId> {
    let shifted = cx.binary_scalar(BinaryOp::Add, x, Scalar::Int(3))?;
    let low = cx.binary_scalar(BinaryOp::Maximum, shifted, Scalar::Int(0))?;
    let high = cx.binary_scalar(BinaryOp::Minimum, low, Scalar::Int(6))?;
    cx.binary_scalar(BinaryOp::Divide, high, Scalar::Int(6))
}

/// `elu(self, alpha, scale, input_scale)`: `scale * x` above 0, else
/// `scale * alpha * (exp(x * input_scale) - 1)`.
pub(super) fn elu(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (x, dtype) = float_input(cx, args, "elu")?;
    let alpha = args.scalar_or("alpha", Scalar::Int(1))?;
    let scale = args.scalar_or("scale", Scalar::Int(1))?;
    let input_scale = args.scalar_or("input_scale", Scalar::Int(1))?;
    let zero = cx.splat_like(x, Scalar::Int(0))?;
    let positive = cx.compare(CompareDirection::Gt, x, zero)?;
    let scaled_input = cx.binary_scalar(BinaryOp::Multiply, x, input_scale)?;
    let expm1 = cx.unary(UnaryOp::ExponentialMinusOne, scaled_input)?;
    let negative = cx.binary_scalar(BinaryOp::Multiply, expm1, Scalar::Float(alpha.as_f64() * scale.as_f64()))?;
    let linear = cx.binary_scalar(BinaryOp::Multiply, x, scale)?;
    let result = cx.select(positive, linear, negative)?;
    tensor(cx.convert(result, dtype)?)
}

/// `_softmax` / `_log_softmax(self, dim, half_to_float)`, subtracting the max for stability.
pub(super) fn softmax(cx: &mut Cx<'_>, args: &Args, log: bool) -> Result<Imported> {
    let x = args.tensor("self")?;
    let dtype = cx.dtype(x);
    if !dtype.is_float() {
        return Err(cx.bad(format!("softmax needs a floating-point input, found {}", cx.ty(x))));
    }
    let half_to_float = args.bool_or("half_to_float", false)?;
    if half_to_float && opmath(dtype) == dtype {
        return Err(cx.bad("half_to_float is only supported for f16 and bf16 inputs"));
    }
    let out = if half_to_float { DType::F32 } else { dtype };
    let rank = cx.rank(x);
    let dim = cx.norm_dim(args.int("dim")?, rank)?;
    if rank == 0 {
        // One element: softmax is 1, log_softmax 0.
        let value = if log { 0 } else { 1 };
        return tensor(cx.splat(out, Scalar::Int(value), &Shape::scalar())?);
    }
    let x = cx.convert(x, opmath(dtype))?;
    let shape = cx.shape(x);
    let max = cx.reduce_keep(x, ReduceKind::Max, &[dim], true)?;
    let max = cx.broadcast_to(max, &shape)?;
    let shifted = cx.binary(BinaryOp::Subtract, x, max)?;
    let exp = cx.unary(UnaryOp::Exponential, shifted)?;
    let total = cx.reduce_keep(exp, ReduceKind::Sum, &[dim], true)?;
    let total = cx.broadcast_to(total, &shape)?;
    let result = if log {
        let log_total = cx.unary(UnaryOp::Log, total)?;
        cx.binary(BinaryOp::Subtract, shifted, log_total)?
    } else {
        cx.binary(BinaryOp::Divide, exp, total)?
    };
    tensor(cx.convert(result, out)?)
}

/// `lhs @ rhs` (batched when `batched`), in the opmath dtype; both must share a dtype.
fn product(cx: &mut Cx<'_>, lhs: ValueId, rhs: ValueId, batched: bool) -> Result<(ValueId, DType)> {
    let rank = if batched { 3 } else { 2 };
    for value in [lhs, rhs] {
        if cx.rank(value) != rank {
            return Err(cx.bad(format!("expects rank-{rank} operands, found {}", cx.ty(value))));
        }
    }
    let dtype = cx.dtype(lhs);
    if cx.dtype(rhs) != dtype {
        return Err(cx.bad(format!("operands must share a dtype, found {} and {}", cx.ty(lhs), cx.ty(rhs))));
    }
    let compute = opmath(dtype);
    let lhs = cx.convert(lhs, compute)?;
    let rhs = cx.convert(rhs, compute)?;
    let dims = if batched {
        DotDims {
            lhs_batch: [0].into_iter().collect(),
            rhs_batch: [0].into_iter().collect(),
            lhs_contracting: [2].into_iter().collect(),
            rhs_contracting: [1].into_iter().collect(),
        }
    } else {
        DotDims {
            lhs_contracting: [1].into_iter().collect(),
            rhs_contracting: [0].into_iter().collect(),
            ..DotDims::default()
        }
    };
    Ok((cx.dot_general(lhs, rhs, dims)?, dtype))
}

/// `mm(self, mat2)`.
pub(super) fn mm(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (result, dtype) = product(cx, args.tensor("self")?, args.tensor("mat2")?, false)?;
    tensor(cx.convert(result, dtype)?)
}

/// `bmm(self, mat2)`.
pub(super) fn bmm(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (result, dtype) = product(cx, args.tensor("self")?, args.tensor("mat2")?, true)?;
    tensor(cx.convert(result, dtype)?)
}

/// `beta * bias + alpha * product`, rounded once to `dtype` (`beta == 0` ignores `bias`, NaNs
/// included, as PyTorch does).
fn add_bias(cx: &mut Cx<'_>, args: &Args, bias: ValueId, product: ValueId, dtype: DType) -> Result<ValueId> {
    let beta = args.scalar_or("beta", Scalar::Int(1))?;
    let alpha = args.scalar_or("alpha", Scalar::Int(1))?;
    if cx.dtype(bias) != dtype {
        return Err(cx.bad(format!("self {} must have the operands' dtype {dtype}", cx.ty(bias))));
    }
    let mut out = product;
    if alpha.as_f64() != 1.0 {
        out = cx.binary_scalar(BinaryOp::Multiply, out, alpha)?;
    }
    if beta.as_f64() != 0.0 {
        let bias = cx.convert(bias, cx.dtype(out))?;
        let mut bias = cx.broadcast_to(bias, &cx.shape(out))?;
        if beta.as_f64() != 1.0 {
            bias = cx.binary_scalar(BinaryOp::Multiply, bias, beta)?;
        }
        out = cx.binary(BinaryOp::Add, bias, out)?;
    }
    cx.convert(out, dtype)
}

/// `addmm(self, mat1, mat2, beta, alpha)`.
pub(super) fn addmm(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (result, dtype) = product(cx, args.tensor("mat1")?, args.tensor("mat2")?, false)?;
    tensor(add_bias(cx, args, args.tensor("self")?, result, dtype)?)
}

/// `baddbmm(self, batch1, batch2, beta, alpha)`.
pub(super) fn baddbmm(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (result, dtype) = product(cx, args.tensor("batch1")?, args.tensor("batch2")?, true)?;
    tensor(add_bias(cx, args, args.tensor("self")?, result, dtype)?)
}

/// `native_layer_norm(input, normalized_shape, weight, bias, eps)` → (out, mean, rstd); mean and
/// rstd keep the normalized dims as size 1.
pub(super) fn layer_norm(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("input")?;
    let normalized = args.ints("normalized_shape")?;
    let (weight, bias) = (args.opt_tensor("weight")?, args.opt_tensor("bias")?);
    let eps = args.scalar("eps")?;
    let dtype = cx.dtype(x);
    if !dtype.is_float() {
        return Err(cx.bad(format!("layer norm needs a floating-point input, found {}", cx.ty(x))));
    }
    let shape = cx.shape(x);
    let rank = shape.rank();
    let trailing = &shape.dims()[rank.saturating_sub(normalized.len())..];
    if normalized.len() > rank || trailing != Shape::from_static(&normalized).dims() {
        return Err(cx.bad(format!("normalized_shape {normalized:?} does not match the end of {}", cx.ty(x))));
    }
    let axes: Vec<usize> = (rank - normalized.len()..rank).collect();
    let count: i64 = normalized.iter().product();
    let compute = opmath(dtype);
    let xc = cx.convert(x, compute)?;
    let sum = cx.reduce_keep(xc, ReduceKind::Sum, &axes, true)?;
    let mean = cx.binary_scalar(BinaryOp::Divide, sum, Scalar::Int(count))?;
    let wide_mean = cx.broadcast_to(mean, &shape)?;
    let centered = cx.binary(BinaryOp::Subtract, xc, wide_mean)?;
    let squared = cx.binary(BinaryOp::Multiply, centered, centered)?;
    let sum_squares = cx.reduce_keep(squared, ReduceKind::Sum, &axes, true)?;
    let variance = cx.binary_scalar(BinaryOp::Divide, sum_squares, Scalar::Int(count))?;
    let shifted = cx.binary_scalar(BinaryOp::Add, variance, eps)?;
    let rstd = cx.unary(UnaryOp::Rsqrt, shifted)?;
    let wide_rstd = cx.broadcast_to(rstd, &shape)?;
    let mut out = cx.binary(BinaryOp::Multiply, centered, wide_rstd)?;
    for (param, op) in [(weight, BinaryOp::Multiply), (bias, BinaryOp::Add)] {
        if let Some(param) = param {
            let param = cx.convert(param, compute)?;
            let param = cx.broadcast_to(param, &shape)?;
            out = cx.binary(op, out, param)?;
        }
    }
    let out = cx.convert(out, dtype)?;
    // PyTorch keeps mean/rstd in f32 when a half input meets f32 parameters, else the input dtype.
    let mixed = [weight, bias].iter().flatten().any(|&param| cx.dtype(param) != dtype);
    let stats = if mixed && compute != dtype { compute } else { dtype };
    let mean = cx.convert(mean, stats)?;
    let rstd = cx.convert(rstd, stats)?;
    Ok(Imported::Tuple(vec![Imported::Tensor(out), Imported::Tensor(mean), Imported::Tensor(rstd)]))
}

/// `native_group_norm(input, weight, bias, N, C, HxW, group, eps)` → (out, mean, rstd): layer norm
/// over each group of `C / group` channels and all spatial positions; mean and rstd are `[N, group]`.
pub(super) fn group_norm(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("input")?;
    let (weight, bias) = (args.opt_tensor("weight")?, args.opt_tensor("bias")?);
    let groups = args.int("group")?;
    let eps = args.scalar("eps")?;
    let dtype = cx.dtype(x);
    let sizes = cx.static_dims(x, "group norm")?;
    if !dtype.is_float() || sizes.len() < 2 || groups < 1 || sizes[1] % groups != 0 {
        return Err(cx.bad(format!("cannot split {} into {groups} channel groups", cx.ty(x))));
    }
    let (batch, channels) = (sizes[0], sizes[1]);
    let per_group = sizes[1..].iter().product::<i64>() / groups;
    let compute = opmath(dtype);
    let xc = cx.convert(x, compute)?;
    let grouped_shape = Shape::from_static(&[batch, groups, per_group]);
    let grouped = cx.reshape(xc, grouped_shape.clone())?;
    let sum = cx.reduce_keep(grouped, ReduceKind::Sum, &[2], true)?;
    let mean = cx.binary_scalar(BinaryOp::Divide, sum, Scalar::Int(per_group))?;
    let wide_mean = cx.broadcast_to(mean, &grouped_shape)?;
    let centered = cx.binary(BinaryOp::Subtract, grouped, wide_mean)?;
    let squared = cx.binary(BinaryOp::Multiply, centered, centered)?;
    let sum_squares = cx.reduce_keep(squared, ReduceKind::Sum, &[2], true)?;
    let variance = cx.binary_scalar(BinaryOp::Divide, sum_squares, Scalar::Int(per_group))?;
    let shifted = cx.binary_scalar(BinaryOp::Add, variance, eps)?;
    let rstd = cx.unary(UnaryOp::Rsqrt, shifted)?;
    let wide_rstd = cx.broadcast_to(rstd, &grouped_shape)?;
    let normalized = cx.binary(BinaryOp::Multiply, centered, wide_rstd)?;
    let shape = Shape::from_static(&sizes);
    let mut out = cx.reshape(normalized, shape.clone())?;
    for (param, op) in [(weight, BinaryOp::Multiply), (bias, BinaryOp::Add)] {
        if let Some(param) = param {
            if cx.shape(param) != Shape::from_static(&[channels]) {
                return Err(cx.bad(format!("per-channel parameter {} does not match {}", cx.ty(param), cx.ty(x))));
            }
            let param = cx.convert(param, compute)?;
            let param = cx.broadcast_in_dim(param, &[1], shape.clone())?;
            out = cx.binary(op, out, param)?;
        }
    }
    let out = cx.convert(out, dtype)?;
    let mixed = [weight, bias].iter().flatten().any(|&param| cx.dtype(param) != dtype);
    let stats = if mixed && compute != dtype { compute } else { dtype };
    let stats_shape = Shape::from_static(&[batch, groups]);
    let mean = cx.reshape(mean, stats_shape.clone())?;
    let mean = cx.convert(mean, stats)?;
    let rstd = cx.reshape(rstd, stats_shape)?;
    let rstd = cx.convert(rstd, stats)?;
    Ok(Imported::Tuple(vec![Imported::Tensor(out), Imported::Tensor(mean), Imported::Tensor(rstd)]))
}

/// `_native_batch_norm_legit_no_training(input, weight, bias, running_mean, running_var,
/// momentum, eps)` → (out, empty, empty): `(x - mean) / sqrt(var + eps) * weight + bias` over dim 1.
pub(super) fn batch_norm_inference(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("input")?;
    let (weight, bias) = (args.opt_tensor("weight")?, args.opt_tensor("bias")?);
    let (mean, var) = (args.tensor("running_mean")?, args.tensor("running_var")?);
    let eps = args.scalar("eps")?;
    let dtype = cx.dtype(x);
    if !dtype.is_float() || cx.rank(x) < 2 {
        return Err(cx.bad(format!("batch norm needs a floating-point input of rank 2 or more, found {}", cx.ty(x))));
    }
    let shape = cx.shape(x);
    let compute = opmath(dtype);
    // Per-channel [C] values along dim 1 of the input.
    let channel = |cx: &mut Cx<'_>, value: ValueId| -> Result<ValueId> {
        if cx.rank(value) != 1 || cx.shape(value)[0] != shape[1] {
            return Err(cx.bad(format!("per-channel value {} does not match {}", cx.ty(value), cx.ty(x))));
        }
        let value = cx.convert(value, compute)?;
        cx.broadcast_in_dim(value, &[1], shape.clone())
    };
    let var = cx.convert(var, compute)?;
    let shifted = cx.binary_scalar(BinaryOp::Add, var, eps)?;
    let root = cx.unary(UnaryOp::Sqrt, shifted)?;
    let one = cx.splat_like(root, Scalar::Int(1))?;
    let invstd = cx.binary(BinaryOp::Divide, one, root)?;
    let xc = cx.convert(x, compute)?;
    let mean = channel(cx, mean)?;
    let centered = cx.binary(BinaryOp::Subtract, xc, mean)?;
    let invstd = channel(cx, invstd)?;
    let mut out = cx.binary(BinaryOp::Multiply, centered, invstd)?;
    for (param, op) in [(weight, BinaryOp::Multiply), (bias, BinaryOp::Add)] {
        if let Some(param) = param {
            let param = channel(cx, param)?;
            out = cx.binary(op, out, param)?;
        }
    }
    let out = cx.convert(out, dtype)?;
    // On CPU the saved mean and invstd are empty tensors of the input's dtype.
    let saved_mean = cx.literal(Literal::splat(dtype, &[0], Scalar::Int(0)));
    let saved_invstd = cx.literal(Literal::splat(dtype, &[0], Scalar::Int(0)));
    Ok(Imported::Tuple(vec![Imported::Tensor(out), Imported::Tensor(saved_mean), Imported::Tensor(saved_invstd)]))
}

/// `convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
/// groups)` for 1-D to 3-D, plain or transposed.
pub(super) fn convolution(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("input")?;
    let w = args.tensor("weight")?;
    let bias = args.opt_tensor("bias")?;
    let transposed = args.bool_or("transposed", false)?;
    let groups = args.int_or("groups", 1)?;
    let spatial = cx.rank(w).saturating_sub(2);
    if spatial == 0 {
        return Err(cx.bad(format!("weight {} must have rank 3 to 5", cx.ty(w))));
    }
    if cx.rank(x) != spatial + 2 {
        return Err(cx.bad(format!(
            "input {} must be batched, rank {} for a {spatial}-D convolution",
            cx.ty(x),
            spatial + 2
        )));
    }
    if groups < 1 {
        return Err(cx.bad(format!("groups must be positive, found {groups}")));
    }
    let per_dim = |name: &str, default: i64| -> Result<SmallVec<[i64; 3]>> {
        let values = args.ints_or(name, &[default])?;
        match values.len() {
            1 => Ok(std::iter::repeat_n(values[0], spatial).collect()),
            n if n == spatial => Ok(values.into_iter().collect()),
            _ => Err(args.bad(format!("`{name}` {values:?} needs 1 or {spatial} values"))),
        }
    };
    let stride = per_dim("stride", 1)?;
    let padding = per_dim("padding", 0)?;
    let dilation = per_dim("dilation", 1)?;
    let output_padding = per_dim("output_padding", 0)?;
    let dtype = cx.dtype(x);
    if cx.dtype(w) != dtype {
        return Err(cx.bad(format!("input {} and weight {} must share a dtype", cx.ty(x), cx.ty(w))));
    }
    let compute = opmath(dtype);
    let xc = cx.convert(x, compute)?;
    let mut kernel = cx.convert(w, compute)?;
    let spatial_dims: SmallVec<[i64; 3]> = (2..spatial as i64 + 2).collect();
    let ones: SmallVec<[i64; 3]> = std::iter::repeat_n(1, spatial).collect();
    let (kernel_input_feature, kernel_output_feature, pads, lhs_dilation, window_strides) = if !transposed {
        (1, 0, padding.iter().map(|&pad| (pad, pad)).collect(), ones.clone(), stride.clone())
    } else {
        // A transposed convolution is a plain one over the input dilated by the stride, with the
        // kernel flipped, its feature dims swapped and the padding complemented.
        let sizes = cx.static_dims(w, "a transposed convolution")?;
        for dim in 2..spatial + 2 {
            kernel = reverse(cx, kernel, dim)?;
        }
        if groups > 1 {
            // [C_in, C_out/g, k..] -> [g, C_in/g, C_out/g, k..] -> [C_in/g, g, C_out/g, k..] -> [C_in/g, C_out, k..]
            let (c_in, c_out_group) = (sizes[0], sizes[1]);
            if c_in % groups != 0 {
                return Err(cx.bad(format!("weight {} does not split into {groups} groups", cx.ty(w))));
            }
            let mut split = vec![groups, c_in / groups, c_out_group];
            split.extend(&sizes[2..]);
            kernel = cx.reshape(kernel, Shape::from_static(&split))?;
            let mut permutation = vec![1, 0];
            permutation.extend(2..split.len() as i64);
            kernel = cx.transpose(kernel, &permutation)?;
            let mut merged = vec![c_in / groups, groups * c_out_group];
            merged.extend(&sizes[2..]);
            kernel = cx.reshape(kernel, Shape::from_static(&merged))?;
        }
        let pads = (0..spatial)
            .map(|index| {
                let reach = dilation[index] * (sizes[index + 2] - 1);
                (reach - padding[index], reach - padding[index] + output_padding[index])
            })
            .collect();
        (0, 1, pads, stride.clone(), ones.clone())
    };
    let dims = ConvDims {
        input_batch: 0,
        input_feature: 1,
        input_spatial: spatial_dims.clone(),
        kernel_input_feature,
        kernel_output_feature,
        kernel_spatial: spatial_dims.clone(),
        output_batch: 0,
        output_feature: 1,
        output_spatial: spatial_dims,
        window_strides,
        padding: pads,
        lhs_dilation,
        rhs_dilation: dilation,
        feature_group_count: groups,
        batch_group_count: 1,
    };
    let built = cx.b.convolution(xc, kernel, dims);
    let mut out = cx.ok(built)?;
    if let Some(bias) = bias {
        let shape = cx.shape(out);
        if cx.rank(bias) != 1 || cx.shape(bias)[0] != shape[1] {
            return Err(cx.bad(format!("bias {} does not match {} output channels", cx.ty(bias), shape[1])));
        }
        let bias = cx.convert(bias, compute)?;
        let bias = cx.broadcast_in_dim(bias, &[1], shape)?;
        out = cx.binary(BinaryOp::Add, out, bias)?;
    }
    tensor(cx.convert(out, dtype)?)
}

/// `embedding(weight, indices)`: rows of `weight` gathered at `indices` (`padding_idx` only
/// matters for gradients).
pub(super) fn embedding(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let weight = args.tensor("weight")?;
    let indices = args.tensor("indices")?;
    if cx.rank(weight) != 2 {
        return Err(cx.bad(format!("weight must be a matrix, found {}", cx.ty(weight))));
    }
    if !cx.dtype(indices).is_integer() {
        return Err(cx.bad(format!("indices must be integers, found {}", cx.ty(indices))));
    }
    let width = cx.static_dim(weight, 1, "embedding")?;
    let rank = cx.rank(indices) as i64;
    let dims = GatherDims {
        offset_dims: [rank].into_iter().collect(),
        collapsed_slice_dims: [0].into_iter().collect(),
        operand_batching_dims: SmallVec::new(),
        start_indices_batching_dims: SmallVec::new(),
        start_index_map: [0].into_iter().collect(),
        index_vector_dim: rank,
        slice_sizes: [1, width].into_iter().collect(),
        indices_are_sorted: false,
    };
    let built = cx.b.gather(weight, indices, dims);
    tensor(cx.ok(built)?)
}
