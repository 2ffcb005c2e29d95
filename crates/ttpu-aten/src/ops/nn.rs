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

use super::elementwise::tensor;
use super::layout::reverse;
use crate::args::Args;
use crate::ctx::{Cx, Imported, opmath};
use crate::error::Result;

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
    let kind = match approximate.as_str() {
        "none" => ttpu_torch::decomp::Gelu::Exact,
        "tanh" => ttpu_torch::decomp::Gelu::Tanh,
        other => return Err(cx.bad(format!("approximate must be 'none' or 'tanh', found '{other}'"))),
    };
    let built = ttpu_torch::decomp::gelu(&mut cx.b, x, kind);
    let result = cx.ok(built)?;
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
    let built = ttpu_torch::decomp::softmax(&mut cx.b, x, dim, log, out);
    tensor(cx.ok(built)?)
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

/// `transformers.grouped_mm_fallback(input, weight, offs)`: the grouped matmul of Hugging Face's
/// mixture-of-experts layers. See [`grouped_product`].
pub(super) fn grouped_mm_fallback(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (input, weight, offs) = (args.tensor("input")?, args.tensor("weight")?, args.tensor("offs")?);
    tensor(grouped_product(cx, input, weight, offs)?)
}

/// `transformers::grouped_mm_fallback_backward(input, weight, offs, grad_output)`: the input's
/// gradient (each row's gradient times its group's weight, transposed) and the weight's (each
/// group's rows of the input, transposed, times their gradients); rows past the last end get
/// and give nothing, as in the reference loop.
pub(super) fn grouped_mm_fallback_backward(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (input, weight, offs) = (args.tensor("input")?, args.tensor("weight")?, args.tensor("offs")?);
    let grad = args.tensor("grad_output")?;
    if cx.rank(weight) != 3 || cx.rank(input) != 2 {
        return Err(cx.bad(format!(
            "expects a 2-D input and a 3-D weight, found {} and {}",
            cx.ty(input),
            cx.ty(weight)
        )));
    }
    let weight_t = cx.transpose(weight, &[0, 2, 1])?;
    let grad_input = grouped_product(cx, grad, weight_t, offs)?;
    let input_t = cx.transpose(input, &[1, 0])?;
    let grad_weight = grouped_contraction(cx, input_t, grad, offs)?;
    Ok(Imported::Tuple(vec![Imported::Tensor(grad_input), Imported::Tensor(grad_weight)]))
}

/// `_grouped_mm(self, mat2, offs, bias, out_dtype)` in its four forms, without a bias or another
/// output dtype: 2-D by 3-D (rows of `self` grouped by `offs`, the mixture-of-experts forward),
/// 2-D by 2-D (the contracted dim grouped: a `[G, M, N]` result, the weight gradient), 3-D by
/// 2-D (columns of `mat2` grouped) and 3-D by 3-D (a batch, no `offs`).
pub(super) fn grouped_mm(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (input, weight) = (args.tensor("self")?, args.tensor("mat2")?);
    let offs = args.opt_tensor("offs")?;
    if args.opt_tensor("bias")?.is_some() {
        return Err(cx.bad("a bias is not supported"));
    }
    let dtype = cx.dtype(input);
    if let Some(out_dtype) = args.opt_dtype("out_dtype")?
        && out_dtype != dtype
    {
        return Err(cx.bad(format!("out_dtype {out_dtype} differs from the operands' dtype {dtype}")));
    }
    match (cx.rank(input), cx.rank(weight), offs) {
        (2, 3, Some(offs)) => tensor(grouped_product(cx, input, weight, offs)?),
        (2, 2, Some(offs)) => tensor(grouped_contraction(cx, input, weight, offs)?),
        (3, 2, Some(offs)) => {
            // Columns of `mat2` grouped: the transpose of the 2-D by 3-D form.
            let (lhs, rhs) = (cx.transpose(weight, &[1, 0])?, cx.transpose(input, &[0, 2, 1])?);
            let product = grouped_product(cx, lhs, rhs, offs)?;
            tensor(cx.transpose(product, &[1, 0])?)
        }
        (3, 3, None) => {
            let (result, dtype) = product(cx, input, weight, true)?;
            tensor(cx.convert(result, dtype)?)
        }
        _ => Err(cx.bad(format!(
            "no grouped matmul of {} by {} {} offsets (2-D by 3-D, 2-D by 2-D and 3-D by 2-D take them, 3-D by 3-D does not)",
            cx.ty(input),
            cx.ty(weight),
            if offs.is_some() { "with" } else { "without" }
        ))),
    }
}

/// `input` (`[M, K]`) times `weight` (`[K, N]`) with the contracted dim split into groups by
/// `offs` (running ends): result `g` (`[G, M, N]`) sums over the `k` of group `g` only, and a `k`
/// at or past the last end counts in none.
fn grouped_contraction(cx: &mut Cx<'_>, input: ValueId, weight: ValueId, offs: ValueId) -> Result<ValueId> {
    let (input_dims, weight_dims) =
        (cx.static_dims(input, "a grouped matmul")?, cx.static_dims(weight, "a grouped matmul")?);
    let (&[m, k], &[k2, _]) = (&input_dims[..], &weight_dims[..]) else {
        return Err(cx.bad(format!(
            "a grouped contraction expects two 2-D operands, found {} and {}",
            cx.ty(input),
            cx.ty(weight)
        )));
    };
    let dtype = cx.dtype(input);
    let Some(&[groups]) = cx.shape(offs).as_static().as_deref() else {
        return Err(cx.bad(format!("offs must be a 1-D tensor of group ends, found {}", cx.ty(offs))));
    };
    if k != k2 || cx.dtype(weight) != dtype || !dtype.is_float() || !cx.dtype(offs).is_integer() {
        return Err(cx.bad(format!(
            "input {} does not fit weight {} with offs {}",
            cx.ty(input),
            cx.ty(weight),
            cx.ty(offs)
        )));
    }
    cx.table(&[groups, m, k], "a grouped matmul")?;
    let compute = opmath(dtype);
    // [G, K]: whether `k` falls in group `g`, between the previous group's end and its own.
    let grid = Shape::from_static(&[groups, k]);
    let ends = cx.convert(offs, DType::I64)?;
    let zero = cx.splat(DType::I64, Scalar::Int(0), &Shape::from_static(&[1]))?;
    let earlier = if groups > 1 { Some(cx.slice(ends, &[0], &[groups - 1], &[1])?) } else { None };
    let starts = match earlier {
        Some(earlier) => cx.concatenate(&[zero, earlier], 0)?,
        None => zero,
    };
    let (starts, ends) =
        (cx.broadcast_in_dim(starts, &[0], grid.clone())?, cx.broadcast_in_dim(ends, &[0], grid.clone())?);
    let built = cx.b.iota(ttpu_ir::TensorType::new(DType::I64, grid), 1);
    let position = cx.ok(built)?;
    let after_start = cx.compare(CompareDirection::Ge, position, starts)?;
    let before_end = cx.compare(CompareDirection::Lt, position, ends)?;
    let member = cx.binary(BinaryOp::And, after_start, before_end)?;
    let member = cx.convert(member, compute)?;
    // [G, M, K]: each group's copy of the input with the other groups' columns zeroed.
    let lhs = cx.convert(input, compute)?;
    let spread = Shape::from_static(&[groups, m, k]);
    let lhs = cx.broadcast_in_dim(lhs, &[1, 2], spread.clone())?;
    let member = cx.broadcast_in_dim(member, &[0, 2], spread)?;
    let masked = cx.binary(BinaryOp::Multiply, lhs, member)?;
    let rhs = cx.convert(weight, compute)?;
    let out = cx.dot_general(
        masked,
        rhs,
        DotDims {
            lhs_contracting: [2].into_iter().collect(),
            rhs_contracting: [0].into_iter().collect(),
            ..DotDims::default()
        },
    )?;
    cx.convert(out, dtype)
}

