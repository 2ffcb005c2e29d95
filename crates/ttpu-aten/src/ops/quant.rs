//! Quantization: the `quantized_decomposed` ops PyTorch's PT2E flow leaves in a converted model
//! (quantize and dequantize per tensor and per channel, and the dynamic flow's `choose_qparams`),
//! ATen's fake quantization and `_int_mm`.
//!
//! Each decomposition follows PyTorch's own arithmetic step for step, in the dtypes it computes
//! in, so quantized values come out identical rather than within a tolerance: a value that lands
//! on a rounding boundary in PyTorch lands on the same one here.
//!
//! - `quantize_per_tensor` (`torch/ao/quantization/fx/_decomposed.py`) multiplies by
//!   `1.0 / scale` computed in double precision and rounded to `float32`, never divides by
//!   `scale`; `x * (1 / scale)` and `x / scale` differ in the last bit for some `x`, which moves a
//!   value on a `.5` boundary by one step.
//! - The fake quantization kernels (`aten/src/ATen/native/quantized/cpu/kernels/`) compute
//!   `1.0f / scale` in `float32`, add the zero point after rounding, and clamp in double
//!   precision with `fmin`/`fmax`, so a NaN goes to `quant_min`.

use ttpu_ir::{BinaryOp, CompareDirection, DType, DotDims, ReduceKind, Scalar, Shape, UnaryOp, ValueId};

use super::elementwise::tensor;
use crate::args::{Args, Val};
use crate::ctx::{Cx, Imported, opmath};
use crate::error::Result;
use crate::promote::promote_types;

/// The values a quantized integer dtype holds (`_DTYPE_TO_QVALUE_BOUNDS`). `uint16`, which PyTorch
/// also allows, has no IR dtype; the parser refuses it.
fn dtype_bounds(dtype: DType) -> Option<(i64, i64)> {
    match dtype {
        DType::U8 => Some((0, 255)),
        DType::I8 => Some((-128, 127)),
        DType::I16 => Some((i64::from(i16::MIN), i64::from(i16::MAX))),
        DType::I32 => Some((i64::from(i32::MIN), i64::from(i32::MAX))),
        _ => None,
    }
}

/// The `dtype` argument: a quantized integer dtype.
fn quant_dtype(cx: &Cx<'_>, args: &Args) -> Result<DType> {
    let dtype = args.opt_dtype("dtype")?.ok_or_else(|| cx.bad("argument `dtype` is required"))?;
    if dtype_bounds(dtype).is_none() {
        return Err(cx.bad(format!("dtype {dtype} is not a quantized dtype (uint8, int8, int16 or int32)")));
    }
    Ok(dtype)
}

/// Checks `quant_min..=quant_max` against `dtype`'s range, as `_quant_min_max_bounds_check` does;
/// an empty range is refused too, since no value could be represented.
fn check_bounds(cx: &Cx<'_>, quant_min: i64, quant_max: i64, dtype: DType) -> Result<()> {
    let Some((low, high)) = dtype_bounds(dtype) else {
        return Err(cx.bad(format!("dtype {dtype} is not a quantized dtype (uint8, int8, int16 or int32)")));
    };
    if quant_min < low {
        return Err(cx.bad(format!("quant_min {quant_min} is below the smallest {dtype} value {low}")));
    }
    if quant_max > high {
        return Err(cx.bad(format!("quant_max {quant_max} is above the largest {dtype} value {high}")));
    }
    if quant_min > quant_max {
        return Err(cx.bad(format!("quant_min {quant_min} is above quant_max {quant_max}")));
    }
    Ok(())
}

/// `value` as a rank-0 tensor, after checking it holds exactly one element (PyTorch reads such
/// arguments with `.item()`).
fn one_element(cx: &mut Cx<'_>, value: ValueId, what: &str) -> Result<ValueId> {
    let ty = cx.ty(value);
    if ty.shape.num_elements() != Some(1) {
        return Err(cx.bad(format!("{what} must hold exactly one element, found {ty}")));
    }
    cx.reshape(value, Shape::scalar())
}

/// A clamp bound: an int (checked against the dtype), or with the `.tensor2` overloads a
/// one-element tensor read at run time.
enum Bound {
    Int(i64),
    Tensor(ValueId),
}

