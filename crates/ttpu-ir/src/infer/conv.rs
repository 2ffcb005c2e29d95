//! Inference for `convolution`, following the StableHLO spec's shape rules.

use super::{InferResult, check_dims, checked, dilated_size, fail, static_dim, window_output};
use crate::{ConvDims, Dim, Op, TensorType};

pub(super) fn convolution(op: &Op, input: &TensorType, kernel: &TensorType, dims: &ConvDims) -> InferResult {
    if input.dtype != kernel.dtype {
        return fail(op, format!("input {input} and kernel {kernel} dtypes differ"));
    }
    let spatial = dims.input_spatial.len();
    let rank = spatial + 2;
    if input.rank() != rank || kernel.rank() != rank {
        return fail(op, format!("input {input} and kernel {kernel} must have rank {rank}"));
    }
    for list in [dims.kernel_spatial.len(), dims.output_spatial.len(), dims.window_strides.len()] {
        if list != spatial {
            return fail(op, format!("every spatial attribute needs {spatial} entries"));
        }
    }
    if dims.padding.len() != spatial || dims.lhs_dilation.len() != spatial || dims.rhs_dilation.len() != spatial {
        return fail(op, format!("every spatial attribute needs {spatial} entries"));
    }
    let mut input_dims = vec![dims.input_batch, dims.input_feature];
    input_dims.extend(&dims.input_spatial);
    check_dims(op, &input_dims, rank)?;
    let mut kernel_dims = vec![dims.kernel_input_feature, dims.kernel_output_feature];
    kernel_dims.extend(&dims.kernel_spatial);
    check_dims(op, &kernel_dims, rank)?;
    let mut output_dims = vec![dims.output_batch, dims.output_feature];
    output_dims.extend(&dims.output_spatial);
    check_dims(op, &output_dims, rank)?;

    let groups = dims.feature_group_count;
    let batch_groups = dims.batch_group_count;
    if groups < 1 || batch_groups < 1 {
        return fail(op, "group counts must be positive");
    }
    let in_features = static_dim(op, &input.shape[dims.input_feature as usize], "the input feature dim")?;
    let kernel_in = static_dim(op, &kernel.shape[dims.kernel_input_feature as usize], "the kernel input feature dim")?;
    let kernel_out =
        static_dim(op, &kernel.shape[dims.kernel_output_feature as usize], "the kernel output feature dim")?;
    if in_features % groups != 0 || in_features / groups != kernel_in {
        return fail(
            op,
            format!("input features {in_features} / groups {groups} must equal kernel input features {kernel_in}"),
        );
    }
    if kernel_out % groups != 0 || kernel_out % batch_groups != 0 {
        return fail(op, format!("kernel output features {kernel_out} must divide by the group counts"));
    }
    let batch = match &input.shape[dims.input_batch as usize] {
        size if batch_groups > 1 => match size.floor_div(batch_groups) {
            Some(size) => size,
            None => return fail(op, "batch group count must be positive"),
        },
        other => other.clone(),
    };
    let mut shape = vec![Dim::Static(0); rank];
    shape[dims.output_batch as usize] = batch;
    shape[dims.output_feature as usize] = Dim::Static(kernel_out);
    for index in 0..spatial {
        let window = static_dim(op, &kernel.shape[dims.kernel_spatial[index] as usize], "a kernel spatial dim")?;
        let stride = dims.window_strides[index];
        if stride < 1 || dims.lhs_dilation[index] < 1 || dims.rhs_dilation[index] < 1 {
            return fail(op, "strides and dilations must be positive");
        }
        let dilated_window = checked(op, dilated_size(window, dims.rhs_dilation[index]))?;
        let size = &input.shape[dims.input_spatial[index] as usize];
        shape[dims.output_spatial[index] as usize] =
            window_output(op, size, dims.lhs_dilation[index], dims.padding[index], dilated_window, stride)?;
    }
    Ok(TensorType::new(input.dtype, shape.into_iter().collect()))
}