/// Row `s` of `input` (`[S, K]`) times `weight[g]` (`weight` is `[E, K, N]`), where `g` is the
/// first group with `s < offs[g]` (`offs` holds the groups' running end rows); rows at or past the
/// last end stay zero, as in the reference loop. Every group's product is computed for every row
/// and each row takes its own group's (a gather), so no shape depends on the offsets.
fn grouped_product(cx: &mut Cx<'_>, input: ValueId, weight: ValueId, offs: ValueId) -> Result<ValueId> {
    let (input_dims, weight_dims) =
        (cx.static_dims(input, "a grouped matmul")?, cx.static_dims(weight, "a grouped matmul")?);
    let (&[rows, k], &[groups, k2, n]) = (&input_dims[..], &weight_dims[..]) else {
        return Err(cx.bad(format!(
            "expects a 2-D input and a 3-D weight, found {} and {}",
            cx.ty(input),
            cx.ty(weight)
        )));
    };
    let dtype = cx.dtype(input);
    if k != k2 || cx.dtype(weight) != dtype || !dtype.is_float() {
        return Err(cx.bad(format!("input {} does not fit weight {}", cx.ty(input), cx.ty(weight))));
    }
    if cx.shape(offs).as_static().as_deref() != Some(&[groups][..]) || !cx.dtype(offs).is_integer() {
        return Err(cx.bad(format!("offs must be {groups} integer group ends, found {}", cx.ty(offs))));
    }
    let compute = opmath(dtype);
    let lhs = cx.convert(input, compute)?;
    let rhs = cx.convert(weight, compute)?;
    // [S, E, N]: every row times every group's weight.
    let every = cx.dot_general(
        lhs,
        rhs,
        DotDims {
            lhs_contracting: [1].into_iter().collect(),
            rhs_contracting: [1].into_iter().collect(),
            ..DotDims::default()
        },
    )?;
    let grid = Shape::from_static(&[rows, groups]);
    let ends = cx.convert(offs, DType::I64)?;
    let ends = cx.broadcast_in_dim(ends, &[1], grid.clone())?;
    let built = cx.b.iota(ttpu_ir::TensorType::new(DType::I64, grid), 0);
    let row = cx.ok(built)?;
    let passed = cx.compare(CompareDirection::Le, ends, row)?;
    let passed = cx.convert(passed, DType::I64)?;
    let group = cx.reduce(passed, ReduceKind::Sum, &[1])?;
    let last = cx.splat(DType::I64, Scalar::Int(groups - 1), &Shape::from_static(&[rows]))?;
    let valid = cx.compare(CompareDirection::Le, group, last)?;
    let clamped = cx.binary(BinaryOp::Minimum, group, last)?;
    let built = cx.b.iota(ttpu_ir::TensorType::new(DType::I64, Shape::from_static(&[rows])), 0);
    let row_index = cx.ok(built)?;
    let points = super::index::stack_last(cx, &[row_index, clamped])?;
    let picked = super::index::gather_points(cx, every, points)?;
    let valid = cx.broadcast_in_dim(valid, &[0], Shape::from_static(&[rows, n]))?;
    let zero = cx.splat(compute, Scalar::Int(0), &Shape::from_static(&[rows, n]))?;
    let out = cx.select(valid, picked, zero)?;
    cx.convert(out, dtype)
}

/// `bmm(self, mat2)`.
pub(super) fn bmm(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (result, dtype) = product(cx, args.tensor("self")?, args.tensor("mat2")?, true)?;
    tensor(cx.convert(result, dtype)?)
}