fn bound(cx: &mut Cx<'_>, args: &Args, name: &str) -> Result<Bound> {
    match args.get(name) {
        Val::Tensor(value) => Ok(Bound::Tensor(one_element(cx, *value, name)?)),
        _ => Ok(Bound::Int(args.int(name)?)),
    }
}

/// Both bounds, checked against `dtype` where they are known at import time.
fn bounds(cx: &mut Cx<'_>, args: &Args, dtype: DType) -> Result<(Bound, Bound)> {
    let (low, high) = (bound(cx, args, "quant_min")?, bound(cx, args, "quant_max")?);
    if let (Bound::Int(low), Bound::Int(high)) = (&low, &high) {
        check_bounds(cx, *low, *high, dtype)?;
    }
    Ok((low, high))
}

/// A bound as a rank-0 tensor of `dtype` (PyTorch clamps with Python numbers, which the kernel
/// reads in the tensor's dtype).
fn bound_value(cx: &mut Cx<'_>, bound: &Bound, dtype: DType) -> Result<ValueId> {
    match bound {
        Bound::Int(value) => Ok(cx.scalar(dtype, Scalar::Int(*value))),
        Bound::Tensor(value) => cx.convert(*value, dtype),
    }
}

/// A quantize or fake-quantize input as `float32`: PyTorch upcasts `float16` and `bfloat16`.
fn float32_input(cx: &mut Cx<'_>, x: ValueId) -> Result<ValueId> {
    match cx.dtype(x) {
        DType::F32 | DType::F16 | DType::BF16 => cx.convert(x, DType::F32),
        _ => Err(cx.bad(format!("input {} must be float32, float16 or bfloat16", cx.ty(x)))),
    }
}

/// `min(max(value, low), high)`, both bounds rank-0 tensors of `value`'s dtype. A NaN has no
/// quantized value to match (PyTorch's cast of NaN to an integer is undefined), so it is left to
/// the backend's `maximum`/`minimum`.
fn clamp(cx: &mut Cx<'_>, value: ValueId, low: ValueId, high: ValueId) -> Result<ValueId> {
    let raised = cx.binary_bcast(BinaryOp::Maximum, value, low)?;
    cx.binary_bcast(BinaryOp::Minimum, raised, high)
}

/// `fmin(fmax(value, low), high)` as C's `fmin`/`fmax` compute it: a NaN becomes `low`.
fn clamp_fmin_fmax(cx: &mut Cx<'_>, value: ValueId, low: ValueId, high: ValueId) -> Result<ValueId> {
    let [value, low, high] = cx.broadcast_all([value, low, high])?;
    let above = cx.compare(CompareDirection::Ge, value, low)?;
    let raised = cx.select(above, value, low)?;
    let below = cx.compare(CompareDirection::Le, raised, high)?;
    cx.select(below, raised, high)
}

/// `low <= value && value <= high`: false for NaN.
fn in_range(cx: &mut Cx<'_>, value: ValueId, low: ValueId, high: ValueId) -> Result<ValueId> {
    let [value, low, high] = cx.broadcast_all([value, low, high])?;
    let above = cx.compare(CompareDirection::Ge, value, low)?;
    let below = cx.compare(CompareDirection::Le, value, high)?;
    cx.binary(BinaryOp::And, above, below)
}

/// The scale and zero point of a per-tensor op, as rank-0 tensors: Python numbers (`.default`) or
/// one-element tensors (`.tensor`, `.tensor2`).
enum QParams {
    Numbers { scale: f64, zero_point: Scalar },
    Tensors { scale: ValueId, zero_point: ValueId },
}

fn per_tensor_qparams(cx: &mut Cx<'_>, args: &Args) -> Result<QParams> {
    match (args.get("scale"), args.get("zero_point")) {
        (Val::Tensor(scale), Val::Tensor(zero_point)) => {
            let (scale, zero_point) = (*scale, *zero_point);
            Ok(QParams::Tensors {
                scale: one_element(cx, scale, "scale")?,
                zero_point: one_element(cx, zero_point, "zero_point")?,
            })
        }
        _ => Ok(QParams::Numbers { scale: args.scalar("scale")?.as_f64(), zero_point: args.scalar("zero_point")? }),
    }
}

