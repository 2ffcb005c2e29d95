//! Layout ops: shapes (`reshape`, `flatten`, `squeeze`, `unsqueeze`, `expand`), dim orders
//! (`permute`, `transpose`), slices and joins (`slice`, `cat`, `stack`).
//!
//! Dims may be negative, counting from the end, as in PyTorch. A layout op that changes nothing
//! returns the tensor itself and records no step.

use smallvec::SmallVec;

use super::{Tensor, checked_shape};
use crate::promote::{normalize_dim, promote_types};
use crate::tape::TapeOp;
use crate::{Error, Result};

impl Tensor {
    /// The same elements in another shape; one size may be `-1` and is inferred.
    pub fn reshape(&self, dims: &[i64]) -> Result<Tensor> {
        let error = || Error::Reshape { from: Box::new(self.shape().clone()), to: dims.to_vec() };
        let total = i64::try_from(self.numel()).map_err(|_| error())?;
        let inferred = dims.iter().filter(|&&size| size == -1).count();
        if inferred > 1 || dims.iter().any(|&size| size < -1) {
            return Err(error());
        }
        let known = dims
            .iter()
            .filter(|&&size| size != -1)
            .try_fold(1i64, |acc, &size| acc.checked_mul(size))
            .ok_or_else(error)?;
        let resolved: Vec<i64> = if inferred == 1 {
            if known == 0 || total % known != 0 {
                return Err(error());
            }
            dims.iter().map(|&size| if size == -1 { total / known } else { size }).collect()
        } else {
            dims.to_vec()
        };
        if resolved.iter().try_fold(1i64, |acc, &size| acc.checked_mul(size)) != Some(total) {
            return Err(error());
        }
        if resolved == self.dims() {
            return Ok(self.clone());
        }
        self.node.device.record(&[self], TapeOp::Reshape(resolved.into()))
    }

    /// Merges dims `start_dim..=end_dim` into one, as `torch.flatten`; a rank-0 tensor becomes
    /// one element of rank 1.
    pub fn flatten(&self, start_dim: i64, end_dim: i64) -> Result<Tensor> {
        let rank = self.rank();
        // A rank-0 tensor takes dims 0 and -1, as in PyTorch.
        let normalize = |dim: i64| normalize_dim(dim, rank.max(1)).map_err(|_| Error::DimOutOfRange { dim, rank });
        let (start, end) = (normalize(start_dim)?, normalize(end_dim)?);
        if start > end {
            return Err(Error::Flatten { start_dim, end_dim });
        }
        if rank == 0 {
            return self.reshape(&[1]);
        }
        let dims = self.dims();
        let merged: i64 = dims[start..=end].iter().product();
        let res: Vec<i64> = dims[..start].iter().chain([&merged]).chain(&dims[end + 1..]).copied().collect();
        self.reshape(&res)
    }

    /// Reorders dims: result dim `i` is dim `permutation[i]` of `self`.
    pub fn permute(&self, permutation: &[i64]) -> Result<Tensor> {
        let rank = self.rank();
        let error = || Error::Permutation { permutation: permutation.to_vec(), rank };
        if permutation.len() != rank {
            return Err(error());
        }
        let mut order = SmallVec::<[i64; 4]>::with_capacity(rank);
        for &dim in permutation {
            let index = normalize_dim(dim, rank).map_err(|_| error())?;
            if order.contains(&(index as i64)) {
                return Err(error());
            }
            order.push(index as i64);
        }
        self.node.device.record(&[self], TapeOp::Transpose(order))
    }

    /// Swaps dims `dim0` and `dim1`.
    pub fn transpose(&self, dim0: i64, dim1: i64) -> Result<Tensor> {
        let rank = self.rank();
        let (first, second) = (normalize_dim(dim0, rank)?, normalize_dim(dim1, rank)?);
        let mut order: Vec<i64> = (0..rank as i64).collect();
        order.swap(first, second);
        self.permute(&order)
    }

    /// Inserts a dim of size 1 at `dim` (in `[-rank - 1, rank]`).
    pub fn unsqueeze(&self, dim: i64) -> Result<Tensor> {
        let index = normalize_dim(dim, self.rank() + 1)?;
        let mut dims = self.dims();
        dims.insert(index, 1);
        self.reshape(&dims)
    }