/// `beta * bias + alpha * product`, rounded once to `dtype` (`beta == 0` ignores `bias`, NaNs
/// included, as PyTorch does).
pub(super) fn add_bias(cx: &mut Cx<'_>, args: &Args, bias: ValueId, product: ValueId, dtype: DType) -> Result<ValueId> {
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
    let built = ttpu_torch::decomp::layer_norm(&mut cx.b, x, normalized.len(), weight, bias, eps);
    let ttpu_torch::decomp::LayerNorm { out, mean, rstd } = cx.ok(built)?;
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
    // On CPU the saved mean and invstd are empty tensors of the statistics' dtype.
    let stats = batch_norm_stats_dtype(cx, args)?;
    let saved_mean = cx.literal(Literal::splat(stats, &[0], Scalar::Int(0)));
    let saved_invstd = cx.literal(Literal::splat(stats, &[0], Scalar::Int(0)));
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
    let kernel = cx.convert(w, compute)?;
    let geometry = ConvGeometry { stride, padding, dilation, output_padding, groups, transposed };
    let mut out = conv_core(cx, xc, kernel, &geometry)?;
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

/// `_embedding_bag` / `_embedding_bag_forward_only(weight, indices, offsets, scale_grad_by_freq,
/// mode, sparse, per_sample_weights, include_last_offset, padding_idx)`: rows gathered at `indices`
/// and reduced per bag (`mode` 0 sum, 1 mean, 2 max; empty bags give zeros), through a `[bags,
/// indices]` membership mask built from `offsets` at run time. Returns (output, offset2bag,
/// bag_size, max_indices); `max_indices` holds the weight row of each maximum in max mode and
/// zeros otherwise.
pub(super) fn embedding_bag(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let weight = args.tensor("weight")?;
    let mut indices = args.tensor("indices")?;
    let mut offsets = args.tensor("offsets")?;
    let mode = args.int_or("mode", 0)?;
    let include_last = args.bool_or("include_last_offset", false)?;
    let padding_idx = args.int_or("padding_idx", -1)?;
    let per_sample = args.opt_tensor("per_sample_weights")?;
    let dtype = cx.dtype(weight);
    if cx.rank(weight) != 2 || !(0..=2).contains(&mode) || !dtype.is_float() {
        return Err(cx.bad(format!("cannot bag {} in mode {mode}", cx.ty(weight))));
    }
    if per_sample.is_some() && mode != 0 {
        return Err(cx.bad("per_sample_weights need mode sum"));
    }
    let width = cx.static_dim(weight, 1, "embedding_bag")?;
    if cx.rank(indices) == 2 {
        // Fixed-size bags: one per row.
        let [bags, size] = cx.static_dims(indices, "embedding_bag")?[..] else { unreachable!("rank 2") };
        cx.table(&[bags], "embedding_bag")?;
        indices = cx.reshape(indices, Shape::from_static(&[bags * size]))?;
        let starts: Vec<Scalar> = (0..bags).map(|bag| Scalar::Int(bag * size)).collect();
        offsets = cx.literal(Literal::from_scalars(DType::I64, &[bags], &starts).expect("one start per bag"));
    }
    if cx.rank(indices) != 1 || cx.rank(offsets) != 1 {
        return Err(cx.bad("indices and offsets must be 1-D"));
    }
    let count = cx.static_dim(indices, 0, "embedding_bag")?;
    let offsets = cx.convert(offsets, DType::I64)?;
    let indices = cx.convert(indices, DType::I64)?;
    let given = cx.static_dim(offsets, 0, "embedding_bag")?;
    // Bag b covers positions [start b, end b).
    let (starts, ends) = if include_last {
        (cx.slice_dim(offsets, 0, 0, given - 1, 1)?, cx.slice_dim(offsets, 0, 1, given, 1)?)
    } else {
        let rest = cx.slice_dim(offsets, 0, 1, given, 1)?;
        let total = cx.splat(DType::I64, Scalar::Int(count), &Shape::from_static(&[1]))?;
        (offsets, cx.concatenate(&[rest, total], 0)?)
    };
    let bags = cx.static_dim(starts, 0, "embedding_bag")?;
    let grid = Shape::from_static(&[bags, count]);
    let position = cx.b.iota(ttpu_ir::TensorType::new(DType::I64, grid.clone()), 1);
    let position = cx.ok(position)?;
    let starts_wide = cx.broadcast_in_dim(starts, &[0], grid.clone())?;
    let ends_wide = cx.broadcast_in_dim(ends, &[0], grid.clone())?;
    let after_start = cx.compare(CompareDirection::Ge, position, starts_wide)?;
    let before_end = cx.compare(CompareDirection::Lt, position, ends_wide)?;
    let mut member = cx.binary(BinaryOp::And, after_start, before_end)?;
    if padding_idx >= 0 {
        let padding = cx.splat(DType::I64, Scalar::Int(padding_idx), &Shape::from_static(&[count]))?;
        let real = cx.compare(CompareDirection::Ne, indices, padding)?;
        let real = cx.broadcast_in_dim(real, &[1], grid.clone())?;
        member = cx.binary(BinaryOp::And, member, real)?;
    }
    let as_int = cx.convert(member, DType::I64)?;
    let bag_size = cx.reduce(as_int, ReduceKind::Sum, &[1])?;
    let offset2bag = {
        let started = cx.convert(after_start, DType::I64)?;
        let started = cx.reduce(started, ReduceKind::Sum, &[0])?;
        cx.binary_scalar(BinaryOp::Subtract, started, Scalar::Int(1))?
    };
    let rows = embedding_rows(cx, weight, indices, width)?; // [count, width]
    let compute = opmath(dtype);
    let mut rows = cx.convert(rows, compute)?;
    if let Some(per_sample) = per_sample {
        let per_sample = cx.convert(per_sample, compute)?;
        let per_sample = cx.broadcast_in_dim(per_sample, &[0], Shape::from_static(&[count, width]))?;
        rows = cx.binary(BinaryOp::Multiply, rows, per_sample)?;
    }
    let cube = Shape::from_static(&[bags, count, width]);
    let member_cube = cx.broadcast_in_dim(member, &[0, 1], cube.clone())?;
    let rows_cube = cx.broadcast_in_dim(rows, &[1, 2], cube.clone())?;
    let empty = cx.splat(DType::I64, Scalar::Int(0), &Shape::from_static(&[bags]))?;
    let empty = cx.compare(CompareDirection::Eq, bag_size, empty)?;
    let empty = cx.broadcast_in_dim(empty, &[0], Shape::from_static(&[bags, width]))?;
    let zeros = cx.splat(compute, Scalar::Int(0), &Shape::from_static(&[bags, width]))?;
    let mut max_indices = cx.splat(DType::I64, Scalar::Int(0), &Shape::from_static(&[bags, width]))?;
    let output = if mode == 2 {
        let lowest = cx.splat(compute, ReduceKind::Max.identity(compute), &cube)?;
        let candidates = cx.select(member_cube, rows_cube, lowest)?;
        let best = cx.reduce(candidates, ReduceKind::Max, &[1])?;
        // The weight row of the first member holding the maximum.
        let best_cube = cx.broadcast_in_dim(best, &[0, 2], cube.clone())?;
        let hit = cx.compare(CompareDirection::Eq, candidates, best_cube)?;
        let hit = cx.binary(BinaryOp::And, hit, member_cube)?;
        let rows_of = cx.broadcast_in_dim(indices, &[1], cube.clone())?;
        let beyond = cx.splat(DType::I64, Scalar::Int(i64::MAX), &cube)?;
        let first = cx.select(hit, rows_of, beyond)?;
        let first = cx.reduce(first, ReduceKind::Min, &[1])?;
        let none = cx.splat(DType::I64, Scalar::Int(0), &Shape::from_static(&[bags, width]))?;
        max_indices = cx.select(empty, none, first)?;
        cx.select(empty, zeros, best)?
    } else {
        let nothing = cx.splat(compute, Scalar::Int(0), &cube)?;
        let chosen = cx.select(member_cube, rows_cube, nothing)?;
        let total = cx.reduce(chosen, ReduceKind::Sum, &[1])?;
        if mode == 1 {
            let sizes = cx.convert(bag_size, compute)?;
            let one = cx.splat_like(sizes, Scalar::Int(1))?;
            let sizes = cx.binary(BinaryOp::Maximum, sizes, one)?;
            let sizes = cx.broadcast_in_dim(sizes, &[0], Shape::from_static(&[bags, width]))?;
            cx.binary(BinaryOp::Divide, total, sizes)?
        } else {
            total
        }
    };
    let output = cx.convert(output, dtype)?;
    // The other results are PyTorch's CPU kernel's, which its backward reads: a sum leaves the
    // bag of each index uncomputed (empty) on its fast path (no padding index, a float, half or
    // bfloat16 table), and reports zero bag sizes and maximum positions, one per bag; a mean
    // reports its bag sizes in both.
    let per_bag = Shape::from_static(&[bags]);
    let (offset2bag, bag_size, max_indices) = match mode {
        0 => {
            let fast = padding_idx < 0 && matches!(dtype, DType::F32 | DType::F16 | DType::BF16);
            let offset2bag =
                if fast { cx.splat(DType::I64, Scalar::Int(0), &Shape::from_static(&[0]))? } else { offset2bag };
            let zeros = cx.splat(DType::I64, Scalar::Int(0), &per_bag)?;
            (offset2bag, zeros, zeros)
        }
        1 => (offset2bag, bag_size, bag_size),
        _ => (offset2bag, bag_size, max_indices),
    };
    Ok(Imported::Tuple(vec![
        Imported::Tensor(output),
        Imported::Tensor(offset2bag),
        Imported::Tensor(bag_size),
        Imported::Tensor(max_indices),
    ]))
}

/// Rows of `weight` at the 1-D `indices`: `[n, width]`.
fn embedding_rows(cx: &mut Cx<'_>, weight: ValueId, indices: ValueId, width: i64) -> Result<ValueId> {
    let dims = GatherDims {
        offset_dims: [1].into_iter().collect(),
        collapsed_slice_dims: [0].into_iter().collect(),
        operand_batching_dims: SmallVec::new(),
        start_indices_batching_dims: SmallVec::new(),
        start_index_map: [0].into_iter().collect(),
        index_vector_dim: 1,
        slice_sizes: [1, width].into_iter().collect(),
        indices_are_sorted: false,
    };
    let built = cx.b.gather(weight, indices, dims);
    cx.ok(built)
}

/// `_native_batch_norm_legit(input, weight, bias, running_mean, running_var, training, momentum,
/// eps)` and its `.no_stats` overload → (out, save_mean, save_invstd). In training the batch's
/// own statistics normalise (biased variance over every dim but 1); the running statistics'
/// update is a mutation the functional graph carries separately. Outside training it is
/// `_native_batch_norm_legit_no_training`.
pub(super) fn batch_norm_legit(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let training = args.bool_or("training", false)?;
    if !training {
        if !args.has_param("running_mean") {
            return Err(cx.bad("batch norm without running statistics needs training=True"));
        }
        return batch_norm_inference(cx, args);
    }
    let (out, mean, invstd, _) = batch_norm_training(cx, args)?;
    let stats = batch_norm_stats_dtype(cx, args)?;
    let (mean, invstd) = (cx.convert(mean, stats)?, cx.convert(invstd, stats)?);
    Ok(Imported::Tuple(vec![Imported::Tensor(out), Imported::Tensor(mean), Imported::Tensor(invstd)]))
}

/// `_native_batch_norm_legit_functional(input, weight, bias, running_mean, running_var, training,
/// momentum, eps)` → (out, save_mean, save_invstd, new_running_mean, new_running_var): training-mode
/// BatchNorm as a joint graph exports it. In training the batch's statistics normalise and the
/// running statistics move toward them by `momentum`, the variance unbiased (`n / (n - 1)`), as
/// PyTorch updates them; outside training the running statistics normalise and come back
/// unchanged, with empty saved statistics.
pub(super) fn batch_norm_functional(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (running_mean, running_var) = (args.tensor("running_mean")?, args.tensor("running_var")?);
    if !args.bool_or("training", false)? {
        // (out, empty, empty) from inference, then the running statistics unchanged.
        let Imported::Tuple(mut results) = batch_norm_inference(cx, args)? else {
            return Err(cx.bad("batch norm in eval mode gave no results"));
        };
        results.extend([Imported::Tensor(running_mean), Imported::Tensor(running_var)]);
        return Ok(Imported::Tuple(results));
    }
    batch_norm_update(cx, args)
}

/// Training-mode BatchNorm that moves the running statistics: (out, save_mean, save_invstd,
/// new_running_mean, new_running_var), for `_native_batch_norm_legit_functional` in training and
/// `_batch_norm_with_update_functional`.
pub(super) fn batch_norm_update(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (running_mean, running_var) = (args.tensor("running_mean")?, args.tensor("running_var")?);
    let momentum = args.scalar("momentum")?.as_f64();
    let (out, mean, invstd, var) = batch_norm_training(cx, args)?;
    let x = args.tensor("input")?;
    let n: i64 = (0..cx.rank(x))
        .filter(|&dim| dim != 1)
        .map(|dim| cx.static_dim(x, dim, "batch norm"))
        .product::<Result<i64>>()?;
    let compute = cx.dtype(mean);
    // running = (1 - momentum) * running + momentum * batch, in the running statistics' dtype
    // after computing in opmath.
    let update = |cx: &mut Cx<'_>, running: ValueId, batch: ValueId| -> Result<ValueId> {
        let dtype = cx.dtype(running);
        let old = cx.convert(running, compute)?;
        let kept = cx.binary_scalar(BinaryOp::Multiply, old, Scalar::Float(1.0 - momentum))?;
        let moved = cx.binary_scalar(BinaryOp::Multiply, batch, Scalar::Float(momentum))?;
        let sum = cx.binary(BinaryOp::Add, kept, moved)?;
        cx.convert(sum, dtype)
    };
    let new_mean = update(cx, running_mean, mean)?;
    // Bessel's correction; a batch of one element gives inf/NaN as in PyTorch.
    let unbiased = cx.binary_scalar(BinaryOp::Multiply, var, Scalar::Float(n as f64))?;
    let unbiased = cx.binary_scalar(BinaryOp::Divide, unbiased, Scalar::Float((n - 1) as f64))?;
    let new_var = update(cx, running_var, unbiased)?;
    let stats = batch_norm_stats_dtype(cx, args)?;
    let (mean, invstd) = (cx.convert(mean, stats)?, cx.convert(invstd, stats)?);
    Ok(Imported::Tuple(vec![
        Imported::Tensor(out),
        Imported::Tensor(mean),
        Imported::Tensor(invstd),
        Imported::Tensor(new_mean),
        Imported::Tensor(new_var),
    ]))
}

