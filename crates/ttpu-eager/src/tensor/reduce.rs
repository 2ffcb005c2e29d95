//! Reductions: sums, products, means, extremes and their indices, variance and standard
//! deviation.
//!
//! An empty dim list reduces every dim (PyTorch's `dim=None`). Each reduction has a `_keepdim`
//! twin that keeps the reduced dims with size 1. Sums and products of integers and bools are
//! `i64`, as in PyTorch; means, variances and deviations need a float tensor.

use ttpu_ir::{DType, ReduceKind, Scalar};

use super::Tensor;
use crate::promote::{normalize_dim, normalize_dims};
use crate::tape::{Bits, TapeOp};
use crate::{Error, Result};

/// Whether a reduction keeps reduced dims.
#[derive(Copy, Clone)]
enum Keep {
    Yes,
    No,
}

impl Tensor {
    /// Records `reduce` of `kind` over `dims` (all dims when empty), keeping reduced dims as
    /// size 1 when `keep` is set.
    fn reduce(&self, op: &'static str, kind: ReduceKind, dims: &[i64], dtype: DType, keep: Keep) -> Result<Tensor> {
        let axes = reduce_axes(dims, self.rank())?;
        let (mean, keep) = (op == "mean", matches!(keep, Keep::Yes));
        self.node.device.record(&[self], TapeOp::Reduce { kind, axes: axes.into(), dtype, mean, keep })
    }

    fn sum_dtype(&self) -> DType {
        // PyTorch sums integers and bools in i64 so small types do not overflow.
        if self.dtype().is_float() { self.dtype() } else { DType::I64 }
    }

    fn mean_dtype(&self) -> Result<DType> {
        if self.dtype().is_float() {
            Ok(self.dtype())
        } else {
            Err(Error::UnsupportedDType { op: "mean", dtype: self.dtype() })
        }
    }

    /// Sum over `dims` (every dim when `dims` is empty); integers and bools sum as `i64`.
    pub fn sum(&self, dims: &[i64]) -> Result<Tensor> {
        self.reduce("sum", ReduceKind::Sum, dims, self.sum_dtype(), Keep::No)
    }

    /// [`sum`](Self::sum) keeping the reduced dims with size 1.
    pub fn sum_keepdim(&self, dims: &[i64]) -> Result<Tensor> {
        self.reduce("sum", ReduceKind::Sum, dims, self.sum_dtype(), Keep::Yes)
    }

    /// Product over `dims` (every dim when `dims` is empty); integers and bools multiply as
    /// `i64`, as `torch.prod` does.
    pub fn prod(&self, dims: &[i64]) -> Result<Tensor> {
        self.reduce("prod", ReduceKind::Product, dims, self.sum_dtype(), Keep::No)
    }

    /// [`prod`](Self::prod) keeping the reduced dims with size 1.
    pub fn prod_keepdim(&self, dims: &[i64]) -> Result<Tensor> {
        self.reduce("prod", ReduceKind::Product, dims, self.sum_dtype(), Keep::Yes)
    }

    /// Mean over `dims` (every dim when `dims` is empty); floating-point tensors only.
    pub fn mean(&self, dims: &[i64]) -> Result<Tensor> {
        self.reduce("mean", ReduceKind::Sum, dims, self.mean_dtype()?, Keep::No)
    }

    /// [`mean`](Self::mean) keeping the reduced dims with size 1.
    pub fn mean_keepdim(&self, dims: &[i64]) -> Result<Tensor> {
        self.reduce("mean", ReduceKind::Sum, dims, self.mean_dtype()?, Keep::Yes)
    }

    /// Maximum over `dims` (every dim when `dims` is empty), values only (`torch.amax`).
    pub fn max(&self, dims: &[i64]) -> Result<Tensor> {
        self.reduce("max", ReduceKind::Max, dims, self.dtype(), Keep::No)
    }

    /// [`max`](Self::max) keeping the reduced dims with size 1.
    pub fn max_keepdim(&self, dims: &[i64]) -> Result<Tensor> {
        self.reduce("max", ReduceKind::Max, dims, self.dtype(), Keep::Yes)
    }

    /// Minimum over `dims` (every dim when `dims` is empty), values only (`torch.amin`).
    pub fn min(&self, dims: &[i64]) -> Result<Tensor> {
        self.reduce("min", ReduceKind::Min, dims, self.dtype(), Keep::No)
    }

    /// [`min`](Self::min) keeping the reduced dims with size 1.
    pub fn min_keepdim(&self, dims: &[i64]) -> Result<Tensor> {
        self.reduce("min", ReduceKind::Min, dims, self.dtype(), Keep::Yes)
    }