/// `quantized_decomposed.quantize_per_tensor` (`.default`, `.tensor`, `.tensor2`):
/// `clamp(round(x * inv_scale) + zero_point, quant_min, quant_max).to(dtype)` in `float32`, with
/// `inv_scale = 1.0 / scale` computed in double precision (the scale is read with `.item()`) and
/// rounded to `float32` by the multiplication.
pub(super) fn quantize_per_tensor(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = float32_input(cx, args.tensor("input")?)?;
    let dtype = quant_dtype(cx, args)?;
    let (low, high) = bounds(cx, args, dtype)?;
    let (inv_scale, zero_point) = match per_tensor_qparams(cx, args)? {
        QParams::Numbers { scale, zero_point } => {
            (cx.scalar(DType::F32, Scalar::Float(1.0 / scale)), cx.scalar(DType::F32, zero_point))
        }
        QParams::Tensors { scale, zero_point } => {
            let scale = cx.convert(scale, DType::F64)?;
            let one = cx.scalar(DType::F64, Scalar::Float(1.0));
            let inv = cx.binary(BinaryOp::Divide, one, scale)?;
            (cx.convert(inv, DType::F32)?, cx.convert(zero_point, DType::F32)?)
        }
    };
    let scaled = cx.binary_bcast(BinaryOp::Multiply, x, inv_scale)?;
    let rounded = cx.unary(UnaryOp::RoundNearestEven, scaled)?;
    let shifted = cx.binary_bcast(BinaryOp::Add, rounded, zero_point)?;
    let (low, high) = (bound_value(cx, &low, DType::F32)?, bound_value(cx, &high, DType::F32)?);
    let clamped = clamp(cx, shifted, low, high)?;
    tensor(cx.convert(clamped, dtype)?)
}

/// The `out_dtype` keyword: `float32` when absent.
fn out_dtype(cx: &Cx<'_>, args: &Args) -> Result<DType> {
    let out = args.opt_dtype("out_dtype")?.unwrap_or(DType::F32);
    if !out.is_float() {
        return Err(cx.bad(format!("out_dtype {out} must be a floating-point dtype")));
    }
    Ok(out)
}

/// Checks that a dequantize input has the dtype its `dtype` argument states (PyTorch asserts it).
fn quantized_input(cx: &Cx<'_>, args: &Args) -> Result<(ValueId, DType)> {
    let x = args.tensor("input")?;
    let dtype = quant_dtype(cx, args)?;
    if cx.dtype(x) != dtype {
        return Err(cx.bad(format!("input {} does not have the dtype {dtype} the `dtype` argument states", cx.ty(x))));
    }
    Ok((x, dtype))
}

/// `quantized_decomposed.dequantize_per_tensor` (`.default`, `.tensor`, `.tensor2`):
/// `(x.to(out_dtype) - zero_point) * scale`. Each step rounds to `out_dtype`, computed in `float32`
/// for `float16`/`bfloat16` (a tensor op with a Python number).
pub(super) fn dequantize_per_tensor(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (x, _) = quantized_input(cx, args)?;
    let out = out_dtype(cx, args)?;
    let compute = opmath(out);
    let (scale, zero_point) = match per_tensor_qparams(cx, args)? {
        QParams::Numbers { scale, zero_point } => {
            (cx.scalar(compute, Scalar::Float(scale)), cx.scalar(compute, zero_point))
        }
        QParams::Tensors { scale, zero_point } => (cx.convert(scale, compute)?, cx.convert(zero_point, compute)?),
    };
    let value = cx.convert(x, out)?;
    let value = cx.convert(value, compute)?;
    let shifted = cx.binary_bcast(BinaryOp::Subtract, value, zero_point)?;
    let shifted = cx.convert(shifted, out)?;
    let shifted = cx.convert(shifted, compute)?;
    let scaled = cx.binary_bcast(BinaryOp::Multiply, shifted, scale)?;
    tensor(cx.convert(scaled, out)?)
}

/// A per-channel parameter (`scales`, `zero_points`) broadcast along `axis` of `like`: rank 1 with
/// one element per channel, or a single element for every channel (`view` then broadcasting, as
/// in PyTorch). `count` is the number of elements another parameter fixed.
fn along_axis(
    cx: &mut Cx<'_>,
    value: ValueId,
    what: &str,
    like: ValueId,
    axis: usize,
    count: Option<i64>,
) -> Result<ValueId> {
    let ty = cx.ty(value);
    let length = ty.shape.num_elements();
    let channels = cx.shape(like)[axis].as_static();
    if ty.rank() != 1 {
        return Err(cx.bad(format!("{what} must be a rank-1 tensor, found {ty}")));
    }
    match count {
        Some(count) if length != Some(count) => {
            return Err(cx.bad(format!("{what} {ty} must have {count} elements, one per scale")));
        }
        _ => {}
    }
    if length != Some(1) && length != channels {
        let size = cx.shape(like)[axis].clone();
        return Err(cx.bad(format!(
            "{what} {ty} must have one element per channel: dim {axis} of the input {} has size {size}",
            cx.ty(like)
        )));
    }
    let shape = cx.shape(like);
    cx.broadcast_in_dim(value, &[axis as i64], shape)
}