/// The dtype of batch norm's saved mean and invstd on the CPU: opmath when a reduced-precision input
/// meets parameters or running statistics of another dtype (PyTorch's "mixed type" kernels), else
/// the input's own (a half input with half parameters saves half statistics).
fn batch_norm_stats_dtype(cx: &Cx<'_>, args: &Args) -> Result<DType> {
    let dtype = cx.dtype(args.tensor("input")?);
    let mut mixed = false;
    for name in ["weight", "bias", "running_mean", "running_var"] {
        if args.has_param(name)
            && let Some(param) = args.opt_tensor(name)?
        {
            mixed |= cx.dtype(param) != dtype;
        }
    }
    Ok(if mixed { opmath(dtype) } else { dtype })
}

/// Training-mode BatchNorm from the batch's own statistics: (out, mean, invstd, biased var), the
/// statistics in opmath.
fn batch_norm_training(cx: &mut Cx<'_>, args: &Args) -> Result<(ValueId, ValueId, ValueId, ValueId)> {
    let x = args.tensor("input")?;
    let (weight, bias) = (args.opt_tensor("weight")?, args.opt_tensor("bias")?);
    let eps = args.scalar("eps")?;
    let dtype = cx.dtype(x);
    let rank = cx.rank(x);
    if !dtype.is_float() || rank < 2 {
        return Err(cx.bad(format!("batch norm needs a floating-point input of rank 2 or more, found {}", cx.ty(x))));
    }
    let shape = cx.shape(x);
    let compute = opmath(dtype);
    let dims: Vec<usize> = (0..rank).filter(|&dim| dim != 1).collect();
    let n: i64 = dims.iter().map(|&dim| cx.static_dim(x, dim, "batch norm")).product::<Result<i64>>()?;
    let xc = cx.convert(x, compute)?;
    let total = cx.reduce(xc, ReduceKind::Sum, &dims)?;
    let mean = cx.binary_scalar(BinaryOp::Divide, total, Scalar::Int(n))?;
    let mean_wide = cx.broadcast_in_dim(mean, &[1], shape.clone())?;
    let centered = cx.binary(BinaryOp::Subtract, xc, mean_wide)?;
    let squared = cx.binary(BinaryOp::Multiply, centered, centered)?;
    let var = cx.reduce(squared, ReduceKind::Sum, &dims)?;
    let var = cx.binary_scalar(BinaryOp::Divide, var, Scalar::Int(n))?;
    let shifted = cx.binary_scalar(BinaryOp::Add, var, eps)?;
    let invstd = cx.unary(UnaryOp::Rsqrt, shifted)?;
    let invstd_wide = cx.broadcast_in_dim(invstd, &[1], shape.clone())?;
    let mut out = cx.binary(BinaryOp::Multiply, centered, invstd_wide)?;
    for (param, op) in [(weight, BinaryOp::Multiply), (bias, BinaryOp::Add)] {
        if let Some(param) = param {
            let param = cx.convert(param, compute)?;
            let param = cx.broadcast_in_dim(param, &[1], shape.clone())?;
            out = cx.binary(op, out, param)?;
        }
    }
    let out = cx.convert(out, dtype)?;
    Ok((out, mean, invstd, var))
}

