//! Inference for `gather` and `scatter`, following the StableHLO spec's shape rules.

use super::{InferResult, check_dim, check_dims, fail};
use crate::{Dim, GatherDims, Op, ScatterDims, TensorType};

pub(super) fn gather(op: &Op, operand: &TensorType, indices: &TensorType, dims: &GatherDims) -> InferResult {
    if !indices.dtype.is_integer() {
        return fail(op, format!("indices must be integers, found {indices}"));
    }
    if dims.slice_sizes.len() != operand.rank() {
        return fail(op, format!("slice_sizes needs {} entries", operand.rank()));
    }
    let index_vector_dim = dims.index_vector_dim;
    if index_vector_dim < 0 || index_vector_dim as usize > indices.rank() {
        return fail(op, format!("index_vector_dim {index_vector_dim} is out of range"));
    }
    let mut removed: Vec<i64> = dims.collapsed_slice_dims.to_vec();
    removed.extend(&dims.operand_batching_dims);
    check_dims(op, &removed, operand.rank())?;
    check_dims(op, &dims.start_index_map, operand.rank())?;
    for (index, &size) in dims.slice_sizes.iter().enumerate() {
        let too_big = operand.shape[index].as_static().is_some_and(|bound| size > bound);
        let collapsed = removed.contains(&(index as i64));
        if size < 0 || too_big || (collapsed && size > 1) {
            return fail(op, format!("slice size {size} does not fit dim {index} of {operand}"));
        }
    }
    let batch_dims: Vec<Dim> = (0..indices.rank())
        .filter(|&index| index as i64 != index_vector_dim)
        .map(|index| indices.shape[index].clone())
        .collect();
    let offset_sizes: Vec<i64> = (0..operand.rank())
        .filter(|index| !removed.contains(&(*index as i64)))
        .map(|index| dims.slice_sizes[index])
        .collect();
    if offset_sizes.len() != dims.offset_dims.len() {
        return fail(op, "offset_dims must name every dim of the slice that is kept");
    }
    let rank = batch_dims.len() + offset_sizes.len();
    check_dims(op, &dims.offset_dims, rank)?;
    let mut batch_iter = batch_dims.into_iter();
    let mut offset_iter = offset_sizes.into_iter();
    let shape = (0..rank as i64)
        .map(|index| {
            if dims.offset_dims.contains(&index) {
                Dim::Static(offset_iter.next().expect("counted above"))
            } else {
                batch_iter.next().expect("counted above")
            }
        })
        .collect();
    Ok(TensorType::new(operand.dtype, shape))
}

pub(super) fn scatter(
    op: &Op,
    operand: &TensorType,
    indices: &TensorType,
    updates: &TensorType,
    dims: &ScatterDims,
) -> InferResult {
    if !indices.dtype.is_integer() {
        return fail(op, format!("indices must be integers, found {indices}"));
    }
    if updates.dtype != operand.dtype {
        return fail(op, format!("updates {updates} do not match operand {operand}"));
    }
    check_dim(op, dims.index_vector_dim, indices.rank() + 1)?;
    let mut removed: Vec<i64> = dims.inserted_window_dims.to_vec();
    removed.extend(&dims.input_batching_dims);
    check_dims(op, &removed, operand.rank())?;
    check_dims(op, &dims.scatter_dims_to_operand_dims, operand.rank())?;
    check_dims(op, &dims.update_window_dims, updates.rank())?;
    if dims.update_window_dims.len() + removed.len() != operand.rank() {
        return fail(op, "update_window_dims and inserted_window_dims must cover the operand");
    }
    Ok(operand.clone())
}
