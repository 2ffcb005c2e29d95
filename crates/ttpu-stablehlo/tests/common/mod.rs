//! Graph-building shorthands shared by the integration tests.

#![allow(dead_code)] // each test binary uses a different subset

use smallvec::SmallVec;
use ttpu_ir::{DType, GraphBuilder, Loc, TensorType, ValueId};

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

/// Lowers and unwraps, printing the error on failure.
pub fn lower(graph: &ttpu_ir::Graph) -> String {
    ttpu_stablehlo::lower(graph).unwrap_or_else(|error| panic!("{error}"))
}
pub mod graphs;
