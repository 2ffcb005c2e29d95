//! Inference for ops that move data without arithmetic.

use super::{InferResult, check_dim, check_dims, checked, fail, same_dim};
use crate::{Dim, Op, Shape, TensorType};

pub(super) fn reshape(op: &Op, operand: &TensorType, shape: &Shape) -> InferResult {
    if shape.dims().iter().any(|dim| matches!(dim, Dim::Static(size) if *size < 0)) {
        return fail(op, format!("negative size in {shape}"));
    }
    let count = |shape: &Shape| match shape.element_count() {
        Some(count) => Ok(count),
        None => fail(op, "sizes overflow 64 bits"),
    };
    let (from, to) = (count(&operand.shape)?, count(shape)?);
    // Counts that differ by a constant differ for every value of the symbols; other differences
    // may vanish under relations between symbols that the graph does not carry, so they pass.
    if from != to && from.checked_sub(&to).is_some_and(|difference| difference.as_static().is_some()) {
        return fail(op, format!("cannot reshape {operand} ({from} elements) to {shape} ({to} elements)"));
    }
    Ok(TensorType::new(operand.dtype, shape.clone()))
}

pub(super) fn transpose(op: &Op, operand: &TensorType, permutation: &[i64]) -> InferResult {
    if permutation.len() != operand.rank() {
        return fail(op, format!("permutation {permutation:?} does not fit rank {}", operand.rank()));
    }
    let dims = check_dims(op, permutation, operand.rank())?;
    Ok(TensorType::new(operand.dtype, dims.iter().map(|&index| operand.shape[index].clone()).collect()))
}

pub(super) fn broadcast_in_dim(op: &Op, operand: &TensorType, dims: &[i64], shape: &Shape) -> InferResult {
    if dims.len() != operand.rank() {
        return fail(op, format!("{} broadcast dims for operand {operand}", dims.len()));
    }
    let result_dims = check_dims(op, dims, shape.rank())?;
    for (operand_index, &result_index) in result_dims.iter().enumerate() {
        let from = &operand.shape[operand_index];
        if from != &Dim::Static(1) && !same_dim(from, &shape[result_index]) {
            return fail(op, format!("operand {operand} does not broadcast to {shape} along dims {dims:?}"));
        }
    }
    Ok(TensorType::new(operand.dtype, shape.clone()))
}

pub(super) fn slice(op: &Op, operand: &TensorType, start: &[i64], limit: &[Dim], strides: &[i64]) -> InferResult {
    let rank = operand.rank();
    if start.len() != rank || limit.len() != rank || strides.len() != rank {
        return fail(op, format!("start/limit/strides must have {rank} entries"));
    }
    let mut dims = Vec::with_capacity(rank);
    for index in 0..rank {
        let (begin, stride) = (start[index], strides[index]);
        if let (Some(end), Dim::Static(size)) = (limit[index].as_static(), &operand.shape[index]) {
            if stride < 1 || begin < 0 || end < begin {
                return fail(op, format!("bad range {begin}..{end} step {stride} in dim {index}"));
            }
            if end > *size {
                return fail(op, format!("limit {end} exceeds size {size} of dim {index}"));
            }
            dims.push(Dim::Static(if end == begin { 0 } else { (end - begin - 1) / stride + 1 }));
            continue;
        }
        if stride < 1 || begin < 0 {
            return fail(op, format!("bad start {begin} or step {stride} in dim {index}"));
        }
        // A symbolic bound or size: `(limit - begin + stride - 1) // stride` elements, the bounds
        // trusted to lie within the dim.
        let count = stride
            .checked_sub(1)
            .and_then(|extra| extra.checked_sub(begin))
            .and_then(|constant| limit[index].checked_add(&Dim::Static(constant)))
            .and_then(|span| span.floor_div(stride));
        match count {
            Some(Dim::Static(count)) if count < 0 => {
                return fail(op, format!("bad range {begin}..{} step {stride} in dim {index}", limit[index]));
            }
            Some(count) => dims.push(count),
            None => return fail(op, "sizes overflow 64 bits"),
        }
    }
    Ok(TensorType::new(operand.dtype, dims.into_iter().collect()))
}

