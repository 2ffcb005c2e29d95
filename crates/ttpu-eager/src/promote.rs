//! How eager operands take part in PyTorch's type promotion (the rules themselves are
//! [`ttpu_torch::promote`]'s), and broadcasting and dim checks on static shapes.
//!
//! Promotion has three priorities: tensors with dims, then zero-dim tensors, then Rust scalars
//! ("wrapped numbers"). A lower priority only matters when it is of a higher category (bool <
//! integer < float): `i64[3] + 2.5` is `f32`, but `f32[3] + f64[]` stays `f32`.

use smallvec::SmallVec;
use ttpu_ir::{DType, Dim, Shape};
use ttpu_torch::promote::{DEFAULT_FLOAT, Participant, category};

use crate::{Error, Result};

/// How an operand takes part in promotion.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Priority {
    /// A tensor of rank at least one.
    Dimensioned,
    /// A rank-0 tensor.
    ZeroDim,
    /// A scalar given as a Rust value.
    Wrapped,
}

impl Priority {
    /// The priority of a tensor of `rank` dims.
    pub(crate) fn of_rank(rank: usize) -> Priority {
        if rank == 0 { Priority::ZeroDim } else { Priority::Dimensioned }
    }
}

pub(crate) use ttpu_torch::promote::{promote_types, scalar_dtype};

/// `torch.result_type` of operands given as (dtype, priority), by PyTorch's rules in
/// [`ttpu_torch::promote`]; a wrapped scalar counts by its category only.
pub(crate) fn result_type(operands: &[(DType, Priority)]) -> DType {
    let participants: SmallVec<[Participant; 4]> = operands
        .iter()
        .map(|&(dtype, priority)| match priority {
            Priority::Dimensioned => Participant::Dim(dtype),
            Priority::ZeroDim => Participant::ZeroDim(dtype),
            Priority::Wrapped => Participant::Scalar(category(dtype)),
        })
        .collect();
    ttpu_torch::promote::result_type(&participants).unwrap_or(DEFAULT_FLOAT)
}

/// Static sizes of `shape`; eager tensors always have them.
pub(crate) fn static_dims(shape: &Shape) -> SmallVec<[i64; 4]> {
    shape.dims().iter().map(|dim| dim.as_static().unwrap_or(0)).collect()
}

/// The broadcast of two shapes, NumPy style (aligned on the right, size 1 stretches).
pub(crate) fn broadcast_shapes(lhs: &Shape, rhs: &Shape) -> Result<Shape> {
    // Most ops see equal shapes; skip the general walk and its allocation for them.
    if lhs == rhs {
        return Ok(lhs.clone());
    }
    let (lhs_dims, rhs_dims) = (static_dims(lhs), static_dims(rhs));
    let rank = lhs_dims.len().max(rhs_dims.len());
    let mut res = vec![0i64; rank];
    for from_right in 0..rank {
        let lhs_size = size_from_right(&lhs_dims, from_right);
        let rhs_size = size_from_right(&rhs_dims, from_right);
        res[rank - 1 - from_right] = match (lhs_size, rhs_size) {
            (a, b) if a == b => a,
            (1, b) => b,
            (a, 1) => a,
            (lhs_size, rhs_size) => {
                return Err(Error::Broadcast {
                    lhs: Box::new(lhs.clone()),
                    rhs: Box::new(rhs.clone()),
                    lhs_size,
                    rhs_size,
                });
            }
        };
    }
    Ok(res.into_iter().map(Dim::Static).collect())
}

fn size_from_right(dims: &[i64], from_right: usize) -> i64 {
    if from_right < dims.len() { dims[dims.len() - 1 - from_right] } else { 1 }
}

/// `dim` in `[-rank, rank)` made non-negative.
pub(crate) fn normalize_dim(dim: i64, rank: usize) -> Result<usize> {
    let signed_rank = i64::try_from(rank).unwrap_or(i64::MAX);
    let normalized = if dim < 0 { dim + signed_rank } else { dim };
    match usize::try_from(normalized) {
        Ok(index) if index < rank => Ok(index),
        _ => Err(Error::DimOutOfRange { dim, rank }),
    }
}

/// Distinct normalised dims, ascending.
pub(crate) fn normalize_dims(dims: &[i64], rank: usize) -> Result<Vec<usize>> {
    let mut res = Vec::with_capacity(dims.len());
    for &dim in dims {
        let index = normalize_dim(dim, rank)?;
        if res.contains(&index) {
            return Err(Error::RepeatedDim { dim: index as i64 });
        }
        res.push(index);
    }
    res.sort_unstable();
    Ok(res)
}