    /// Removes dim `dim` if its size is 1 (otherwise returns the tensor unchanged, as PyTorch).
    pub fn squeeze_dim(&self, dim: i64) -> Result<Tensor> {
        let index = normalize_dim(dim, self.rank())?;
        let mut dims = self.dims();
        if dims[index] != 1 {
            return Ok(self.clone());
        }
        dims.remove(index);
        self.reshape(&dims)
    }

    /// Removes every dim of size 1, as `torch.squeeze` without a dim.
    pub fn squeeze(&self) -> Result<Tensor> {
        let dims: Vec<i64> = self.dims().into_iter().filter(|&size| size != 1).collect();
        self.reshape(&dims)
    }

    /// Elements `start..end` step `step` along `dim`, as `x[..., start:end:step]`: negative
    /// bounds count from the end and bounds past the ends are clamped.
    pub fn slice(&self, dim: i64, start: i64, end: i64, step: i64) -> Result<Tensor> {
        let axis = normalize_dim(dim, self.rank())?;
        if step < 1 {
            return Err(Error::SliceStep { step });
        }
        let dims = self.dims();
        let size = dims[axis];
        let clamp = |bound: i64| if bound < 0 { bound.saturating_add(size).max(0) } else { bound.min(size) };
        let (start, end) = (clamp(start), clamp(end).max(clamp(start)));
        self.node.device.record(&[self], TapeOp::Slice { axis, start, end, step })
    }

    /// Joins `tensors` along `dim`; dtypes promote and every other dim must match.
    pub fn cat(tensors: &[&Tensor], dim: i64) -> Result<Tensor> {
        let Some(first) = tensors.first() else {
            return Err(Error::Cat { message: "expected at least one tensor".into() });
        };
        let axis = normalize_dim(dim, first.rank())?;
        let reference = first.dims();
        for tensor in tensors {
            let dims = tensor.dims();
            let matches = dims.len() == reference.len()
                && dims.iter().zip(&reference).enumerate().all(|(index, (a, b))| index == axis || a == b);
            if !matches {
                return Err(Error::Cat {
                    message: format!("shapes {} and {} differ outside dim {axis}", first.shape(), tensor.shape()),
                });
            }
        }
        let dtype = tensors.iter().map(|tensor| tensor.dtype()).reduce(promote_types).unwrap_or(first.dtype());
        first.node.device.record(tensors, TapeOp::Cat { axis, dtype })
    }

    /// Joins `tensors`, which must all have one shape, along a new dim `dim` (in
    /// `[-rank - 1, rank]`), as `torch.stack`; dtypes promote.
    pub fn stack(tensors: &[&Tensor], dim: i64) -> Result<Tensor> {
        let Some(first) = tensors.first() else {
            return Err(Error::Stack { message: "expected at least one tensor".into() });
        };
        let axis = normalize_dim(dim, first.rank() + 1)?;
        if let Some((index, other)) = tensors.iter().enumerate().find(|(_, tensor)| tensor.shape() != first.shape()) {
            return Err(Error::Stack {
                message: format!(
                    "tensor {index} has shape {}, but tensor 0 has shape {}",
                    other.shape(),
                    first.shape()
                ),
            });
        }
        first.node.device.record(tensors, TapeOp::Stack { axis })
    }

    /// Broadcasts to `dims`, as `torch.broadcast_to` (which is [`expand`](Self::expand)).
    pub fn broadcast_to(&self, dims: &[i64]) -> Result<Tensor> {
        self.expand(dims)
    }

    /// A view of `sizes`, as `tensor.expand`: size-1 dims stretch to any size, new dims may be
    /// added in front, and `-1` keeps an existing dim's size.
    pub fn expand(&self, sizes: &[i64]) -> Result<Tensor> {
        let from = self.dims();
        let error = || Error::Expand { from: Box::new(self.shape().clone()), to: sizes.to_vec() };
        let offset = sizes.len().checked_sub(from.len()).ok_or_else(error)?;
        let mut target = Vec::with_capacity(sizes.len());
        for (index, &size) in sizes.iter().enumerate() {
            // The dims added in front have no existing size, so `-1` cannot keep one there.
            let existing = index.checked_sub(offset).map(|index| from[index]);
            let resolved = match (size, existing) {
                (-1, Some(existing)) => existing,
                (size, Some(existing)) if size == existing => size,
                (size, Some(1) | None) if size >= 0 => size,
                _ => return Err(error()),
            };
            target.push(resolved);
        }
        checked_shape(&target)?;
        if target == from {
            return Ok(self.clone());
        }
        self.node.device.record(&[self], TapeOp::BroadcastTo(target.into()))
    }
}
