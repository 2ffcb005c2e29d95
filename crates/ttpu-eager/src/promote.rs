//! PyTorch's type promotion (`torch.result_type`) and broadcasting, on dtypes and static shapes.
//!
//! Promotion follows PyTorch's three priorities: tensors with dims, then zero-dim tensors, then
//! Rust scalars ("wrapped numbers"). A lower priority only matters when it is of a higher
//! category (bool < integer < float): `i64[3] + 2.5` is `f32`, but `f32[3] + f64[]` stays `f32`.
//! A float scalar counts as the default dtype `f32`, an integer scalar as `i64`.

use smallvec::SmallVec;
use ttpu_ir::{DType, Dim, Scalar, Shape};

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

/// The dtype of a Rust scalar as it takes part in promotion as a Python number (of
/// [`Priority::Wrapped`]): only its category counts.
pub(crate) fn scalar_dtype(scalar: Scalar) -> DType {
    match scalar {
        Scalar::Float(_) => DType::F64,
        Scalar::Int(_) => DType::I64,
        Scalar::Bool(_) => DType::Bool,
    }
}

fn category(dtype: DType) -> u8 {
    if dtype.is_float() {
        2
    } else if dtype.is_bool() {
        0
    } else {
        1
    }
}

/// `torch.promote_types` for two dtypes.
pub(crate) fn promote_types(lhs: DType, rhs: DType) -> DType {
    use DType::*;
    if lhs == rhs {
        return lhs;
    }
    match (category(lhs), category(rhs)) {
        (0, _) => rhs,
        (_, 0) => lhs,
        (2, 1) => lhs,
        (1, 2) => rhs,
        (2, 2) => match (lhs, rhs) {
            // Neither half type holds the other, so PyTorch meets them at f32.
            (F16, BF16) | (BF16, F16) => F32,
            _ if float_rank(lhs) >= float_rank(rhs) => lhs,
            _ => rhs,
        },
        _ => match (lhs, rhs) {
            // u8 and a signed type of one byte meet at the next wider signed type.
            (U8, I8) | (I8, U8) => I16,
            (U8, other) | (other, U8) => other,
            _ if int_rank(lhs) >= int_rank(rhs) => lhs,
            _ => rhs,
        },
    }
}

fn float_rank(dtype: DType) -> u8 {
    match dtype {
        DType::F64 => 3,
        DType::F32 => 2,
        _ => 1,
    }
}

fn int_rank(dtype: DType) -> u8 {
    match dtype {
        DType::I64 => 4,
        DType::I32 => 3,
        DType::I16 => 2,
        _ => 1,
    }
}

/// The dtype a wrapped scalar of `dtype` counts as.
fn wrapped_dtype(dtype: DType) -> DType {
    if dtype.is_float() {
        DType::F32
    } else if dtype.is_bool() {
        DType::Bool
    } else {
        DType::I64
    }
}

/// PyTorch's `combine_categories`: the higher priority wins unless the lower one is of a higher
/// category.
fn combine(higher: Option<DType>, lower: Option<DType>) -> Option<DType> {
    match (higher, lower) {
        (Some(higher), Some(lower)) if category(lower) > category(higher) => Some(promote_types(higher, lower)),
        (Some(higher), _) => Some(higher),
        (None, lower) => lower,
    }
}

/// `torch.result_type` of operands given as (dtype, priority).
pub(crate) fn result_type(operands: &[(DType, Priority)]) -> DType {
    let mut tiers: [Option<DType>; 3] = [None; 3];
    for &(dtype, priority) in operands {
        let (tier, dtype) = match priority {
            Priority::Dimensioned => (0, dtype),
            Priority::ZeroDim => (1, dtype),
            Priority::Wrapped => (2, wrapped_dtype(dtype)),
        };
        tiers[tier] = Some(tiers[tier].map_or(dtype, |current| promote_types(current, dtype)));
    }
    combine(tiers[0], combine(tiers[1], tiers[2])).unwrap_or(DType::F32)
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
