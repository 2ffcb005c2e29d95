//! Inference for ops that move data without arithmetic.

use super::{InferResult, check_dim, check_dims, checked, fail, same_dim, static_dim};
use crate::{Dim, Op, Shape, TensorType};

pub(super) fn reshape(op: &Op, operand: &TensorType, shape: &Shape) -> InferResult {
    if shape.dims().iter().any(|dim| matches!(dim, Dim::Static(size) if *size < 0)) {
        return fail(op, format!("negative size in {shape}"));
    }
    let count = |shape: &Shape| match shape.is_static() {
        true => checked(op, shape.num_elements()).map(Some),
        false => Ok(None),
    };
    if let (Some(from), Some(to)) = (count(&operand.shape)?, count(shape)?)
        && from != to
    {
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

pub(super) fn slice(op: &Op, operand: &TensorType, start: &[i64], limit: &[i64], strides: &[i64]) -> InferResult {
    let rank = operand.rank();
    if start.len() != rank || limit.len() != rank || strides.len() != rank {
        return fail(op, format!("start/limit/strides must have {rank} entries"));
    }
    let mut dims = Vec::with_capacity(rank);
    for index in 0..rank {
        let (begin, end, stride) = (start[index], limit[index], strides[index]);
        if stride < 1 || begin < 0 || end < begin {
            return fail(op, format!("bad range {begin}..{end} step {stride} in dim {index}"));
        }
        let size = static_dim(op, &operand.shape[index], "a sliced dim")?;
        if end > size {
            return fail(op, format!("limit {end} exceeds size {size} of dim {index}"));
        }
        dims.push(Dim::Static(if end == begin { 0 } else { (end - begin - 1) / stride + 1 }));
    }
    Ok(TensorType::new(operand.dtype, dims.into_iter().collect()))
}

pub(super) fn concatenate(op: &Op, operands: &[&TensorType], dimension: i64) -> InferResult {
    let Some(first) = operands.first() else {
        return fail(op, "needs at least one operand");
    };
    let axis = check_dim(op, dimension, first.rank())?;
    let mut total = 0i64;
    for operand in operands {
        if operand.dtype != first.dtype || operand.rank() != first.rank() {
            return fail(op, format!("operand {operand} does not match {first}"));
        }
        for index in 0..first.rank() {
            if index != axis && !same_dim(&operand.shape[index], &first.shape[index]) {
                return fail(op, format!("operand {operand} does not match {first} outside dim {axis}"));
            }
        }
        total = checked(op, total.checked_add(static_dim(op, &operand.shape[axis], "the concatenated dim")?))?;
    }
    let mut shape = first.shape.clone();
    shape.0[axis] = Dim::Static(total);
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
        let size = static_dim(op, &operand.shape[index], "a padded dim")?;
        if interior[index] < 0 {
            return fail(op, format!("negative interior padding in dim {index}"));
        }
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