/// `|a - b|` reduced to the p-norm over the last dim of `diff` (`p` 0: nonzero count, inf: max).
pub(super) fn p_norm_last(cx: &mut Cx<'_>, diff: ValueId, p: f64) -> Result<ValueId> {
    let last = cx.rank(diff) - 1;
    let magnitude = cx.unary(UnaryOp::Abs, diff)?;
    if p == 0.0 {
        let zero = cx.splat_like(diff, Scalar::Int(0))?;
        let nonzero = cx.compare(CompareDirection::Ne, diff, zero)?;
        let nonzero = cx.convert(nonzero, cx.dtype(diff))?;
        return cx.reduce(nonzero, ReduceKind::Sum, &[last]);
    }
    if p == f64::INFINITY {
        return cx.reduce(magnitude, ReduceKind::Max, &[last]);
    }
    if p == 1.0 {
        return cx.reduce(magnitude, ReduceKind::Sum, &[last]);
    }
    if p == 2.0 {
        let squared = cx.binary(BinaryOp::Multiply, diff, diff)?;
        let total = cx.reduce(squared, ReduceKind::Sum, &[last])?;
        return cx.unary(UnaryOp::Sqrt, total);
    }
    let powered = cx.binary_scalar(BinaryOp::Power, magnitude, Scalar::Float(p))?;
    let total = cx.reduce(powered, ReduceKind::Sum, &[last])?;
    cx.binary_scalar(BinaryOp::Power, total, Scalar::Float(1.0 / p))
}

/// `_cdist_forward(x1, x2, p, compute_mode)`: p-norm distances between the rows of `x1`
/// `[.., P, M]` and `x2` `[.., R, M]`, computed directly (PyTorch may use a matmul expansion for
/// p = 2 on more than 25 rows, which rounds differently).
pub(super) fn cdist(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (x1, x2) = (args.tensor("x1")?, args.tensor("x2")?);
    let p = args.scalar("p")?.as_f64();
    let (diff, dtype) = pairwise_differences(cx, x1, x2, p)?;
    let distance = p_norm_last(cx, diff, p)?;
    tensor(cx.convert(distance, dtype)?)
}

