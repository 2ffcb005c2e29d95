//! PyTorch's chunked linear cross entropy (`torch.nn.functional.linear_cross_entropy` with
//! `options`): the custom ops `torch_nn._linear_cross_entropy_batch_chunked` (a mean or sum, and
//! the gradients it precomputes for the backward pass when asked) and
//! `torch_nn._linear_cross_entropy_batch_chunked_no_reduction` (one loss per row).
//!
//! Chunking only bounds PyTorch's memory; the values are those of the plain formula, computed
//! here at once in the accumulation dtype: `logits = input W^T + b`, `loss_n = -w[t_n] logp[n, t_n]`
//! (rows whose target is `ignore_index` contribute nothing, and a mean divides by the weights of
//! the others), or for a probability target `loss_n = -sum_c w_c p[n, c] logp[n, c]` (a mean
//! divides by the rows). The gradients are those of the reduced loss: `dlogits = (softmax -
//! target) * weights / denominator`, then `dlogits W`, `dlogits^T input` and the column sums.

use ttpu_ir::{BinaryOp, CompareDirection, DType, DotDims, Literal, ReduceKind, Scalar, Shape, UnaryOp, ValueId};

use super::index::take_along;
use crate::args::Args;
use crate::ctx::{Cx, Imported, opmath};
use crate::error::Result;

/// The parts of one call, in the accumulation dtype.
struct Problem {
    input: ValueId,
    weight_matrix: ValueId,
    /// `-logp` of each row's target (0 for ignored rows), `[n]`.
    losses: ValueId,
    /// The softmax minus the target distribution, each row scaled by its weight (0 for ignored
    /// rows): the gradient of the summed loss, `[n, c]`.
    residual: ValueId,
    /// What a mean divides by.
    denominator: ValueId,
    dtype: DType,
}

fn problem(cx: &mut Cx<'_>, args: &Args) -> Result<Problem> {
    let input = args.tensor("input")?;
    let weight_matrix = args.tensor("linear_weight")?;
    let target = args.tensor("target")?;
    let dtype = cx.dtype(input);
    let compute = match args.opt_dtype("acc_dtype")? {
        Some(acc) if acc.is_float() => acc,
        _ => opmath(dtype),
    };
    if cx.rank(input) != 2 || cx.rank(weight_matrix) != 2 || !dtype.is_float() {
        return Err(cx.bad(format!(
            "expects a float (batch, features) input and a (classes, features) weight, found {} and {}",
            cx.ty(input),
            cx.ty(weight_matrix)
        )));
    }
    let n = cx.static_dim(input, 0, "linear_cross_entropy")?;
    let classes = cx.static_dim(weight_matrix, 0, "linear_cross_entropy")?;
    let x = cx.convert(input, compute)?;
    let w = cx.convert(weight_matrix, compute)?;
    let dims = DotDims {
        lhs_contracting: [1].into_iter().collect(),
        rhs_contracting: [1].into_iter().collect(),
        ..DotDims::default()
    };
    let mut logits = cx.dot_general(x, w, dims)?;
    let shape = Shape::from_static(&[n, classes]);
    if let Some(bias) = args.opt_tensor("linear_bias")? {
        let bias = cx.convert(bias, compute)?;
        let bias = cx.broadcast_in_dim(bias, &[1], shape.clone())?;
        logits = cx.binary(BinaryOp::Add, logits, bias)?;
    }
    // log-softmax over the classes, with its maximum taken out.
    let largest = cx.reduce(logits, ReduceKind::Max, &[1])?;
    let largest = cx.broadcast_in_dim(largest, &[0], shape.clone())?;
    let shifted = cx.binary(BinaryOp::Subtract, logits, largest)?;
    let exps = cx.unary(UnaryOp::Exponential, shifted)?;
    let total = cx.reduce(exps, ReduceKind::Sum, &[1])?;
    let log_total = cx.unary(UnaryOp::Log, total)?;
    let log_total = cx.broadcast_in_dim(log_total, &[0], shape.clone())?;
    let log_probs = cx.binary(BinaryOp::Subtract, shifted, log_total)?;
    let probs = cx.unary(UnaryOp::Exponential, log_probs)?;
    let class_weights = match args.opt_tensor("weight")? {
        Some(weights) => cx.convert(weights, compute)?,
        None => cx.splat(compute, Scalar::Float(1.0), &Shape::from_static(&[classes]))?,
    };
    let zero_rows = cx.splat(compute, Scalar::Float(0.0), &Shape::from_static(&[n]))?;
    let (losses, residual, denominator) = if cx.dtype(target).is_float() {
        // Probability targets.
        let p = cx.convert(target, compute)?;
        let weights = cx.broadcast_in_dim(class_weights, &[1], shape.clone())?;
        let weighted = cx.binary(BinaryOp::Multiply, p, weights)?;
        let products = cx.binary(BinaryOp::Multiply, weighted, log_probs)?;
        let losses = cx.reduce(products, ReduceKind::Sum, &[1])?;
        let losses = cx.unary(UnaryOp::Negate, losses)?;
        // d/dlogits of -sum_c w_c p_c logp_c: softmax * sum_c(w_c p_c) - w p.
        let mass = cx.reduce(weighted, ReduceKind::Sum, &[1])?;
        let mass = cx.broadcast_in_dim(mass, &[0], shape.clone())?;
        let scaled = cx.binary(BinaryOp::Multiply, probs, mass)?;
        let residual = cx.binary(BinaryOp::Subtract, scaled, weighted)?;
        (losses, residual, cx.scalar(compute, Scalar::Int(n)))
    } else {
        let ignore = args.int_or("ignore_index", -100)?;
        let target = cx.convert(target, DType::I64)?;
        let ignored = cx.binary_scalar(BinaryOp::Subtract, target, Scalar::Int(ignore))?;
        let zero = cx.splat(DType::I64, Scalar::Int(0), &Shape::from_static(&[n]))?;
        let counted = cx.compare(CompareDirection::Ne, ignored, zero)?;
        let safe = cx.select(counted, target, zero)?;
        let column = cx.reshape(safe, Shape::from_static(&[n, 1]))?;
        let picked = take_along(cx, log_probs, 1, column)?;
        let picked = cx.reshape(picked, Shape::from_static(&[n]))?;
        let class_column = cx.reshape(class_weights, Shape::from_static(&[classes, 1]))?;
        let row_weights = take_along(cx, class_column, 0, column)?;
        let row_weights = cx.reshape(row_weights, Shape::from_static(&[n]))?;
        let row_weights = cx.select(counted, row_weights, zero_rows)?;
        let weighted = cx.binary(BinaryOp::Multiply, picked, row_weights)?;
        let losses = cx.unary(UnaryOp::Negate, weighted)?;
        let built = cx.b.iota(ttpu_ir::TensorType::new(DType::I64, shape.clone()), 1);
        let classes_iota = cx.ok(built)?;
        let wide_target = cx.broadcast_in_dim(safe, &[0], shape.clone())?;
        let hit = cx.compare(CompareDirection::Eq, classes_iota, wide_target)?;
        let one_hot = cx.convert(hit, compute)?;
        let difference = cx.binary(BinaryOp::Subtract, probs, one_hot)?;
        let row_weights_wide = cx.broadcast_in_dim(row_weights, &[0], shape.clone())?;
        let residual = cx.binary(BinaryOp::Multiply, difference, row_weights_wide)?;
        let denominator = cx.reduce(row_weights, ReduceKind::Sum, &[0])?;
        (losses, residual, denominator)
    };
    Ok(Problem { input: x, weight_matrix: w, losses, residual, denominator, dtype })
}

