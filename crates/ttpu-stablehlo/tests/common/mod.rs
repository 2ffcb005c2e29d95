//! Graph-building shorthands shared by the integration tests.

#![allow(dead_code)] // each test binary uses a different subset

use smallvec::SmallVec;
use ttpu_ir::{ConvDims, DType, GraphBuilder, Loc, TensorType, ValueId};

/// A `SmallVec` of dims from a slice.
pub fn dims<const N: usize>(values: &[i64]) -> SmallVec<[i64; N]>
where
    [i64; N]: smallvec::Array<Item = i64>,
{
    values.iter().copied().collect()
}

/// Adds a named input of static type.
pub fn input(builder: &mut GraphBuilder, name: &str, dtype: DType, shape: &[i64]) -> ValueId {
    builder.input(TensorType::from_static(dtype, shape), Some(name.into()))
}

/// Sets the location given to the nodes built next.
pub fn at(builder: &mut GraphBuilder, name: &str, origin: &str) {
    builder.set_loc(Loc { name: Some(name.into()), origin: Some(origin.into()) });
}

/// The dimension numbers of a 2-D convolution of an NCHW input with an OIHW kernel into an NCHW
/// output, with `strides`, `padding` (low, high per spatial dim), kernel dilation and groups.
pub fn nchw_conv2d(strides: [i64; 2], padding: [(i64, i64); 2], rhs_dilation: [i64; 2], groups: i64) -> ConvDims {
    ConvDims {
        input_batch: 0,
        input_feature: 1,
        input_spatial: dims(&[2, 3]),
        kernel_input_feature: 1,
        kernel_output_feature: 0,
        kernel_spatial: dims(&[2, 3]),
        output_batch: 0,
        output_feature: 1,
        output_spatial: dims(&[2, 3]),
        window_strides: dims(&strides),
        padding: padding.into_iter().collect(),
        lhs_dilation: dims(&[1, 1]),
        rhs_dilation: dims(&rhs_dilation),
        feature_group_count: groups,
        batch_group_count: 1,
    }
}

/// Lowers and unwraps, printing the error on failure.
pub fn lower(graph: &ttpu_ir::Graph) -> String {
    ttpu_stablehlo::lower(graph).unwrap_or_else(|error| panic!("{error}"))
}
pub mod graphs;