    /// The index of the first maximum along `dim`, or in the flattened tensor when `dim` is
    /// `None`, as `i64` (`torch.argmax`). NaN counts as the maximum, as in PyTorch. Not defined
    /// for bool, nor over an empty dim.
    pub fn argmax(&self, dim: Option<i64>) -> Result<Tensor> {
        self.arg_extreme("argmax", ReduceKind::Max, dim, Keep::No)
    }

    /// [`argmax`](Self::argmax) keeping the reduced dim (every dim when `dim` is `None`) with
    /// size 1.
    pub fn argmax_keepdim(&self, dim: Option<i64>) -> Result<Tensor> {
        self.arg_extreme("argmax", ReduceKind::Max, dim, Keep::Yes)
    }

    /// The index of the first minimum along `dim`, or in the flattened tensor when `dim` is
    /// `None`, as `i64` (`torch.argmin`). NaN counts as the minimum, as in PyTorch.
    pub fn argmin(&self, dim: Option<i64>) -> Result<Tensor> {
        self.arg_extreme("argmin", ReduceKind::Min, dim, Keep::No)
    }

    /// [`argmin`](Self::argmin) keeping the reduced dim (every dim when `dim` is `None`) with
    /// size 1.
    pub fn argmin_keepdim(&self, dim: Option<i64>) -> Result<Tensor> {
        self.arg_extreme("argmin", ReduceKind::Min, dim, Keep::Yes)
    }

    fn arg_extreme(&self, op: &'static str, kind: ReduceKind, dim: Option<i64>, keep: Keep) -> Result<Tensor> {
        if self.dtype().is_bool() {
            return Err(Error::UnsupportedDType { op, dtype: DType::Bool });
        }
        let rank = self.rank();
        // A rank-0 tensor takes dim 0 or -1, as in PyTorch.
        let axis = match dim {
            Some(dim) => Some(normalize_dim(dim, rank.max(1)).map_err(|_| Error::DimOutOfRange { dim, rank })?),
            None => None,
        };
        let empty = match axis {
            Some(axis) if rank > 0 => self.dims()[axis] == 0,
            _ => self.numel() == 0,
        };
        if empty {
            return Err(Error::EmptyReduction { op, shape: Box::new(self.shape().clone()) });
        }
        self.node.device.record(&[self], TapeOp::ArgExtreme { kind, axis, keep: matches!(keep, Keep::Yes) })
    }

    /// The variance over `dims` (every dim when `dims` is empty): the sum of squared deviations
    /// from the mean over `n - correction` (`1` is Bessel's correction, `0` the biased
    /// variance), as `torch.var`; no degrees of freedom left give infinity or NaN, as there.
    /// Floating-point tensors only; `f16`/`bf16` are computed in `f32`.
    pub fn var(&self, dims: &[i64], correction: f64) -> Result<Tensor> {
        self.variance("var", dims, correction, Keep::No)
    }

    /// [`var`](Self::var) keeping the reduced dims with size 1.
    pub fn var_keepdim(&self, dims: &[i64], correction: f64) -> Result<Tensor> {
        self.variance("var", dims, correction, Keep::Yes)
    }

    /// The standard deviation: the square root of [`var`](Self::var), as `torch.std`.
    pub fn std(&self, dims: &[i64], correction: f64) -> Result<Tensor> {
        self.variance("std", dims, correction, Keep::No)
    }

    /// [`std`](Self::std) keeping the reduced dims with size 1.
    pub fn std_keepdim(&self, dims: &[i64], correction: f64) -> Result<Tensor> {
        self.variance("std", dims, correction, Keep::Yes)
    }

    fn variance(&self, op: &'static str, dims: &[i64], correction: f64, keep: Keep) -> Result<Tensor> {
        if !self.dtype().is_float() {
            return Err(Error::UnsupportedDType { op, dtype: self.dtype() });
        }
        let axes = reduce_axes(dims, self.rank())?;
        let op = TapeOp::Variance {
            axes: axes.into(),
            correction: Bits(Scalar::Float(correction)),
            keep: matches!(keep, Keep::Yes),
            sqrt: op == "std",
        };
        self.node.device.record(&[self], op)
    }
}

/// Reduced axes, ascending; every axis when `dims` is empty (PyTorch's `dim=None`).
fn reduce_axes(dims: &[i64], rank: usize) -> Result<Vec<i64>> {
    if dims.is_empty() {
        return Ok((0..rank as i64).collect());
    }
    Ok(normalize_dims(dims, rank)?.into_iter().map(|index| index as i64).collect())
}