/// `torch_nn._linear_cross_entropy_batch_chunked(...)` → (loss, grad_input, grad_linear_weight,
/// grad_linear_bias); a gradient not asked for is an empty tensor, as PyTorch returns it.
pub(super) fn batch_chunked(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    if args.scalar_or("label_smoothing", Scalar::Float(0.0))?.as_f64() != 0.0 {
        return Err(cx.bad("label smoothing is not on the chunked path (PyTorch falls back to the plain one)"));
    }
    let reduction = args.opt_str("reduction")?.unwrap_or("mean").to_owned();
    let p = problem(cx, args)?;
    let sum = cx.reduce(p.losses, ReduceKind::Sum, &[0])?;
    let (loss, scale) = match reduction.as_str() {
        "sum" => (sum, None),
        "mean" => (cx.binary(BinaryOp::Divide, sum, p.denominator)?, Some(p.denominator)),
        other => return Err(cx.bad(format!("reduction must be 'mean' or 'sum' here, found '{other}'"))),
    };
    let residual = match scale {
        Some(denominator) => {
            let wide = cx.broadcast_to(denominator, &cx.shape(p.residual))?;
            cx.binary(BinaryOp::Divide, p.residual, wide)?
        }
        None => p.residual,
    };
    let empty = |cx: &mut Cx<'_>, dims: &[i64]| cx.literal(Literal::splat(p.dtype, dims, Scalar::Int(0)));
    let grad_input = if args.bool_or("compute_input_grad", false)? {
        let dims = DotDims {
            lhs_contracting: [1].into_iter().collect(),
            rhs_contracting: [0].into_iter().collect(),
            ..DotDims::default()
        };
        let grad = cx.dot_general(residual, p.weight_matrix, dims)?;
        cx.convert(grad, p.dtype)?
    } else {
        empty(cx, &[0, 0])
    };
    let grad_weight = if args.bool_or("compute_linear_weight_grad", false)? {
        let dims = DotDims {
            lhs_contracting: [0].into_iter().collect(),
            rhs_contracting: [0].into_iter().collect(),
            ..DotDims::default()
        };
        let grad = cx.dot_general(residual, p.input, dims)?;
        cx.convert(grad, p.dtype)?
    } else {
        empty(cx, &[0, 0])
    };
    let grad_bias = if args.bool_or("compute_linear_bias_grad", false)? {
        let grad = cx.reduce(residual, ReduceKind::Sum, &[0])?;
        cx.convert(grad, p.dtype)?
    } else {
        empty(cx, &[0])
    };
    let loss = cx.convert(loss, p.dtype)?;
    Ok(Imported::Tuple(vec![
        Imported::Tensor(loss),
        Imported::Tensor(grad_input),
        Imported::Tensor(grad_weight),
        Imported::Tensor(grad_bias),
    ]))
}

/// `torch_nn._linear_cross_entropy_batch_chunked_no_reduction(...)`: one loss per row.
pub(super) fn batch_chunked_no_reduction(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let p = problem(cx, args)?;
    Ok(Imported::Tensor(cx.convert(p.losses, p.dtype)?))
}
