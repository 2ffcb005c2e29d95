//! Neural-network ops: activations (`relu`, `gelu`, `silu`), `softmax` and `log_softmax`,
//! `layer_norm`, and the matrix products `matmul` and `linear`.
//!
//! Formulas follow PyTorch's CPU kernels (see `tape`), and `f16`/`bf16` activations and softmax
//! are computed in `f32` and rounded once, as there. Activations and normalisations need float
//! tensors, as in PyTorch.

use ttpu_ir::{DType, Scalar, Shape};

use super::Tensor;
use crate::promote::{Priority, broadcast_shapes, normalize_dim, promote_types, result_type};
use crate::tape::{Bits, FloatFn, MatmulPlan, TapeOp};
use crate::{Error, Result};

impl Tensor {
    /// `max(self, 0)`; not defined for bool.
    pub fn relu(&self) -> Result<Tensor> {
        if self.dtype().is_bool() {
            return Err(Error::UnsupportedDType { op: "relu", dtype: DType::Bool });
        }
        self.node.device.record(&[self], TapeOp::Relu)
    }

    /// GELU, `x/2 * (1 + erf(x/√2))`, as `torch.nn.functional.gelu` (`approximate='none'`);
    /// `erf` is the one the `.fx` importer uses, so both agree bit for bit.
    pub fn gelu(&self) -> Result<Tensor> {
        self.activation("gelu", FloatFn::Gelu)
    }

    /// GELU's tanh approximation, `x/2 * (1 + tanh(√(2/π) * (x + 0.044715 x³)))`, as
    /// `torch.nn.functional.gelu(approximate='tanh')`.
    pub fn gelu_tanh(&self) -> Result<Tensor> {
        self.activation("gelu", FloatFn::GeluTanh)
    }

    /// SiLU (swish), `x * sigmoid(x)`, as `torch.nn.functional.silu`.
    pub fn silu(&self) -> Result<Tensor> {
        self.activation("silu", FloatFn::Silu)
    }

    fn activation(&self, op: &'static str, function: FloatFn) -> Result<Tensor> {
        if !self.dtype().is_float() {
            return Err(Error::UnsupportedDType { op, dtype: self.dtype() });
        }
        self.node.device.record(&[self], TapeOp::FloatUnary(function))
    }

    /// `exp(x - max) / sum(exp(x - max))` along `dim`, floating-point tensors only.
    pub fn softmax(&self, dim: i64) -> Result<Tensor> {
        self.softmax_of("softmax", dim, false)
    }

    /// `log(softmax(x))` along `dim`, computed as `(x - max) - log(sum(exp(x - max)))` so that
    /// tiny probabilities keep their logarithm; floating-point tensors only.
    pub fn log_softmax(&self, dim: i64) -> Result<Tensor> {
        self.softmax_of("log_softmax", dim, true)
    }

    fn softmax_of(&self, op: &'static str, dim: i64, log: bool) -> Result<Tensor> {
        if !self.dtype().is_float() {
            return Err(Error::UnsupportedDType { op, dtype: self.dtype() });
        }
        let axis = normalize_dim(dim, self.rank())? as i64;
        self.node.device.record(&[self], TapeOp::Softmax { axis, log })
    }

    /// `(x - mean) / sqrt(var + eps) * weight + bias` over the trailing `normalized_shape` dims,
    /// with the biased variance, as `torch.nn.functional.layer_norm`.
    pub fn layer_norm(
        &self,
        normalized_shape: &[i64],
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
    ) -> Result<Tensor> {
        let dims = self.dims();
        let fits = normalized_shape.len() <= dims.len() && dims.ends_with(normalized_shape);
        if !fits || normalized_shape.is_empty() {
            return Err(Error::NormalizedShape {
                normalized_shape: normalized_shape.to_vec(),
                shape: Box::new(self.shape().clone()),
            });
        }
        if !self.dtype().is_float() {
            return Err(Error::UnsupportedDType { op: "layer_norm", dtype: self.dtype() });
        }
        for param in weight.iter().chain(bias.iter()) {
            if param.dims() != normalized_shape {
                return Err(Error::NormalizedShape {
                    normalized_shape: normalized_shape.to_vec(),
                    shape: Box::new(param.shape().clone()),
                });
            }
        }
        let mut operands = vec![self];
        operands.extend(weight);
        operands.extend(bias);
        let op = TapeOp::LayerNorm {
            normalized_rank: normalized_shape.len(),
            eps: Bits(Scalar::Float(eps)),
            has_weight: weight.is_some(),
        };
        self.node.device.record(&operands, op)
    }

    /// Matrix product, as `torch.matmul`: 1-D operands are vectors, and dims before the last
    /// two are batch dims that broadcast.
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        let mismatch = || Error::Matmul { lhs: Box::new(self.shape().clone()), rhs: Box::new(other.shape().clone()) };
        MatmulPlan::of(&self.dims(), &other.dims()).ok_or_else(mismatch)?;
        let dtype = result_type(&[(self.dtype(), Priority::Dimensioned), (other.dtype(), Priority::Dimensioned)]);
        if dtype.is_bool() {
            return Err(Error::UnsupportedDType { op: "matmul", dtype });
        }
        self.node.device.record(&[self, other], TapeOp::Matmul { dtype })
    }

    /// `self @ weight^T + bias`, as `torch.nn.functional.linear`: `weight` is `[out, in]` (or
    /// `[in]`, dropping the output dim), `self` is `[..., in]`, and `bias` broadcasts to the
    /// result `[..., out]`. Dtypes promote, as in [`matmul`](Self::matmul).
    pub fn linear(&self, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        let (input_dims, weight_dims) = (self.dims(), weight.dims());
        let in_features = match weight_dims.as_slice() {
            [_, in_features] | [in_features] => Some(in_features),
            _ => None,
        };
        if input_dims.last().is_none() || input_dims.last() != in_features {
            return Err(Error::Linear {
                input: Box::new(self.shape().clone()),
                weight: Box::new(weight.shape().clone()),
            });
        }
        let dtype = [Some(self), Some(weight), bias].into_iter().flatten().map(Tensor::dtype).reduce(promote_types);
        if let Some(dtype @ DType::Bool) = dtype {
            return Err(Error::UnsupportedDType { op: "linear", dtype });
        }
        let output_dims: Vec<i64> =
            input_dims[..input_dims.len() - 1].iter().chain(&weight_dims[..weight_dims.len() - 1]).copied().collect();
        let output = Shape::from_static(&output_dims);
        let mut operands = vec![self, weight];
        if let Some(bias) = bias {
            // The bias is added to the product, so it may broadcast but not widen it.
            if broadcast_shapes(&output, bias.shape()).ok().as_ref() != Some(&output) {
                return Err(Error::LinearBias { bias: Box::new(bias.shape().clone()), output: Box::new(output) });
            }
            operands.push(bias);
        }
        self.node.device.record(&operands, TapeOp::Linear)
    }
}