/// The `axis` argument of a per-channel op, normalised; negative values count from the end, which
/// PyTorch's permutation accepts too.
fn channel_axis(cx: &Cx<'_>, args: &Args, x: ValueId) -> Result<usize> {
    let rank = cx.rank(x);
    if rank == 0 {
        return Err(cx.bad(format!("per-channel quantization needs a tensor with a channel dim, found {}", cx.ty(x))));
    }
    let axis = args.int("axis")?;
    if axis < -(rank as i64) || axis >= rank as i64 {
        return Err(cx.bad(format!("axis {axis} is out of range for the input {}", cx.ty(x))));
    }
    cx.norm_dim(axis, rank)
}

/// `quantized_decomposed.quantize_per_channel`:
/// `clamp(round(x * (1.0 / scales)) + zero_points, quant_min, quant_max).to(dtype)`, the scales
/// and zero points viewed along `axis` and each step in the dtype PyTorch promotes to (`float64`
/// scales compute in `float64`).
pub(super) fn quantize_per_channel(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = float32_input(cx, args.tensor("input")?)?;
    let dtype = quant_dtype(cx, args)?;
    let (quant_min, quant_max) = (args.int("quant_min")?, args.int("quant_max")?);
    check_bounds(cx, quant_min, quant_max, dtype)?;
    let axis = channel_axis(cx, args, x)?;
    let scales = args.tensor("scales")?;
    let scale_dtype = cx.dtype(scales);
    if !scale_dtype.is_float() {
        return Err(cx.bad(format!("scales {} must be floating point", cx.ty(scales))));
    }
    let count = cx.ty(scales).shape.num_elements();
    let scales = along_axis(cx, scales, "scales", x, axis, None)?;
    let zero_points = along_axis(cx, args.tensor("zero_points")?, "zero_points", x, axis, count)?;
    // `1.0 / scales` is a tensor op in the scales' dtype.
    let wide = cx.convert(scales, opmath(scale_dtype))?;
    let one = cx.splat_like(wide, Scalar::Float(1.0))?;
    let inv = cx.binary(BinaryOp::Divide, one, wide)?;
    let inv = cx.convert(inv, scale_dtype)?;
    let product_dtype = promote_types(DType::F32, scale_dtype);
    let (xs, inv) = (cx.convert(x, product_dtype)?, cx.convert(inv, product_dtype)?);
    let scaled = cx.binary(BinaryOp::Multiply, xs, inv)?;
    let rounded = cx.unary(UnaryOp::RoundNearestEven, scaled)?;
    let sum_dtype = promote_types(product_dtype, cx.dtype(zero_points));
    let (rounded, zero_points) = (cx.convert(rounded, sum_dtype)?, cx.convert(zero_points, sum_dtype)?);
    let shifted = cx.binary(BinaryOp::Add, rounded, zero_points)?;
    let low = cx.scalar(sum_dtype, Scalar::Int(quant_min));
    let high = cx.scalar(sum_dtype, Scalar::Int(quant_max));
    let clamped = clamp(cx, shifted, low, high)?;
    tensor(cx.convert(clamped, dtype)?)
}

