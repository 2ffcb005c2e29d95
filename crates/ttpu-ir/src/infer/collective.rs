//! Collectives across replicas: operand and result types, and well-formed groups and pairs.

use super::reduce::check_kind;
use super::{InferResult, check_dim, fail};
use crate::{Collective, Dim, Op, TensorType};

pub(super) fn collective(op: &Op, collective: &Collective, operand: &TensorType) -> InferResult {
    if let Some(groups) = collective.groups() {
        check_groups(op, groups)?;
    }
    match collective {
        Collective::AllReduce { kind, .. } => {
            check_kind(op, *kind, operand.dtype)?;
            Ok(operand.clone())
        }
        Collective::AllGather { dimension, groups } => {
            let dim = check_dim(op, *dimension, operand.rank())?;
            resized(op, operand, dim, |size| size.checked_mul(groups[0].len() as i64))
        }
        Collective::ReduceScatter { kind, dimension, groups } => {
            check_kind(op, *kind, operand.dtype)?;
            let dim = check_dim(op, *dimension, operand.rank())?;
            let parts = groups[0].len() as i64;
            resized(op, operand, dim, |size| (size % parts == 0).then_some(size / parts))
        }
        Collective::AllToAll { split_dimension, concat_dimension, groups } => {
            let split = check_dim(op, *split_dimension, operand.rank())?;
            let concat = check_dim(op, *concat_dimension, operand.rank())?;
            let parts = groups[0].len() as i64;
            let split_type = resized(op, operand, split, |size| (size % parts == 0).then_some(size / parts))?;
            resized(op, &split_type, concat, |size| size.checked_mul(parts))
        }
        Collective::CollectivePermute { pairs } => {
            for (index, &(source, target)) in pairs.iter().enumerate() {
                if source < 0 || target < 0 {
                    return fail(op, format!("replica ids must be non-negative, found ({source}, {target})"));
                }
                if pairs[..index].iter().any(|&(earlier, _)| earlier == source) {
                    return fail(op, format!("replica {source} is a source twice"));
                }
                if pairs[..index].iter().any(|&(_, earlier)| earlier == target) {
                    return fail(op, format!("replica {target} is a target twice"));
                }
            }
            Ok(operand.clone())
        }
    }
}

/// Non-empty groups of one size, each replica id non-negative and in at most one group.
fn check_groups(op: &Op, groups: &[Vec<i64>]) -> InferResult<()> {
    let Some(first) = groups.first() else {
        return fail(op, "needs at least one replica group");
    };
    if first.is_empty() || groups.iter().any(|group| group.len() != first.len()) {
        return fail(op, "replica groups must be non-empty and of one size");
    }
    let mut seen = Vec::new();
    for &replica in groups.iter().flatten() {
        if replica < 0 {
            return fail(op, format!("replica ids must be non-negative, found {replica}"));
        }
        if seen.contains(&replica) {
            return fail(op, format!("replica {replica} is in more than one place of the groups"));
        }
        seen.push(replica);
    }
    Ok(())
}

/// `operand` with dim `dim` resized by `size`; the dim must be static.
fn resized(op: &Op, operand: &TensorType, dim: usize, size: impl Fn(i64) -> Option<i64>) -> InferResult {
    let Dim::Static(old) = operand.shape.dims()[dim] else {
        return fail(op, format!("dim {dim} must be static, found {}", operand.shape.dims()[dim]));
    };
    let Some(new) = size(old) else {
        return fail(op, format!("dim {dim} of size {old} does not fit the replica groups"));
    };
    let mut dims = operand.shape.dims().to_vec();
    dims[dim] = Dim::Static(new);
    Ok(TensorType::new(operand.dtype, dims.into_iter().collect()))
}