/// `x1[..., i, :] - x2[..., j, :]` for every pair, `[batch..., P, R, M]` in opmath (batch dims
/// broadcast, the side with fewer getting leading dims of size one), and the operands' dtype.
fn pairwise_differences(cx: &mut Cx<'_>, mut x1: ValueId, mut x2: ValueId, p: f64) -> Result<(ValueId, DType)> {
    let dtype = cx.dtype(x1);
    if !dtype.is_float() || cx.dtype(x2) != dtype || cx.rank(x1) < 2 || cx.rank(x2) < 2 || p.is_nan() || p < 0.0 {
        return Err(cx.bad(format!("cannot take distances between {} and {}", cx.ty(x1), cx.ty(x2))));
    }
    let rank = cx.rank(x1).max(cx.rank(x2));
    for side in [&mut x1, &mut x2] {
        let dims = cx.static_dims(*side, "cdist")?;
        let padded: Vec<i64> = std::iter::repeat_n(1, rank - dims.len()).chain(dims.iter().copied()).collect();
        *side = cx.reshape(*side, Shape::from_static(&padded))?;
    }
    let (s1, s2) = (cx.static_dims(x1, "cdist")?, cx.static_dims(x2, "cdist")?);
    if s1[rank - 1] != s2[rank - 1] {
        return Err(cx.bad(format!("cannot take distances between {} and {}", cx.ty(x1), cx.ty(x2))));
    }
    let batch = cx.broadcast_shape(&[Shape::from_static(&s1[..rank - 2]), Shape::from_static(&s2[..rank - 2])])?;
    let batch = batch.as_static().expect("static shapes broadcast to a static shape");
    let (rows, cols, width) = (s1[rank - 2], s2[rank - 2], s1[rank - 1]);
    let cube: Vec<i64> = batch.iter().copied().chain([rows, cols, width]).collect();
    let cube = Shape::from_static(&cube);
    let lead: Vec<i64> = (0..rank as i64 - 2).collect();
    let compute = opmath(dtype);
    let a = cx.convert(x1, compute)?;
    let b = cx.convert(x2, compute)?;
    let a_dims: Vec<i64> = lead.iter().copied().chain([rank as i64 - 2, rank as i64]).collect();
    let b_dims: Vec<i64> = lead.iter().copied().chain([rank as i64 - 1, rank as i64]).collect();
    // Size-1 batch dims of either side broadcast through `broadcast_in_dim`.
    let a = cx.broadcast_in_dim(a, &a_dims, cube.clone())?;
    let b = cx.broadcast_in_dim(b, &b_dims, cube)?;
    Ok((cx.binary(BinaryOp::Subtract, a, b)?, dtype))
}

/// `_cdist_backward(grad, x1, x2, p, cdist)`: the gradient of `x1` (over the broadcast batch),
/// PyTorch's per-pair terms (`pair_gradient_terms`) summed over the rows of `x2`.
pub(super) fn cdist_backward(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (grad, x1, x2, dist) = (args.tensor("grad")?, args.tensor("x1")?, args.tensor("x2")?, args.tensor("cdist")?);
    let p = args.scalar("p")?.as_f64();
    let (diff, dtype) = pairwise_differences(cx, x1, x2, p)?;
    let cube = cx.shape(diff);
    let rank = cx.rank(diff);
    let pairs: Vec<i64> = cube.as_static().expect("static differences")[..rank - 1].to_vec();
    for (what, value) in [("grad", grad), ("cdist", dist)] {
        if cx.shape(value).as_static().as_deref() != Some(&pairs[..]) {
            return Err(cx.bad(format!("{what} {} does not match the distances {pairs:?}", cx.ty(value))));
        }
    }
    let compute = cx.dtype(diff);
    let spread: Vec<i64> = (0..rank as i64 - 1).collect();
    let (g, d) = (cx.convert(grad, compute)?, cx.convert(dist, compute)?);
    let (g, d) = (cx.broadcast_in_dim(g, &spread, cube.clone())?, cx.broadcast_in_dim(d, &spread, cube)?);
    let term = pair_gradient_terms(cx, diff, g, d, p)?;
    let summed = cx.reduce(term, ReduceKind::Sum, &[rank - 2])?;
    tensor(cx.convert(summed, dtype)?)
}

/// PyTorch's gradient term of one pair of rows for `x1`'s row, elementwise over the pair's
/// difference `diff` (in op math), with the pair's incoming gradient `g` and distance `d`
/// broadcast to it: 0 for `p = 0`; `g * sign(diff)` for `p = 1`; `g * sign(diff) * (|diff| ==
/// d)` for `p = inf`; otherwise `diff * |diff|^(p-2) * g / d^(p-1)` (`g * diff / d` at 2,
/// `sign(diff) * |diff|^(p-1) * ...` below 2), 0 where the distance is 0 and, below 1, where
/// `diff` is. Shared by `_cdist_backward` and `_pdist_backward`, as PyTorch's kernels share it.
fn pair_gradient_terms(cx: &mut Cx<'_>, diff: ValueId, g: ValueId, d: ValueId, p: f64) -> Result<ValueId> {
    let compute = cx.dtype(diff);
    let cube = cx.shape(diff);
    let zero = cx.splat(compute, Scalar::Int(0), &cube)?;
    let sign = cx.unary(UnaryOp::Sign, diff)?;
    let magnitude = cx.unary(UnaryOp::Abs, diff)?;
    let signed_grad = cx.binary(BinaryOp::Multiply, g, sign)?;
    Ok(if p == 0.0 {
        zero
    } else if p == 1.0 {
        signed_grad
    } else if p.is_infinite() {
        let at_max = cx.compare(CompareDirection::Eq, magnitude, d)?;
        let at_max = cx.convert(at_max, compute)?;
        cx.binary(BinaryOp::Multiply, signed_grad, at_max)?
    } else {
        let numerator = if p == 2.0 {
            cx.binary(BinaryOp::Multiply, g, diff)?
        } else if p < 2.0 {
            let power = cx.binary_scalar(BinaryOp::Power, magnitude, Scalar::Float(p - 1.0))?;
            cx.binary(BinaryOp::Multiply, signed_grad, power)?
        } else {
            let power = cx.binary_scalar(BinaryOp::Power, magnitude, Scalar::Float(p - 2.0))?;
            let scaled = cx.binary(BinaryOp::Multiply, diff, power)?;
            cx.binary(BinaryOp::Multiply, scaled, g)?
        };
        let denominator = if p == 2.0 { d } else { cx.binary_scalar(BinaryOp::Power, d, Scalar::Float(p - 1.0))? };
        let quotient = cx.binary(BinaryOp::Divide, numerator, denominator)?;
        let mut vanishes = cx.compare(CompareDirection::Eq, d, zero)?;
        if p < 1.0 {
            let flat = cx.compare(CompareDirection::Eq, diff, zero)?;
            vanishes = cx.binary(BinaryOp::Or, vanishes, flat)?;
        }
        cx.select(vanishes, zero, quotient)?
    })
}