/// `quantized_decomposed.dequantize_per_channel`: `((x - zero_points) * scales).to(out_dtype)`
/// along `axis` with PyTorch's promotion (an integer subtraction, then a multiplication in the
/// scales' dtype); no zero points means `x * scales`.
pub(super) fn dequantize_per_channel(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (x, dtype) = quantized_input(cx, args)?;
    let (quant_min, quant_max) = (args.int("quant_min")?, args.int("quant_max")?);
    check_bounds(cx, quant_min, quant_max, dtype)?;
    let out = out_dtype(cx, args)?;
    let axis = channel_axis(cx, args, x)?;
    let scales = args.tensor("scales")?;
    if !cx.dtype(scales).is_float() {
        return Err(cx.bad(format!("scales {} must be floating point", cx.ty(scales))));
    }
    let count = cx.ty(scales).shape.num_elements();
    let scales = along_axis(cx, scales, "scales", x, axis, None)?;
    let mut value = x;
    if let Some(zero_points) = args.opt_tensor("zero_points")? {
        let zero_points = along_axis(cx, zero_points, "zero_points", x, axis, count)?;
        let difference_dtype = promote_types(dtype, cx.dtype(zero_points));
        let lhs = cx.convert(value, difference_dtype)?;
        let rhs = cx.convert(zero_points, difference_dtype)?;
        value = cx.binary(BinaryOp::Subtract, lhs, rhs)?;
    }
    let product_dtype = promote_types(cx.dtype(value), cx.dtype(scales));
    let (lhs, rhs) = (cx.convert(value, product_dtype)?, cx.convert(scales, product_dtype)?);
    let scaled = cx.binary(BinaryOp::Multiply, lhs, rhs)?;
    tensor(cx.convert(scaled, out)?)
}

/// `lhs / rhs` for `float32` operands, rounded as `float32` division rounds, even where XLA turns
/// a division by a constant into a multiplication by its reciprocal (which is off by one ulp for
/// some operands). The quotient of two `float32` values is never an exact `float32` midpoint and
/// always lies at least 2^-49 (relative) away from one, while the `float64` quotient, reciprocal
/// or not, is within about 2^-52 of it; so it rounds to the correctly rounded `float32` quotient.
fn divide_f32(cx: &mut Cx<'_>, lhs: ValueId, rhs: ValueId) -> Result<ValueId> {
    let (lhs, rhs) = (cx.convert(lhs, DType::F64)?, cx.convert(rhs, DType::F64)?);
    let quotient = cx.binary(BinaryOp::Divide, lhs, rhs)?;
    cx.convert(quotient, DType::F32)
}

/// `quantized_decomposed.choose_qparams.tensor` and `choose_qparams_symmetric.tensor`: the scale
/// (`float64[1]`) and zero point (`int64[1]`) `determine_qparams` derives from the input's
/// minimum and maximum, computed in `float32` as PyTorch does.
pub(super) fn choose_qparams(cx: &mut Cx<'_>, args: &Args, symmetric: bool) -> Result<Imported> {
    let x = args.tensor("input")?;
    if cx.dtype(x) != DType::F32 {
        return Err(cx.bad(format!("input {} must be float32", cx.ty(x))));
    }
    let dtype = quant_dtype(cx, args)?;
    let (quant_min, quant_max) = (args.int("quant_min")?, args.int("quant_max")?);
    // `validate_qmin_qmax`.
    if !(quant_min <= 0 && 0 <= quant_max) {
        return Err(cx.bad(format!("the range quant_min {quant_min} to quant_max {quant_max} must include 0")));
    }
    if quant_min >= quant_max {
        return Err(cx.bad(format!("quant_min {quant_min} must be below quant_max {quant_max}")));
    }
    let eps = args.scalar("eps")?.as_f64();
    if cx.ty(x).shape.num_elements().is_none_or(|count| count == 0) {
        return Err(cx.bad(format!("input {} must have a static, non-zero number of elements", cx.ty(x))));
    }
    let dims: Vec<usize> = (0..cx.rank(x)).collect();
    let min = cx.reduce_propagating_nan(x, ReduceKind::Min, &dims)?;
    let max = cx.reduce_propagating_nan(x, ReduceKind::Max, &dims)?;
    let zero = cx.scalar(DType::F32, Scalar::Float(0.0));
    let min_neg = cx.binary(BinaryOp::Minimum, min, zero)?;
    let max_pos = cx.binary(BinaryOp::Maximum, max, zero)?;
    let eps = cx.scalar(DType::F32, Scalar::Float(eps));
    // Python ints: the range is exact in double precision, then read as `float32` by the division.
    let range = (quant_max as f64) - (quant_min as f64);
    let (scale, zero_point) = if symmetric {
        let neg = cx.unary(UnaryOp::Negate, min_neg)?;
        let max_abs = cx.binary(BinaryOp::Maximum, neg, max_pos)?;
        let half_range = cx.scalar(DType::F32, Scalar::Float(range / 2.0));
        let scale = divide_f32(cx, max_abs, half_range)?;
        let scale = cx.binary(BinaryOp::Maximum, scale, eps)?;
        let zero_point = if dtype == DType::U8 { 128 } else { 0 };
        (scale, cx.scalar(DType::I64, Scalar::Int(zero_point)))
    } else {
        let width = cx.binary(BinaryOp::Subtract, max_pos, min_neg)?;
        let range = cx.scalar(DType::F32, Scalar::Float(range));
        let scale = divide_f32(cx, width, range)?;
        let scale = cx.binary(BinaryOp::Maximum, scale, eps)?;
        // `quant_min - round(min_neg / scale).to(int32)`, clamped, in `int32`.
        let steps = divide_f32(cx, min_neg, scale)?;
        let steps = cx.unary(UnaryOp::RoundNearestEven, steps)?;
        let steps = cx.convert(steps, DType::I32)?;
        let first = cx.scalar(DType::I32, Scalar::Int(quant_min));
        let zero_point = cx.binary(BinaryOp::Subtract, first, steps)?;
        let low = cx.scalar(DType::I32, Scalar::Int(quant_min));
        let high = cx.scalar(DType::I32, Scalar::Int(quant_max));
        (scale, clamp(cx, zero_point, low, high)?)
    };
    let one = Shape::from_static(&[1]);
    let scale = cx.convert(scale, DType::F64)?;
    let zero_point = cx.convert(zero_point, DType::I64)?;
    Ok(Imported::Tuple(vec![
        Imported::Tensor(cx.reshape(scale, one.clone())?),
        Imported::Tensor(cx.reshape(zero_point, one)?),
    ]))
}

