//! Gathers by index tensors: `index_select`, `gather` and `embedding`, each one IR `gather`.
//!
//! Indices must be `i64` or `i32` tensors. Their values live on the device, so they are not
//! checked when the op is recorded: where PyTorch raises for a negative or too large index, XLA's
//! `gather` clamps it into range (a negative index reads position 0, one past the end the last
//! position). Shapes and dtypes are checked as for every op.

use ttpu_ir::DType;

use super::Tensor;
use crate::promote::normalize_dim;
use crate::tape::TapeOp;
use crate::{Error, Result};

impl Tensor {
    /// The slices of `self` along `dim` at the positions in `index` (one dim, or a rank-0 index
    /// for one slice), in index order, as `torch.index_select`. The result has `self`'s shape
    /// with `dim` resized to the number of indices.
    pub fn index_select(&self, dim: i64, index: &Tensor) -> Result<Tensor> {
        let axis = normalize_dim(dim, self.rank())?;
        check_indices("index_select", index)?;
        if index.rank() > 1 {
            return Err(Error::Index {
                op: "index_select",
                message: format!("index must have at most one dim, found shape {}", index.shape()),
            });
        }
        if self.dims()[axis] == 0 {
            return Err(Error::Index {
                op: "index_select",
                message: format!("dim {axis} of shape {} has no element to select", self.shape()),
            });
        }
        self.node.device.record(&[self, index], TapeOp::IndexSelect { axis })
    }

    /// `out[p] = self[p with p[dim] = index[p]]`, as `torch.gather`: `index` has `self`'s rank,
    /// sizes no larger than `self`'s outside `dim`, and the result has its shape.
    pub fn gather(&self, dim: i64, index: &Tensor) -> Result<Tensor> {
        let axis = normalize_dim(dim, self.rank())?;
        check_indices("gather", index)?;
        let (dims, index_dims) = (self.dims(), index.dims());
        let fits = index_dims.len() == dims.len()
            && index_dims
                .iter()
                .zip(&dims)
                .enumerate()
                .all(|(dim, (index_size, size))| dim == axis || index_size <= size);
        if !fits {
            return Err(Error::Index {
                op: "gather",
                message: format!(
                    "index of shape {} does not fit the input of shape {} outside dim {axis}",
                    index.shape(),
                    self.shape()
                ),
            });
        }
        if self.numel() == 0 {
            return Err(Error::Index {
                op: "gather",
                message: format!("the input of shape {} has no element to gather", self.shape()),
            });
        }
        self.node.device.record(&[self, index], TapeOp::Gather { axis })
    }

    /// The rows of `weight` (a matrix, one row per token) at `indices`, as
    /// `torch.nn.functional.embedding`: the result has the indices' shape plus the row width.
    pub fn embedding(weight: &Tensor, indices: &Tensor) -> Result<Tensor> {
        check_indices("embedding", indices)?;
        match weight.dims().as_slice() {
            [rows, _] if *rows > 0 => {}
            _ => {
                return Err(Error::Index {
                    op: "embedding",
                    message: format!("weight must be a matrix of at least one row, found shape {}", weight.shape()),
                });
            }
        }
        weight.node.device.record(&[weight, indices], TapeOp::Embedding)
    }
}

/// Refuses index tensors that are not `i64` or `i32`, as PyTorch does.
fn check_indices(op: &'static str, index: &Tensor) -> Result<()> {
    if matches!(index.dtype(), DType::I64 | DType::I32) {
        return Ok(());
    }
    Err(Error::Index { op, message: format!("indices must be i64 or i32, found {}", index.dtype()) })
}
