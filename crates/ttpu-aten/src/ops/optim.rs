//! What optimizers and gradient clipping call: the `_foreach_*` overloads (each element through
//! its single-tensor overload of this table), the pointwise ops they are made of (`addcmul`,
//! `addcdiv`, `lerp`, `zero`, `linalg_vector_norm`), and the fused Adam and AdamW steps.
//!
//! A foreach call is one entry here rather than a loop in a frontend, so an optimizer step over
//! N parameters is one call to build and one step to record, and each element computes exactly
//! what the single-tensor call computes.

use ttpu_ir::{BinaryOp, CompareDirection, DType, ReduceKind, Scalar, UnaryOp, ValueId};

use super::elementwise::tensor;
use crate::args::{self, Args, Val};
use crate::ctx::{Cx, Imported, Operand, opmath};
use crate::error::Result;

/// Where an element call's argument comes from.
#[derive(Copy, Clone)]
pub(super) enum From {
    /// Element `i` of this list argument.
    Each(&'static str),
    /// This argument, the same for every element.
    Whole(&'static str),
}

/// `[element(args...)[i] for i]`: the single-tensor overload `element` on each element of the
/// list arguments, with `map` giving each of its parameters' source.
pub(super) fn foreach(
    cx: &mut Cx<'_>,
    args: &Args,
    element: &'static str,
    map: &[(&'static str, From)],
) -> Result<Imported> {
    let def =
        super::lookup(element).ok_or_else(|| cx.bad(format!("its element op `{element}` is not in the table")))?;
    // The first list argument sets the count (`self`, or `exponent` where `self` is one scalar).
    let Some(lead) = map.iter().find_map(|&(_, from)| match from {
        From::Each(name) => Some(name),
        From::Whole(_) => None,
    }) else {
        return Err(cx.bad("a foreach call needs a list argument"));
    };
    let Val::List(leading) = args.get(lead) else {
        return Err(cx.bad(format!("argument `{lead}` must be a list of tensors")));
    };
    let count = leading.len();
    let mut results = Vec::with_capacity(count);
    for index in 0..count {
        let mut keywords = Vec::with_capacity(map.len());
        for &(param, from) in map {
            let value = match from {
                From::Whole(name) => args.get(name).clone(),
                From::Each(name) => match args.get(name) {
                    Val::List(items) if items.len() == count => items[index].clone(),
                    Val::List(items) => {
                        return Err(
                            cx.bad(format!("argument `{name}` has {} elements for {count} tensors", items.len()))
                        );
                    }
                    other => return Err(cx.bad(format!("argument `{name}` must be a list, found {other:?}"))),
                },
            };
            if value != Val::Missing {
                keywords.push((param.to_string(), value));
            }
        }
        let bound = args::bind(cx.site.clone(), def.params, Vec::new(), keywords)?;
        results.push((def.run)(cx, &bound)?);
    }
    Ok(Imported::Tuple(results))
}

/// `self + value * tensor1 * tensor2` (`addcmul`) or `self + value * tensor1 / tensor2`
/// (`addcdiv`), in PyTorch's CPU kernel's order: `(value * tensor1) op tensor2`, added to
/// `self`, in opmath for half types.
pub(super) fn addc(cx: &mut Cx<'_>, args: &Args, op: BinaryOp) -> Result<Imported> {
    let operands = [args.operand("self")?, args.operand("tensor1")?, args.operand("tensor2")?];
    let value = args.scalar_or("value", Scalar::Int(1))?;
    let dtype = cx.result_type(&operands);
    if op == BinaryOp::Divide && !dtype.is_float() && !dtype.is_complex() {
        return Err(cx.bad(format!(
            "integer division with addcdiv is not supported (the result would be {dtype}); use true division"
        )));
    }
    let compute = opmath(dtype);
    let [x, t1, t2] = cx.prepare(operands, compute)?;
    let scaled = cx.binary_scalar(BinaryOp::Multiply, t1, value)?;
    let combined = cx.binary(op, scaled, t2)?;
    let sum = cx.binary(BinaryOp::Add, x, combined)?;
    tensor(cx.convert(sum, dtype)?)
}

/// `lerp`: `self + weight * (end - self)` where `|weight| < 0.5`, else
/// `end - (end - self) * (1 - weight)`, as PyTorch's kernel computes it (exact at both ends).
pub(super) fn lerp(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let operands = [args.operand("self")?, args.operand("end")?, args.operand("weight")?];
    let dtype = cx.result_type(&operands[..2]);
    let compute = opmath(dtype);
    let [start, end, weight] = cx.prepare(operands, compute)?;
    let diff = cx.binary(BinaryOp::Subtract, end, start)?;
    let near = cx.binary(BinaryOp::Multiply, weight, diff)?;
    let near = cx.binary(BinaryOp::Add, start, near)?;
    let one = cx.splat_like(weight, Scalar::Float(1.0))?;
    let rest = cx.binary(BinaryOp::Subtract, one, weight)?;
    let far = cx.binary(BinaryOp::Multiply, diff, rest)?;
    let far = cx.binary(BinaryOp::Subtract, end, far)?;
    let magnitude = cx.unary(UnaryOp::Abs, weight)?;
    let half = cx.splat_like(weight, Scalar::Float(0.5))?;
    let small = cx.compare(CompareDirection::Lt, magnitude, half)?;
    let result = cx.select(small, near, far)?;
    tensor(cx.convert(result, dtype)?)
}

/// `zero`: zeros of `self`'s type.
pub(super) fn zero(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    tensor(cx.splat_like(x, Scalar::Int(0))?)
}

/// `linalg_vector_norm`: the `ord`-norm over `dim` (all dims when `None`), accumulated in opmath.
pub(super) fn vector_norm(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let ord = args.scalar_or("ord", Scalar::Int(2))?.as_f64();
    let keep = args.bool_or("keepdim", false)?;
    let rank = cx.rank(x);
    let dims = match args.opt_ints("dim")? {
        Some(dims) if !dims.is_empty() => cx.norm_dims(&dims, rank)?,
        _ => (0..rank).collect(),
    };
    let input = match args.opt_dtype("dtype")? {
        Some(dtype) => cx.convert(x, dtype)?,
        None => x,
    };
    let dtype = cx.dtype(input);
    if !dtype.is_float() {
        return Err(cx.bad(format!("expected a floating point input, found {dtype}")));
    }
    let compute = cx.convert(input, opmath(dtype))?;
    let magnitude = cx.unary(UnaryOp::Abs, compute)?;
    let result = if ord == f64::INFINITY {
        cx.reduce_keep(magnitude, ReduceKind::Max, &dims, keep)?
    } else if ord == f64::NEG_INFINITY {
        cx.reduce_keep(magnitude, ReduceKind::Min, &dims, keep)?
    } else if ord == 0.0 {
        let zero = cx.splat_like(magnitude, Scalar::Float(0.0))?;
        let nonzero = cx.compare(CompareDirection::Ne, magnitude, zero)?;
        let counted = cx.convert(nonzero, cx.dtype(magnitude))?;
        cx.reduce_keep(counted, ReduceKind::Sum, &dims, keep)?
    } else if ord == 1.0 {
        cx.reduce_keep(magnitude, ReduceKind::Sum, &dims, keep)?
    } else if ord == 2.0 {
        let squares = cx.binary(BinaryOp::Multiply, magnitude, magnitude)?;
        let sum = cx.reduce_keep(squares, ReduceKind::Sum, &dims, keep)?;
        cx.unary(UnaryOp::Sqrt, sum)?
    } else {
        let powered = cx.binary_scalar(BinaryOp::Power, magnitude, Scalar::Float(ord))?;
        let sum = cx.reduce_keep(powered, ReduceKind::Sum, &dims, keep)?;
        cx.binary_scalar(BinaryOp::Power, sum, Scalar::Float(1.0 / ord))?
    };
    tensor(cx.convert(result, dtype)?)
}

/// `_fused_adam` / `_fused_adamw`: one Adam(W) step of every parameter, as PyTorch's fused CPU
/// kernel computes it: the bias corrections from each parameter's step count in `f64`, the
/// moments and the update in the parameter's opmath. Returns the new parameters, gradients
/// (unscaled by `grad_scale` when given), first and second moments and max second moments.
pub(super) fn fused_adam(cx: &mut Cx<'_>, args: &Args, decoupled: bool) -> Result<Imported> {
    let params = args.tensors("self")?;
    let grads = args.tensors("grads")?;
    let exp_avgs = args.tensors("exp_avgs")?;
    let exp_avg_sqs = args.tensors("exp_avg_sqs")?;
    let max_exp_avg_sqs = args.tensors("max_exp_avg_sqs")?;
    let steps = args.tensors("state_steps")?;
    let amsgrad = args.bool_or("amsgrad", false)?;
    let maximize = args.bool_or("maximize", false)?;
    let count = params.len();
    if [grads.len(), exp_avgs.len(), exp_avg_sqs.len(), steps.len()].iter().any(|&len| len != count)
        || (amsgrad && max_exp_avg_sqs.len() != count)
    {
        return Err(cx.bad("the lists of parameters, gradients, moments and steps differ in length"));
    }
    let lr = args.operand("lr")?;
    let (beta1, beta2) = (args.scalar("beta1")?.as_f64(), args.scalar("beta2")?.as_f64());
    let (weight_decay, eps) = (args.scalar("weight_decay")?.as_f64(), args.scalar("eps")?.as_f64());
    // GradScaler's overflow flag: where it is exactly 1 the kernel returns before touching
    // anything, so each result falls back to its input there.
    let found_inf = if args.given("found_inf") { args.opt_tensor("found_inf")? } else { None };
    let grad_scale = args.opt_tensor("grad_scale")?;
    let mut outputs: [Vec<Imported>; 5] = Default::default();
    for index in 0..count {
        let param = params[index];
        let dtype = cx.dtype(param);
        let compute = opmath(dtype);
        let shape = cx.shape(param);
        let as_compute = |cx: &mut Cx<'_>, value: ValueId| cx.convert(value, compute);
        let mut grad = as_compute(cx, grads[index])?;
        if let Some(scale) = grad_scale {
            let scale = cx.convert(scale, compute)?;
            let scale = cx.broadcast_to(scale, &shape)?;
            grad = cx.binary(BinaryOp::Divide, grad, scale)?;
        }
        let stored_grad = cx.convert(grad, cx.dtype(grads[index]))?;
        if maximize {
            grad = cx.unary(UnaryOp::Negate, grad)?;
        }
        let mut value = as_compute(cx, param)?;
        // The step's scalars, in f64 as the kernel computes them, rounded where they meet a tensor.
        let step = cx.convert(steps[index], DType::F64)?;
        let step = cx.reshape(step, ttpu_ir::Shape::scalar())?;
        let lr = match lr {
            Operand::Tensor(lr) => {
                let lr = cx.convert(lr, DType::F64)?;
                cx.reshape(lr, ttpu_ir::Shape::scalar())?
            }
            Operand::Scalar(lr) => cx.scalar(DType::F64, lr),
        };
        let power = |cx: &mut Cx<'_>, base: f64| -> Result<ValueId> {
            let base = cx.scalar(DType::F64, Scalar::Float(base));
            let raised = cx.binary(BinaryOp::Power, base, step)?;
            let one = cx.scalar(DType::F64, Scalar::Float(1.0));
            cx.binary(BinaryOp::Subtract, one, raised)
        };
        let bias_correction1 = power(cx, beta1)?;
        let bias_correction2 = power(cx, beta2)?;
        let step_size = cx.binary(BinaryOp::Divide, lr, bias_correction1)?;
        let bias_correction2_sqrt = cx.unary(UnaryOp::Sqrt, bias_correction2)?;
        let splat = |cx: &mut Cx<'_>, scalar: ValueId| -> Result<ValueId> {
            let rounded = cx.convert(scalar, compute)?;
            cx.broadcast_to(rounded, &shape)
        };
        if weight_decay != 0.0 {
            if decoupled {
                // AdamW: the parameter decays by lr * weight_decay first.
                let decay = cx.scalar(DType::F64, Scalar::Float(weight_decay));
                let factor = cx.binary(BinaryOp::Multiply, lr, decay)?;
                let one = cx.scalar(DType::F64, Scalar::Float(1.0));
                let factor = cx.binary(BinaryOp::Subtract, one, factor)?;
                let factor = splat(cx, factor)?;
                value = cx.binary(BinaryOp::Multiply, value, factor)?;
            } else {
                let decay = cx.binary_scalar(BinaryOp::Multiply, value, Scalar::Float(weight_decay))?;
                grad = cx.binary(BinaryOp::Add, grad, decay)?;
            }
        }
        let exp_avg = as_compute(cx, exp_avgs[index])?;
        let exp_avg = cx.binary_scalar(BinaryOp::Multiply, exp_avg, Scalar::Float(beta1))?;
        let weighted = cx.binary_scalar(BinaryOp::Multiply, grad, Scalar::Float(1.0 - beta1))?;
        let exp_avg = cx.binary(BinaryOp::Add, exp_avg, weighted)?;
        let exp_avg_sq = as_compute(cx, exp_avg_sqs[index])?;
        let exp_avg_sq = cx.binary_scalar(BinaryOp::Multiply, exp_avg_sq, Scalar::Float(beta2))?;
        let squared = cx.binary(BinaryOp::Multiply, grad, grad)?;
        let squared = cx.binary_scalar(BinaryOp::Multiply, squared, Scalar::Float(1.0 - beta2))?;
        let exp_avg_sq = cx.binary(BinaryOp::Add, exp_avg_sq, squared)?;
        let second = if amsgrad {
            let previous = as_compute(cx, max_exp_avg_sqs[index])?;
            let max = cx.binary(BinaryOp::Maximum, previous, exp_avg_sq)?;
            outputs[4].push(Imported::Tensor(cx.convert(max, cx.dtype(max_exp_avg_sqs[index]))?));
            max
        } else {
            exp_avg_sq
        };
        let root = cx.unary(UnaryOp::Sqrt, second)?;
        let correction = splat(cx, bias_correction2_sqrt)?;
        let denom = cx.binary(BinaryOp::Divide, root, correction)?;
        let denom = cx.binary_scalar(BinaryOp::Add, denom, Scalar::Float(eps))?;
        let step_size = splat(cx, step_size)?;
        let update = cx.binary(BinaryOp::Multiply, step_size, exp_avg)?;
        let update = cx.binary(BinaryOp::Divide, update, denom)?;
        value = cx.binary(BinaryOp::Subtract, value, update)?;
        outputs[0].push(Imported::Tensor(cx.convert(value, dtype)?));
        outputs[1].push(Imported::Tensor(stored_grad));
        outputs[2].push(Imported::Tensor(cx.convert(exp_avg, cx.dtype(exp_avgs[index]))?));
        outputs[3].push(Imported::Tensor(cx.convert(exp_avg_sq, cx.dtype(exp_avg_sqs[index]))?));
    }
    if !amsgrad {
        outputs[4] = max_exp_avg_sqs.iter().map(|&value| Imported::Tensor(value)).collect();
    }
    if let Some(found_inf) = found_inf {
        let inputs = [&params, &grads, &exp_avgs, &exp_avg_sqs, &max_exp_avg_sqs];
        for (results, originals) in outputs.iter_mut().zip(inputs) {
            for (result, &original) in results.iter_mut().zip(originals.iter()) {
                let Imported::Tensor(updated) = *result else { continue };
                *result = Imported::Tensor(skipped_on_overflow(cx, found_inf, original, updated)?);
            }
        }
    }
    Ok(Imported::Tuple(outputs.into_iter().map(Imported::Tuple).collect()))
}

/// `updated` where `found_inf` is not exactly 1, else `original` (a step GradScaler skips).
fn skipped_on_overflow(cx: &mut Cx<'_>, found_inf: ValueId, original: ValueId, updated: ValueId) -> Result<ValueId> {
    if cx.shape(found_inf).as_static().is_none_or(|dims| dims.iter().product::<i64>() != 1) {
        return Err(cx.bad(format!("found_inf must hold one element, found {}", cx.ty(found_inf))));
    }
    let flag = cx.reshape(found_inf, ttpu_ir::Shape::from_static(&[]))?;
    let flag = cx.convert(flag, DType::F32)?;
    let one = cx.scalar(DType::F32, Scalar::Int(1));
    let skip = cx.compare(CompareDirection::Eq, flag, one)?;
    let shape = cx.shape(updated);
    let skip = cx.broadcast_to(skip, &shape)?;
    cx.select(skip, original, updated)
}

/// `_amp_foreach_non_finite_check_and_unscale(self, found_inf, inv_scale)` (the functional form
/// of the in-place op `GradScaler.unscale_` calls) → (the gradients times `inv_scale`, each
/// product in the gradient's opmath and an `inv_scale` of exactly 1 leaving it as it is, and
/// `found_inf`, set to 1 where any gradient holds an infinity or a NaN and kept otherwise).
pub(super) fn amp_unscale(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let grads = args.tensors("self")?;
    let (found_inf, inv_scale) = (args.tensor("found_inf")?, args.tensor("inv_scale")?);
    for (what, value) in [("found_inf", found_inf), ("inv_scale", inv_scale)] {
        if cx.dtype(value) != DType::F32
            || cx.shape(value).as_static().is_none_or(|dims| dims.iter().product::<i64>() != 1)
        {
            return Err(cx.bad(format!("{what} must be a 1-element float tensor, found {}", cx.ty(value))));
        }
    }
    let scalar = ttpu_ir::Shape::from_static(&[]);
    let inv = cx.reshape(inv_scale, scalar.clone())?;
    let mut any_bad: Option<ValueId> = None;
    let mut unscaled = Vec::with_capacity(grads.len());
    for &grad in &grads {
        let dtype = cx.dtype(grad);
        if !dtype.is_float() {
            return Err(cx.bad(format!("gradients must be floating point, found {}", cx.ty(grad))));
        }
        let compute = opmath(dtype);
        let value = cx.convert(grad, compute)?;
        let shape = cx.shape(value);
        let factor = cx.convert(inv, compute)?;
        let factor = cx.broadcast_to(factor, &shape)?;
        let product = cx.binary(BinaryOp::Multiply, value, factor)?;
        let one = cx.splat(compute, Scalar::Int(1), &shape)?;
        let exact = cx.compare(CompareDirection::Eq, factor, one)?;
        let kept = cx.select(exact, value, product)?;
        unscaled.push(Imported::Tensor(cx.convert(kept, dtype)?));
        let finite = cx.unary(UnaryOp::IsFinite, grad)?;
        let all_finite = cx.reduce(finite, ReduceKind::And, &(0..cx.rank(grad)).collect::<Vec<_>>())?;
        let bad = cx.unary(UnaryOp::Not, all_finite)?;
        any_bad = Some(match any_bad {
            None => bad,
            Some(acc) => cx.binary(BinaryOp::Or, acc, bad)?,
        });
    }
    let found = match any_bad {
        None => found_inf,
        Some(bad) => {
            let shape = cx.shape(found_inf);
            let bad = cx.broadcast_to(bad, &shape)?;
            let one = cx.splat(DType::F32, Scalar::Int(1), &shape)?;
            cx.select(bad, one, found_inf)?
        }
    };
    Ok(Imported::Tuple(vec![Imported::Tuple(unscaled), Imported::Tensor(found)]))
}

/// `_amp_update_scale(self, growth_tracker, found_inf, scale_growth_factor,
/// scale_backoff_factor, growth_interval)` (the functional form of `GradScaler.update`'s op) →
/// (the new scale, the new growth tracker): after an overflow the scale backs off and the
/// tracker restarts; otherwise the tracker counts up, and at `growth_interval` the scale grows
/// (if the grown scale is finite) and the tracker restarts, as PyTorch's kernels do it.
pub(super) fn amp_update_scale(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (scale, tracker, found_inf) = (args.tensor("self")?, args.tensor("growth_tracker")?, args.tensor("found_inf")?);
    let growth = args.scalar("scale_growth_factor")?.as_f64();
    let backoff = args.scalar("scale_backoff_factor")?.as_f64();
    let interval = args.int("growth_interval")?;
    let one_element =
        |cx: &Cx<'_>, value: ValueId| cx.shape(value).as_static().is_some_and(|dims| dims.iter().product::<i64>() == 1);
    if cx.dtype(scale) != DType::F32
        || cx.dtype(tracker) != DType::I32
        || cx.dtype(found_inf) != DType::F32
        || !one_element(cx, scale)
        || !one_element(cx, tracker)
        || !one_element(cx, found_inf)
    {
        return Err(cx.bad(format!(
            "expects 1-element scale (float), growth_tracker (int) and found_inf (float), found {}, {} and {}",
            cx.ty(scale),
            cx.ty(tracker),
            cx.ty(found_inf)
        )));
    }
    let shape = cx.shape(scale);
    let found = cx.reshape(found_inf, shape.clone())?;
    let zero = cx.splat(DType::F32, Scalar::Int(0), &shape)?;
    let overflow = cx.compare(CompareDirection::Ne, found, zero)?;
    // The kernels multiply the float32 scale by the factor as a double and round the product once.
    let wide = cx.convert(scale, DType::F64)?;
    let backed_off = cx.binary_scalar(BinaryOp::Multiply, wide, Scalar::Float(backoff))?;
    let backed_off = cx.convert(backed_off, DType::F32)?;
    let grown = cx.binary_scalar(BinaryOp::Multiply, wide, Scalar::Float(growth))?;
    let grown = cx.convert(grown, DType::F32)?;
    let tracker_shape = cx.shape(tracker);
    let tracker = cx.reshape(tracker, shape.clone())?;
    let successful = cx.binary_scalar(BinaryOp::Add, tracker, Scalar::Int(1))?;
    let limit = cx.splat(DType::I32, Scalar::Int(interval), &shape)?;
    let due = cx.compare(CompareDirection::Eq, successful, limit)?;
    let finite = cx.unary(UnaryOp::IsFinite, grown)?;
    let grow = cx.binary(BinaryOp::And, due, finite)?;
    let kept_or_grown = cx.select(grow, grown, scale)?;
    let new_scale = cx.select(overflow, backed_off, kept_or_grown)?;
    let restart = cx.binary(BinaryOp::Or, overflow, due)?;
    let zero_count = cx.splat(DType::I32, Scalar::Int(0), &shape)?;
    let new_tracker = cx.select(restart, zero_count, successful)?;
    let new_tracker = cx.reshape(new_tracker, tracker_shape)?;
    Ok(Imported::Tuple(vec![Imported::Tensor(new_scale), Imported::Tensor(new_tracker)]))
}