/// `_int_mm(self, mat2)`: an `int8` matrix product accumulated in `int32`. Converting the operands
/// to `int32` first gives the same numbers as an `int8` product with an `int32` accumulator: every
/// product of two `int8` values is exact in `int32`, and the sum wraps the same way.
pub(super) fn int_mm(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (lhs, rhs) = (args.tensor("self")?, args.tensor("mat2")?);
    for value in [lhs, rhs] {
        if cx.rank(value) != 2 || cx.dtype(value) != DType::I8 {
            return Err(cx.bad(format!("expects rank-2 int8 operands, found {}", cx.ty(value))));
        }
    }
    let lhs = cx.convert(lhs, DType::I32)?;
    let rhs = cx.convert(rhs, DType::I32)?;
    let dims = DotDims {
        lhs_contracting: [1].into_iter().collect(),
        rhs_contracting: [0].into_iter().collect(),
        ..DotDims::default()
    };
    tensor(cx.dot_general(lhs, rhs, dims)?)
}

/// A fake-quantize input: any floating-point dtype; PyTorch computes `x * inv_scale` in `float32`
/// for the 16-bit ones and in `float64` for `float64`.
fn fake_quant_input(cx: &mut Cx<'_>, x: ValueId) -> Result<(ValueId, DType)> {
    let dtype = cx.dtype(x);
    if !dtype.is_float() {
        return Err(cx.bad(format!("input {} must be floating point", cx.ty(x))));
    }
    let compute = opmath(dtype);
    Ok((cx.convert(x, compute)?, compute))
}

/// Checks the fake-quantize range, as `fake_quantize_per_tensor_affine_cachemask` does.
fn check_fake_range(cx: &Cx<'_>, quant_min: i64, quant_max: i64) -> Result<()> {
    if quant_min > quant_max {
        return Err(cx.bad(format!("quant_min {quant_min} is above quant_max {quant_max}")));
    }
    Ok(())
}