pub(super) fn concatenate(op: &Op, operands: &[&TensorType], dimension: i64) -> InferResult {
    let Some(first) = operands.first() else {
        return fail(op, "needs at least one operand");
    };
    let axis = check_dim(op, dimension, first.rank())?;
    let mut total = Dim::Static(0);
    for operand in operands {
        if operand.dtype != first.dtype || operand.rank() != first.rank() {
            return fail(op, format!("operand {operand} does not match {first}"));
        }
        for index in 0..first.rank() {
            if index != axis && !same_dim(&operand.shape[index], &first.shape[index]) {
                return fail(op, format!("operand {operand} does not match {first} outside dim {axis}"));
            }
        }
        total = match total.checked_add(&operand.shape[axis]) {
            Some(total) => total,
            None => return fail(op, "sizes overflow 64 bits"),
        };
    }
    let mut shape = first.shape.clone();
    shape.0[axis] = total;
    Ok(TensorType::new(first.dtype, shape))
}

pub(super) fn pad(
    op: &Op,
    operand: &TensorType,
    value: &TensorType,
    low: &[i64],
    high: &[i64],
    interior: &[i64],
) -> InferResult {
    let rank = operand.rank();
    if value.rank() != 0 || value.dtype != operand.dtype {
        return fail(op, format!("padding value must be a {} scalar, found {value}", operand.dtype));
    }
    if low.len() != rank || high.len() != rank || interior.len() != rank {
        return fail(op, format!("low/high/interior must have {rank} entries"));
    }
    let mut dims = Vec::with_capacity(rank);
    for index in 0..rank {
        if interior[index] < 0 {
            return fail(op, format!("negative interior padding in dim {index}"));
        }
        let size = match &operand.shape[index] {
            Dim::Static(size) => *size,
            symbolic => {
                // A symbolic size is at least one, so `(size - 1) * interior` needs no clamp.
                let constant = low[index].checked_add(high[index]).and_then(|sum| sum.checked_sub(interior[index]));
                let padded = interior[index]
                    .checked_add(1)
                    .and_then(|factor| symbolic.checked_mul(&Dim::Static(factor)))
                    .and_then(|dim| dim.checked_add(&Dim::Static(constant?)));
                match padded {
                    Some(padded) => dims.push(padded),
                    None => return fail(op, "sizes overflow 64 bits"),
                }
                continue;
            }
        };
        let padded = checked(
            op,
            (size - 1)
                .max(0)
                .checked_mul(interior[index])
                .and_then(|inner| inner.checked_add(size))
                .and_then(|padded| padded.checked_add(low[index]))
                .and_then(|padded| padded.checked_add(high[index])),
        )?;
        if padded < 0 {
            return fail(op, format!("padding makes dim {index} negative"));
        }
        dims.push(Dim::Static(padded));
    }
    Ok(TensorType::new(operand.dtype, dims.into_iter().collect()))
}

/// `bitcast_convert`: equal widths keep the shape; a narrower result adds a trailing dim of the
/// width ratio; a wider one removes the trailing dim, which must be exactly the ratio (statically,
/// since the byte count of each result element has to be known).
pub(super) fn bitcast_convert(op: &Op, operand: &TensorType, dtype: crate::DType) -> InferResult {
    if operand.dtype.is_bool() || dtype.is_bool() {
        return fail(op, format!("bool has no bit width; cannot reinterpret {} as {dtype}", operand.dtype));
    }
    if operand.dtype.is_complex() || dtype.is_complex() {
        return fail(op, format!("cannot reinterpret {} as {dtype}; take `real` and `imag` parts", operand.dtype));
    }
    let (from, to) = (operand.dtype.byte_size(), dtype.byte_size());
    let mut dims = operand.shape.dims().to_vec();
    if to < from {
        dims.push(Dim::Static((from / to) as i64));
    } else if to > from {
        let ratio = (to / from) as i64;
        match dims.pop() {
            Some(Dim::Static(size)) if size == ratio => {}
            _ => {
                return fail(
                    op,
                    format!("{operand} to {dtype} needs a trailing dim of exactly {ratio} ({from}-byte parts of {to})"),
                );
            }
        }
    }
    Ok(TensorType::new(dtype, dims.into_iter().collect()))
}
