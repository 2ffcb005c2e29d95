//! Inference for contractions and reductions.

use super::{InferResult, check_dims, checked, dilated_size, fail, same_dim, window_output};
use crate::{DType, Dim, DotDims, Op, ReduceKind, TensorType, Window};

pub(super) fn dot_general(op: &Op, lhs: &TensorType, rhs: &TensorType, dims: &DotDims) -> InferResult {
    if lhs.dtype != rhs.dtype {
        return fail(op, format!("operand dtypes differ: {lhs} vs {rhs}"));
    }
    if dims.lhs_batch.len() != dims.rhs_batch.len() || dims.lhs_contracting.len() != dims.rhs_contracting.len() {
        return fail(op, "batch and contracting dims must pair up");
    }
    let lhs_used: Vec<i64> = dims.lhs_batch.iter().chain(&dims.lhs_contracting).copied().collect();
    let rhs_used: Vec<i64> = dims.rhs_batch.iter().chain(&dims.rhs_contracting).copied().collect();
    let lhs_indices = check_dims(op, &lhs_used, lhs.rank())?;
    let rhs_indices = check_dims(op, &rhs_used, rhs.rank())?;
    for (&lhs_index, &rhs_index) in lhs_indices.iter().zip(&rhs_indices) {
        if !same_dim(&lhs.shape[lhs_index], &rhs.shape[rhs_index]) {
            return fail(op, format!("lhs dim {lhs_index} of {lhs} does not match rhs dim {rhs_index} of {rhs}"));
        }
    }
    let mut shape: Vec<Dim> = dims.lhs_batch.iter().map(|&dim| lhs.shape[dim as usize].clone()).collect();
    shape.extend((0..lhs.rank()).filter(|index| !lhs_indices.contains(index)).map(|index| lhs.shape[index].clone()));
    shape.extend((0..rhs.rank()).filter(|index| !rhs_indices.contains(index)).map(|index| rhs.shape[index].clone()));
    Ok(TensorType::new(lhs.dtype, shape.into_iter().collect()))
}

pub(super) fn reduce(op: &Op, kind: ReduceKind, operand: &TensorType, dimensions: &[i64]) -> InferResult {
    check_kind(op, kind, operand.dtype)?;
    let reduced = check_dims(op, dimensions, operand.rank())?;
    if dimensions.windows(2).any(|pair| pair[0] >= pair[1]) {
        return fail(op, format!("dimensions {dimensions:?} must be ascending"));
    }
    let shape = (0..operand.rank()).filter(|index| !reduced.contains(index)).map(|index| operand.shape[index].clone());
    Ok(TensorType::new(operand.dtype, shape.collect()))
}

pub(super) fn reduce_window(op: &Op, kind: ReduceKind, operand: &TensorType, window: &Window) -> InferResult {
    check_kind(op, kind, operand.dtype)?;
    let rank = operand.rank();
    let Window { dimensions, strides, base_dilations, window_dilations, padding } = window;
    if [dimensions.len(), strides.len(), base_dilations.len(), window_dilations.len(), padding.len()]
        .iter()
        .any(|&len| len != rank)
    {
        return fail(op, format!("window attributes must have {rank} entries"));
    }
    let mut shape = Vec::with_capacity(rank);
    for index in 0..rank {
        if dimensions[index] < 1 || strides[index] < 1 || base_dilations[index] < 1 || window_dilations[index] < 1 {
            return fail(op, format!("window sizes, strides and dilations must be positive in dim {index}"));
        }
        let dilated_window = checked(op, dilated_size(dimensions[index], window_dilations[index]))?;
        let size = &operand.shape[index];
        shape.push(window_output(op, size, base_dilations[index], padding[index], dilated_window, strides[index])?);
    }
    Ok(TensorType::new(operand.dtype, shape.into_iter().collect()))
}

pub(super) fn check_kind(op: &Op, kind: ReduceKind, dtype: DType) -> InferResult<()> {
    let ok = match kind {
        // A complex reduction would need a complex init literal, which the IR does not have.
        _ if dtype.is_complex() => false,
        ReduceKind::And | ReduceKind::Or => !dtype.is_float(),
        _ => true,
    };
    if !ok {
        return fail(op, format!("`{}` reduction is not defined for {dtype}", kind.mnemonic()));
    }
    Ok(())
}