/// The per-tensor fake-quantize kernel (`_fake_quantize_tensor_helper`) for `float32` scale and
/// `float32` zero point rank-0 tensors:
///
/// ```text
/// q = zero_point + nearbyint(x * (1.0f / scale))          // float
/// output = (int64(fmin(fmax(q, quant_min), quant_max)) - zero_point) * scale   // float
/// mask = quant_min <= q && q <= quant_max
/// ```
fn fake_quant_per_tensor_values(
    cx: &mut Cx<'_>,
    x: ValueId,
    scale: ValueId,
    zero_point: ValueId,
    quant_min: i64,
    quant_max: i64,
) -> Result<(ValueId, ValueId)> {
    let dtype = cx.dtype(x);
    let (wide, compute) = fake_quant_input(cx, x)?;
    let one = cx.scalar(DType::F32, Scalar::Float(1.0));
    let inv = cx.binary(BinaryOp::Divide, one, scale)?;
    let inv = cx.convert(inv, compute)?;
    let scaled = cx.binary_bcast(BinaryOp::Multiply, wide, inv)?;
    let rounded = cx.unary(UnaryOp::RoundNearestEven, scaled)?;
    let zero_point_wide = cx.convert(zero_point, compute)?;
    let q = cx.binary_bcast(BinaryOp::Add, rounded, zero_point_wide)?;
    let low = cx.scalar(compute, Scalar::Int(quant_min));
    let high = cx.scalar(compute, Scalar::Int(quant_max));
    let mask = in_range(cx, q, low, high)?;
    let clamped = clamp_fmin_fmax(cx, q, low, high)?;
    // The clamped value and the zero point are small integers: their difference is exact in
    // `float32`, and the product rounds once, as the kernel's `int64 * float` does.
    let clamped = cx.convert(clamped, DType::F32)?;
    let steps = cx.binary_bcast(BinaryOp::Subtract, clamped, zero_point)?;
    let output = cx.binary_bcast(BinaryOp::Multiply, steps, scale)?;
    Ok((cx.convert(output, dtype)?, mask))
}

/// `fake_quantize_per_tensor_affine_cachemask(self, scale, zero_point, quant_min, quant_max)`:
/// the fake-quantized tensor and the mask of values inside the range.
pub(super) fn fake_quantize_per_tensor_cachemask(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let scale = args.scalar("scale")?.as_f64();
    let zero_point = args.int("zero_point")?;
    let (quant_min, quant_max) = (args.int("quant_min")?, args.int("quant_max")?);
    check_fake_range(cx, quant_min, quant_max)?;
    if !(quant_min..=quant_max).contains(&zero_point) {
        return Err(
            cx.bad(format!("zero_point {zero_point} must be between quant_min {quant_min} and quant_max {quant_max}"))
        );
    }
    // The kernel takes the scale as `float`.
    let scale = cx.scalar(DType::F32, Scalar::Float(scale));
    let zero_point = cx.scalar(DType::F32, Scalar::Int(zero_point));
    let (output, mask) = fake_quant_per_tensor_values(cx, x, scale, zero_point, quant_min, quant_max)?;
    Ok(Imported::Tuple(vec![Imported::Tensor(output), Imported::Tensor(mask)]))
}

/// `_fake_quantize_per_tensor_affine_cachemask_tensor_qparams(self, scale, zero_point,
/// fake_quant_enabled, quant_min, quant_max)`: the same with one-element tensors (read as a
/// `float` scale and an integer zero point); when `fake_quant_enabled` is 0 the input passes
/// through and the mask is all true.
pub(super) fn fake_quantize_per_tensor_cachemask_tensor_qparams(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let (quant_min, quant_max) = (args.int("quant_min")?, args.int("quant_max")?);
    check_fake_range(cx, quant_min, quant_max)?;
    let scale = one_element(cx, args.tensor("scale")?, "scale")?;
    let scale = cx.convert(scale, DType::F32)?;
    let zero_point = one_element(cx, args.tensor("zero_point")?, "zero_point")?;
    // `.item().toInt()` truncates a floating-point zero point.
    let zero_point = cx.convert(zero_point, DType::I64)?;
    let zero_point = cx.convert(zero_point, DType::F32)?;
    let enabled = one_element(cx, args.tensor("fake_quant_enabled")?, "fake_quant_enabled")?;
    let enabled = cx.convert(enabled, DType::I64)?;
    let off = cx.scalar(DType::I64, Scalar::Int(0));
    let enabled = cx.compare(CompareDirection::Ne, enabled, off)?;
    let (output, mask) = fake_quant_per_tensor_values(cx, x, scale, zero_point, quant_min, quant_max)?;
    let shape = cx.shape(x);
    let enabled = cx.broadcast_to(enabled, &shape)?;
    let output = cx.select(enabled, output, x)?;
    let all = cx.splat(DType::Bool, Scalar::Bool(true), &shape)?;
    let mask = cx.select(enabled, mask, all)?;
    Ok(Imported::Tuple(vec![Imported::Tensor(output), Imported::Tensor(mask)]))
}

