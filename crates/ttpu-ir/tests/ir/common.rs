//! Helpers shared by the IR tests.

use ttpu_ir::{ConvDims, DType, GatherDims, Op, TensorType, infer};

/// A static tensor type.
pub fn ty(dtype: DType, dims: &[i64]) -> TensorType {
    TensorType::from_static(dtype, dims)
}

/// An `f32` tensor type.
pub fn f32s(dims: &[i64]) -> TensorType {
    ty(DType::F32, dims)
}

/// The single result type of `op` on `operands`, or the error text.
pub fn infer1(op: Op, operands: &[&TensorType]) -> Result<TensorType, String> {
    infer(&op, operands).map(|types| types[0].clone()).map_err(|error| error.to_string())
}

/// The inferred result type printed (`f32[2, 3]`), or the error text.
pub fn infer_str(op: Op, operands: &[&TensorType]) -> String {
    match infer1(op, operands) {
        Ok(ty) => ty.to_string(),
        Err(error) => error,
    }
}

/// A 2-d convolution in PyTorch's NCHW / OIHW layout.
pub fn conv2d(strides: [i64; 2], padding: [(i64, i64); 2], lhs_dilation: [i64; 2], rhs_dilation: [i64; 2]) -> ConvDims {
    ConvDims {
        input_batch: 0,
        input_feature: 1,
        input_spatial: [2, 3].as_slice().into(),
        kernel_input_feature: 1,
        kernel_output_feature: 0,
        kernel_spatial: [2, 3].as_slice().into(),
        output_batch: 0,
        output_feature: 1,
        output_spatial: [2, 3].as_slice().into(),
        window_strides: strides.as_slice().into(),
        padding: padding.as_slice().into(),
        lhs_dilation: lhs_dilation.as_slice().into(),
        rhs_dilation: rhs_dilation.as_slice().into(),
        feature_group_count: 1,
        batch_group_count: 1,
    }
}

/// An embedding lookup `table[ids]` on a rank-2 table with ids of rank `ids_rank`.
pub fn embedding_gather(ids_rank: i64, width: i64) -> GatherDims {
    GatherDims {
        offset_dims: [ids_rank].as_slice().into(),
        collapsed_slice_dims: [0].as_slice().into(),
        operand_batching_dims: Default::default(),
        start_indices_batching_dims: Default::default(),
        start_index_map: [0].as_slice().into(),
        index_vector_dim: ids_rank,
        slice_sizes: [1, width].as_slice().into(),
        indices_are_sorted: false,
    }
}