/// `_pdist_forward(self, p)`: distances between every pair `i < j` of rows, row-major.
pub(super) fn pdist(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let p = args.scalar_or("p", Scalar::Float(2.0))?.as_f64();
    let dtype = cx.dtype(x);
    if !dtype.is_float() || cx.rank(x) != 2 || p < 0.0 {
        return Err(cx.bad(format!("pdist needs a float matrix, found {}", cx.ty(x))));
    }
    let n = cx.static_dim(x, 0, "pdist")?;
    cx.table(&[n, n], "pdist")?;
    let (mut first, mut second) = (vec![], vec![]);
    for i in 0..n {
        for j in i + 1..n {
            first.push(Scalar::Int(i));
            second.push(Scalar::Int(j));
        }
    }
    let pairs = first.len() as i64;
    let compute = opmath(dtype);
    let xc = cx.convert(x, compute)?;
    let mut sides = vec![];
    for rows in [first, second] {
        let rows = cx.literal(Literal::from_scalars(DType::I64, &[pairs], &rows).expect("one row per pair"));
        sides.push(super::layout::gather_dim(cx, xc, 0, rows)?);
    }
    let diff = cx.binary(BinaryOp::Subtract, sides[0], sides[1])?;
    let distance = p_norm_last(cx, diff, p)?;
    tensor(cx.convert(distance, dtype)?)
}

/// `_pdist_backward(grad, self, p, pdist)`: the gradient of `self`'s rows from the gradient of
/// every pair `i < j` (row-major, as `_pdist_forward` lists them). Row `i` gets the pair term of
/// `x_i - x_j` for every other row `j` (`pair_gradient_terms`, odd in the difference, so pair
/// `(j, i)` contributes to `x_i` what PyTorch's kernel subtracts); the pairs are spread over a
/// square of rows, the diagonal left out.
pub(super) fn pdist_backward(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (grad, x, dist) = (args.tensor("grad")?, args.tensor("self")?, args.tensor("pdist")?);
    let p = args.scalar("p")?.as_f64();
    let dtype = cx.dtype(x);
    if !dtype.is_float() || cx.rank(x) != 2 || p.is_nan() || p < 0.0 {
        return Err(cx.bad(format!("_pdist_backward needs a float matrix and p >= 0, found {}", cx.ty(x))));
    }
    let n = cx.static_dim(x, 0, "_pdist_backward")?;
    cx.table(&[n, n], "_pdist_backward")?;
    let pairs = n * (n - 1) / 2;
    for (what, value) in [("grad", grad), ("pdist", dist)] {
        if cx.shape(value).as_static().as_deref() != Some(&[pairs][..]) || cx.dtype(value) != dtype {
            return Err(cx.bad(format!(
                "{what} {} does not match the {pairs} distances of {}",
                cx.ty(value),
                cx.ty(x)
            )));
        }
    }
    if pairs == 0 {
        return tensor(cx.splat_like(x, Scalar::Int(0))?);
    }
    // The pair of rows (i, j) and (j, i) is number i*(2n-i-1)/2 + (j-i-1) for i < j.
    let index = |i: i64, j: i64| {
        let (i, j) = (i.min(j), i.max(j));
        i * (2 * n - i - 1) / 2 + (j - i - 1)
    };
    let table: Vec<Scalar> =
        (0..n).flat_map(|i| (0..n).map(move |j| Scalar::Int(if i == j { 0 } else { index(i, j) }))).collect();
    let table = cx.literal(Literal::from_scalars(DType::I64, &[n * n], &table).expect("one entry per pair of rows"));
    let (diff, _) = pairwise_differences(cx, x, x, p)?;
    let compute = cx.dtype(diff);
    let cube = cx.shape(diff);
    let square = Shape::from_static(&[n, n]);
    let off_diagonal = {
        let rows = super::index::iota(cx, &square, 0)?;
        let cols = super::index::iota(cx, &square, 1)?;
        cx.compare(CompareDirection::Ne, rows, cols)?
    };
    let zero = cx.splat(compute, Scalar::Int(0), &square)?;
    let mut spread = Vec::with_capacity(2);
    for value in [grad, dist] {
        let value = cx.convert(value, compute)?;
        let value = super::layout::gather_dim(cx, value, 0, table)?;
        let value = cx.reshape(value, square.clone())?;
        // The diagonal is no pair: no gradient and a zero distance, so its term vanishes.
        let value = cx.select(off_diagonal, value, zero)?;
        spread.push(cx.broadcast_in_dim(value, &[0, 1], cube.clone())?);
    }
    let term = pair_gradient_terms(cx, diff, spread[0], spread[1], p)?;
    let summed = cx.reduce(term, ReduceKind::Sum, &[1])?;
    tensor(cx.convert(summed, dtype)?)
}

/// Stride, padding, dilation, output padding, groups and direction of a convolution.
pub(super) struct ConvGeometry {
    pub stride: SmallVec<[i64; 3]>,
    pub padding: SmallVec<[i64; 3]>,
    pub dilation: SmallVec<[i64; 3]>,
    pub output_padding: SmallVec<[i64; 3]>,
    pub groups: i64,
    pub transposed: bool,
}

/// The convolution of `xc` with `kernel` (PyTorch layouts, one dtype), without bias.
pub(super) fn conv_core(cx: &mut Cx<'_>, xc: ValueId, mut kernel: ValueId, geometry: &ConvGeometry) -> Result<ValueId> {
    let ConvGeometry { stride, padding, dilation, output_padding, groups, transposed } = geometry;
    let (groups, transposed) = (*groups, *transposed);
    let w = kernel;
    let spatial = cx.rank(kernel) - 2;
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
        rhs_dilation: dilation.clone(),
        feature_group_count: groups,
        batch_group_count: 1,
    };
    let built = cx.b.convolution(xc, kernel, dims);
    cx.ok(built)
}