/// `fake_quantize_per_channel_affine_cachemask(self, scale, zero_point, axis, quant_min,
/// quant_max)`. With an integer zero point the kernel computes
///
/// ```text
/// q = int64(zero_point + nearbyint(x * (1.0f / scale)))   // float, then a cast
/// output = (fmin(fmax(q, quant_min), quant_max) - zero_point) * scale   // double
/// mask = quant_min <= q && q <= quant_max
/// ```
///
/// and with a floating-point one `q = lrintf(zero_point + x * (1.0f / scale))`. Both casts give
/// `INT64_MIN` on x86 for NaN, infinities and values beyond `int64` (where the fixtures come
/// from), so those clamp to `quant_min` with a false mask.
pub(super) fn fake_quantize_per_channel_cachemask(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let dtype = cx.dtype(x);
    let (quant_min, quant_max) = (args.int("quant_min")?, args.int("quant_max")?);
    check_fake_range(cx, quant_min, quant_max)?;
    let scale = args.tensor("scale")?;
    let zero_point = args.tensor("zero_point")?;
    if cx.dtype(scale) != DType::F32 {
        return Err(cx.bad(format!("scale {} must be float32", cx.ty(scale))));
    }
    let zero_point_dtype = cx.dtype(zero_point);
    if !matches!(zero_point_dtype, DType::I32 | DType::F32 | DType::F16) {
        return Err(cx.bad(format!("zero_point {} must be int32, float32 or float16", cx.ty(zero_point))));
    }
    // PyTorch refuses negative axes here, unlike the decomposed per-channel ops.
    let axis = args.int("axis")?;
    let rank = cx.rank(x);
    if axis < 0 || axis >= rank as i64 {
        return Err(cx.bad(format!("axis {axis} must be between 0 and the rank of the input {}", cx.ty(x))));
    }
    let axis = axis as usize;
    let count = cx.ty(scale).shape.num_elements();
    let channels = cx.shape(x)[axis].as_static();
    if count != channels {
        return Err(cx.bad(format!(
            "scale {} must have one element per channel of dim {axis} of the input {}",
            cx.ty(scale),
            cx.ty(x)
        )));
    }
    let scale = along_axis(cx, scale, "scale", x, axis, None)?;
    let zero_point = along_axis(cx, zero_point, "zero_point", x, axis, count)?;
    let (wide, compute) = fake_quant_input(cx, x)?;
    let one = cx.splat_like(scale, Scalar::Float(1.0))?;
    let inv = cx.binary(BinaryOp::Divide, one, scale)?;
    let inv = cx.convert(inv, compute)?;
    let scaled = cx.binary(BinaryOp::Multiply, wide, inv)?;
    let q = if zero_point_dtype.is_float() {
        let zero_point = cx.convert(zero_point, compute)?;
        let shifted = cx.binary(BinaryOp::Add, scaled, zero_point)?;
        cx.unary(UnaryOp::RoundNearestEven, shifted)?
    } else {
        let rounded = cx.unary(UnaryOp::RoundNearestEven, scaled)?;
        let zero_point = cx.convert(zero_point, compute)?;
        cx.binary(BinaryOp::Add, rounded, zero_point)?
    };
    // x86's float-to-int64 conversion: out of range, infinite or NaN gives INT64_MIN.
    let limit = cx.splat_like(q, Scalar::Float(9_223_372_036_854_775_808.0))?;
    let magnitude = cx.unary(UnaryOp::Abs, q)?;
    let fits = cx.compare(CompareDirection::Lt, magnitude, limit)?;
    let int_min = cx.splat_like(q, Scalar::Float(-9_223_372_036_854_775_808.0))?;
    let q = cx.select(fits, q, int_min)?;
    let low = cx.scalar(compute, Scalar::Int(quant_min));
    let high = cx.scalar(compute, Scalar::Int(quant_max));
    let mask = in_range(cx, q, low, high)?;
    let clamped = clamp(cx, q, low, high)?;
    let clamped = cx.convert(clamped, DType::F64)?;
    let zero_point = cx.convert(zero_point, DType::F64)?;
    let steps = cx.binary(BinaryOp::Subtract, clamped, zero_point)?;
    let scale = cx.convert(scale, DType::F64)?;
    let output = cx.binary(BinaryOp::Multiply, steps, scale)?;
    // c10's `Half` and `BFloat16` are built from a `float`, so a double result reaches them
    // rounded twice: to `float32`, then to the 16-bit dtype.
    let output = cx.convert(output, opmath(dtype))?;
    Ok(Imported::Tuple(vec![Imported::Tensor(cx.convert(output, dtype)?), Imported::Tensor(mask)]))
}