/// `conv_tbc(self, weight, bias, pad)`: a 1-d convolution over time-batch-channel input
/// `[T, B, C_in]` with a `[K, C_in, C_out]` kernel, zero padding `pad` on both ends of time, plus
/// `bias[C_out]`; the result is `[T + 2 pad - K + 1, B, C_out]`. StableHLO's convolution reads
/// these layouts directly through its dimension numbers.
pub(super) fn conv_tbc(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (x, weight, bias) = (args.tensor("self")?, args.tensor("weight")?, args.tensor("bias")?);
    let pad = args.int_or("pad", 0)?;
    let (xt, wt, bt) = (cx.ty(x), cx.ty(weight), cx.ty(bias));
    if xt.rank() != 3 {
        return Err(cx.bad(format!("Input must have 3 dims: time, batch, in_channel; found {xt}")));
    }
    if wt.rank() != 3 {
        return Err(
            cx.bad(format!("Weight tensor must have 3 dims: kernel_width, in_channels, out_channels; found {wt}"))
        );
    }
    if bt.rank() != 1 {
        return Err(cx.bad(format!("Bias must be 1-D, found {bt}")));
    }
    if !xt.dtype.is_float() || wt.dtype != xt.dtype || bt.dtype != xt.dtype {
        return Err(cx.bad(format!("conv_tbc needs floating-point tensors of one dtype, found {xt}, {wt}, {bt}")));
    }
    if pad < 0 {
        return Err(cx.bad(format!("pad must be non-negative, found {pad}")));
    }
    let c_in = cx.static_dim(x, 2, "the input channels")?;
    let [k, w_in, c_out] = [0, 1, 2].map(|dim| cx.static_dim(weight, dim, "the weight"));
    let (k, w_in, c_out) = (k?, w_in?, c_out?);
    if c_in != w_in {
        return Err(
            cx.bad(format!("Input dim 2 (input channels) is not == dim 1 in the weight tensor ({c_in} vs {w_in})"))
        );
    }
    if cx.static_dim(bias, 0, "the bias")? != c_out {
        return Err(cx.bad(format!("Bias size must equal dim 2 in the weight tensor (output channels, {c_out})")));
    }
    // The padded time must hold the kernel, as PyTorch's output size requires.
    let time = cx.static_dim(x, 0, "the time dim")?;
    let padded = pad.checked_mul(2).and_then(|twice| twice.checked_add(time));
    if padded.is_none_or(|padded| padded < k) {
        return Err(cx.bad(format!("the kernel width {k} exceeds the padded time {time} + 2 * {pad}")));
    }
    let dims = ConvDims {
        input_batch: 1,
        input_feature: 2,
        input_spatial: SmallVec::from_slice(&[0]),
        kernel_input_feature: 1,
        kernel_output_feature: 2,
        kernel_spatial: SmallVec::from_slice(&[0]),
        output_batch: 1,
        output_feature: 2,
        output_spatial: SmallVec::from_slice(&[0]),
        window_strides: SmallVec::from_slice(&[1]),
        padding: SmallVec::from_slice(&[(pad, pad)]),
        lhs_dilation: SmallVec::from_slice(&[1]),
        rhs_dilation: SmallVec::from_slice(&[1]),
        feature_group_count: 1,
        batch_group_count: 1,
    };
    let built = cx.b.convolution(x, weight, dims);
    let out = cx.ok(built)?;
    let shape = cx.shape(out);
    let bias = cx.broadcast_in_dim(bias, &[2], shape)?;
    tensor(cx.binary(BinaryOp::Add, out, bias)?)
}

/// `_trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim)`: each input gets size-1
/// dims inserted at its `expand` positions (of the `rank(i1) + len(expand1)` result dims), the
/// three are multiplied with broadcasting, and `sumdim` is summed away. `unroll_dim` only picks
/// PyTorch's loop order, so it is checked and otherwise ignored.
pub(super) fn trilinear(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let inputs = [args.tensor("i1")?, args.tensor("i2")?, args.tensor("i3")?];
    let expands = [args.ints("expand1")?, args.ints("expand2")?, args.ints("expand3")?];
    let sumdim = args.ints("sumdim")?;
    let unroll_dim = args.int_or("unroll_dim", 1)?;
    let dtype = cx.dtype(inputs[0]);
    for &input in &inputs[1..] {
        if cx.dtype(input) != dtype {
            return Err(cx.bad(format!("expected scalar type {dtype} but found {}", cx.dtype(input))));
        }
    }
    let total = cx.rank(inputs[0]) + expands[0].len();
    if unroll_dim < 0 || unroll_dim as usize >= total {
        return Err(cx.bad(format!("unroll_dim must be in [0,{}], found {unroll_dim}", total as i64 - 1)));
    }
    let mut expanded = Vec::with_capacity(3);
    for (index, (&input, expand)) in inputs.iter().zip(&expands).enumerate() {
        let rank = cx.rank(input);
        if rank + expand.len() != total {
            return Err(cx.bad(format!(
                "input {} of rank {rank} with {} expanded dims does not make {total} dims",
                index + 1,
                expand.len()
            )));
        }
        let positions = cx.norm_dims(expand, total)?;
        let shape = cx.shape(input);
        let mut sizes = shape.dims().iter().cloned();
        let dims: Vec<ttpu_ir::Dim> = (0..total)
            .map(|dim| if positions.contains(&dim) { ttpu_ir::Dim::Static(1) } else { sizes.next().expect("counted") })
            .collect();
        expanded.push(cx.reshape(input, dims.into_iter().collect())?);
    }
    let shape = {
        let shapes: Vec<Shape> = expanded.iter().map(|&value| cx.shape(value)).collect();
        cx.broadcast_shape(&shapes)?
    };
    let math = opmath(dtype);
    let mut product = None;
    for value in expanded {
        let value = cx.broadcast_to(value, &shape)?;
        let value = cx.convert(value, math)?;
        product = Some(match product {
            None => value,
            Some(acc) => cx.binary(BinaryOp::Multiply, acc, value)?,
        });
    }
    let product = product.expect("three inputs");
    let summed = cx.norm_dims(&sumdim, total)?;
    let result = if summed.is_empty() { product } else { cx.reduce(product, ReduceKind::Sum, &summed)? };
    tensor(cx.convert(result, dtype)?)
}
