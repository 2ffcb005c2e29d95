//! `Tensor`: a handle to a value that is either still pending on its device's tape or held in a
//! device buffer, and the PyTorch-style ops that record new tensors.
//!
//! A tensor holds a slot of the pending tape or an `Arc` of its buffer, never a pointer to
//! another tensor. Every op checks shapes and dtypes while recording (the checks here, and the
//! graph builder the first time a signature is seen, see `tape`), so errors surface at the call
//! that caused them. Each op records one tape step; broadcasting and PyTorch type promotion
//! become explicit `broadcast_in_dim` and `convert` nodes when the tape is built into IR.

use std::fmt;
use std::sync::{Arc, OnceLock};

use smallvec::SmallVec;
use ttpu_ir::{BinaryOp, CompareDirection, DType, ReduceKind, Scalar, Shape, TensorType, UnaryOp};
use ttpu_pjrt::{Buffer, HostBuffer};

use crate::element::{Element, element_type};
use crate::promote::{
    Priority, broadcast_shapes, normalize_dim, normalize_dims, promote_types, result_type, static_dims,
};
use crate::tape::{Bits, MatmulPlan, Slot, TapeOp};
use crate::{Device, Error, Result};

/// A tensor on a [`Device`]. Cheap to clone (a shared handle); `Send + Sync`.
#[derive(Clone)]
pub struct Tensor {
    pub(crate) node: Arc<TensorNode>,
}

pub(crate) struct TensorNode {
    pub(crate) device: Device,
    /// Interned per device (one `Arc` per distinct type): recording copies no type, and the
    /// node stays a small allocation.
    pub(crate) ty: Arc<TensorType>,
    /// Where a recorded tensor's value is computed: `slot` of the pending tape of `epoch`.
    /// `None` for tensors made from host data.
    pub(crate) recorded_at: Option<RecordedAt>,
    /// The value on the device, once computed. Set once and never replaced, so reading it needs
    /// no lock (recording reads it for every operand).
    pub(crate) buffer: OnceLock<Arc<Buffer>>,
}

/// The tape slot a recorded tensor's value comes from.
#[derive(Copy, Clone, Debug)]
pub(crate) struct RecordedAt {
    pub(crate) epoch: u64,
    pub(crate) slot: Slot,
}

/// The second operand of an elementwise op.
#[derive(Clone, Copy)]
enum Operand<'a> {
    Tensor(&'a Tensor),
    Scalar(Scalar, DType),
}

impl Tensor {
    /// A tensor of `dims` holding `data` (row-major), copied to `device` now.
    pub fn from_slice<T: Element>(device: &Device, data: &[T], dims: &[i64]) -> Result<Tensor> {
        let shape = checked_shape(dims)?;
        let expected = element_count(dims)?;
        if data.len() != expected {
            return Err(Error::DataLength { shape: Box::new(shape), expected, actual: data.len() });
        }
        let mut bytes = Vec::with_capacity(data.len() * T::DTYPE.byte_size());
        for &value in data {
            value.write(&mut bytes);
        }
        Tensor::from_bytes(device, T::DTYPE, &bytes, dims)
    }

    /// A tensor of `dtype` and `dims` from raw little-endian bytes, copied to `device` now.
    pub fn from_bytes(device: &Device, dtype: DType, bytes: &[u8], dims: &[i64]) -> Result<Tensor> {
        let shape = checked_shape(dims)?;
        let expected = element_count(dims)?;
        if bytes.len() != expected.saturating_mul(dtype.byte_size()) {
            return Err(Error::DataLength {
                shape: Box::new(shape),
                expected,
                actual: bytes.len() / dtype.byte_size(),
            });
        }
        let buffer = device.inner.client.buffer_from_host(bytes, element_type(dtype), dims)?;
        device.count_to_device(bytes.len());
        Tensor::ready(device, TensorType::new(dtype, shape), buffer)
    }

    /// Every tensor of a safetensors file's bytes, sorted by name, copied to `device`.
    pub fn from_safetensors(device: &Device, bytes: &[u8]) -> Result<Vec<(String, Tensor)>> {
        let file = safetensors::SafeTensors::deserialize(bytes)
            .map_err(|error| Error::Safetensors { message: error.to_string() })?;
        let mut res = Vec::new();
        for (name, view) in file.iter() {
            let dtype = dtype_from_safetensors(view.dtype()).ok_or_else(|| Error::Safetensors {
                message: format!("tensor `{name}` has unsupported dtype {:?}", view.dtype()),
            })?;
            let dims = view
                .shape()
                .iter()
                .map(|&size| i64::try_from(size))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| Error::Safetensors { message: format!("tensor `{name}` is too large") })?;
            res.push((name.to_owned(), Tensor::from_bytes(device, dtype, view.data(), &dims)?));
        }
        // The parser iterates a hash map; sorting makes the order independent of it.
        res.sort_by(|(lhs, _), (rhs, _)| lhs.cmp(rhs));
        Ok(res)
    }

    /// A tensor of `dims` whose every element is `value` (recorded, not transferred).
    pub fn full<T: Element>(device: &Device, value: T, dims: &[i64]) -> Result<Tensor> {
        checked_shape(dims)?;
        device.record(&[], TapeOp::Full { dtype: T::DTYPE, value: Bits(value.to_scalar()), dims: dims.into() })
    }

    /// A rank-0 tensor holding `value`.
    pub fn scalar<T: Element>(device: &Device, value: T) -> Result<Tensor> {
        Tensor::full(device, value, &[])
    }

    fn ready(device: &Device, ty: TensorType, buffer: Buffer) -> Result<Tensor> {
        let ty = device.state()?.types.intern(ty);
        let node =
            TensorNode { device: device.clone(), ty, recorded_at: None, buffer: OnceLock::from(Arc::new(buffer)) };
        Ok(Tensor { node: Arc::new(node) })
    }

    /// The device holding this tensor.
    pub fn device(&self) -> &Device {
        &self.node.device
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.node.ty.dtype
    }

    /// Shape.
    pub fn shape(&self) -> &Shape {
        &self.node.ty.shape
    }

    /// Sizes of the dims, outermost first.
    pub fn dims(&self) -> Vec<i64> {
        static_dims(self.shape()).to_vec()
    }

    /// Number of dims.
    pub fn rank(&self) -> usize {
        self.shape().rank()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        // Broadcasting can describe more elements than fit in memory; saturate rather than wrap.
        self.dims().iter().fold(1usize, |acc, &size| acc.saturating_mul(usize::try_from(size).unwrap_or(0)))
    }

    /// Whether the value is still pending (not computed on the device yet).
    pub fn is_pending(&self) -> bool {
        self.node.buffer.get().is_none()
    }

    /// Computes the tensor (and all other pending live tensors) on the device, without copying
    /// it to the host.
    pub fn materialize(&self) -> Result<()> {
        self.node.device.buffer(self).map(drop)
    }

    /// The tensor's data copied to the host.
    pub fn to_host(&self) -> Result<HostBuffer> {
        let buffer = self.node.device.buffer(self)?;
        let host = buffer.to_host()?;
        self.node.device.count_to_host(host.data.len());
        Ok(host)
    }

    /// The elements in row-major order; `T` must be the tensor's dtype.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype() {
            return Err(Error::DTypeMismatch { actual: self.dtype(), requested: T::DTYPE });
        }
        let host = self.to_host()?;
        Ok(host.data.chunks_exact(T::DTYPE.byte_size()).map(T::read).collect())
    }

    /// The single element of a one-element tensor; `T` must be the tensor's dtype.
    pub fn item<T: Element>(&self) -> Result<T> {
        if self.numel() != 1 {
            return Err(Error::NotOneElement { shape: Box::new(self.shape().clone()) });
        }
        self.to_vec::<T>()?.pop().ok_or_else(|| Error::internal("a one-element tensor read as empty"))
    }

    fn priority(&self) -> Priority {
        if self.rank() == 0 { Priority::ZeroDim } else { Priority::Dimensioned }
    }

    /// Records an elementwise op of `self` and `rhs`: both are promoted to a dtype (from the
    /// common dtype through `compute_dtype`) and broadcast to one shape, then `make` gives the
    /// op on that dtype and the scalar operand, if any.
    fn elementwise(
        &self,
        rhs: Operand<'_>,
        op: &'static str,
        compute_dtype: impl FnOnce(DType) -> Option<DType>,
        make: impl FnOnce(DType, Option<Bits>) -> TapeOp,
    ) -> Result<Tensor> {
        let scalar_shape;
        let (rhs_dtype, rhs_priority, rhs_shape) = match rhs {
            Operand::Tensor(tensor) => (tensor.dtype(), tensor.priority(), tensor.shape()),
            Operand::Scalar(_, dtype) => {
                scalar_shape = Shape::scalar();
                (dtype, Priority::Wrapped, &scalar_shape)
            }
        };
        // Two tensors of one dtype promote to it whatever their priorities; most ops are such.
        let common = if matches!(rhs, Operand::Tensor(_)) && rhs_dtype == self.dtype() {
            rhs_dtype
        } else {
            result_type(&[(self.dtype(), self.priority()), (rhs_dtype, rhs_priority)])
        };
        let dtype = compute_dtype(common).ok_or(Error::UnsupportedDType { op, dtype: common })?;
        // Checked here so that the error names both shapes; the tape builds the broadcast.
        if self.shape() != rhs_shape {
            broadcast_shapes(self.shape(), rhs_shape)?;
        }
        match rhs {
            Operand::Tensor(tensor) => self.node.device.record(&[self, tensor], make(dtype, None)),
            Operand::Scalar(value, _) => self.node.device.record(&[self], make(dtype, Some(Bits(value)))),
        }
    }

    fn binary(&self, rhs: Operand<'_>, op: &'static str, binary: BinaryOp) -> Result<Tensor> {
        let compute_dtype = |dtype: DType| match binary {
            // True division: integers divide as the default float dtype, like `torch.div`.
            BinaryOp::Divide if !dtype.is_float() => Some(DType::F32),
            BinaryOp::Subtract | BinaryOp::Power if dtype.is_bool() => None,
            _ => Some(dtype),
        };
        self.elementwise(rhs, op, compute_dtype, |dtype, scalar| TapeOp::Binary { op: binary, dtype, scalar })
    }

    fn compare(&self, rhs: Operand<'_>, op: &'static str, direction: CompareDirection) -> Result<Tensor> {
        self.elementwise(rhs, op, Some, |dtype, scalar| TapeOp::Compare { direction, dtype, scalar })
    }

    /// `self + other`, broadcasting and promoting like PyTorch.
    pub fn add(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(Operand::Tensor(other), "add", BinaryOp::Add)
    }

    /// `self - other`.
    pub fn sub(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(Operand::Tensor(other), "sub", BinaryOp::Subtract)
    }

    /// `self * other`.
    pub fn mul(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(Operand::Tensor(other), "mul", BinaryOp::Multiply)
    }

    /// `self / other`, true division (integers give `f32`).
    pub fn div(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(Operand::Tensor(other), "div", BinaryOp::Divide)
    }

    /// `self ** other`.
    pub fn pow(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(Operand::Tensor(other), "pow", BinaryOp::Power)
    }

    /// Elementwise maximum (`torch.maximum`).
    pub fn maximum(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(Operand::Tensor(other), "maximum", BinaryOp::Maximum)
    }

    /// Elementwise minimum (`torch.minimum`).
    pub fn minimum(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(Operand::Tensor(other), "minimum", BinaryOp::Minimum)
    }

    /// `self + value`; the scalar promotes like a Python number.
    pub fn add_scalar<T: Element>(&self, value: T) -> Result<Tensor> {
        self.binary(Operand::Scalar(value.to_scalar(), T::DTYPE), "add", BinaryOp::Add)
    }

    /// `self - value`.
    pub fn sub_scalar<T: Element>(&self, value: T) -> Result<Tensor> {
        self.binary(Operand::Scalar(value.to_scalar(), T::DTYPE), "sub", BinaryOp::Subtract)
    }

    /// `self * value`.
    pub fn mul_scalar<T: Element>(&self, value: T) -> Result<Tensor> {
        self.binary(Operand::Scalar(value.to_scalar(), T::DTYPE), "mul", BinaryOp::Multiply)
    }

    /// `self / value`, true division.
    pub fn div_scalar<T: Element>(&self, value: T) -> Result<Tensor> {
        self.binary(Operand::Scalar(value.to_scalar(), T::DTYPE), "div", BinaryOp::Divide)
    }

    /// `self ** exponent`.
    pub fn pow_scalar<T: Element>(&self, exponent: T) -> Result<Tensor> {
        self.binary(Operand::Scalar(exponent.to_scalar(), T::DTYPE), "pow", BinaryOp::Power)
    }

    /// `self == other`, as bool.
    pub fn eq(&self, other: &Tensor) -> Result<Tensor> {
        self.compare(Operand::Tensor(other), "eq", CompareDirection::Eq)
    }

    /// `self != other`.
    pub fn ne(&self, other: &Tensor) -> Result<Tensor> {
        self.compare(Operand::Tensor(other), "ne", CompareDirection::Ne)
    }

    /// `self < other`.
    pub fn lt(&self, other: &Tensor) -> Result<Tensor> {
        self.compare(Operand::Tensor(other), "lt", CompareDirection::Lt)
    }

    /// `self <= other`.
    pub fn le(&self, other: &Tensor) -> Result<Tensor> {
        self.compare(Operand::Tensor(other), "le", CompareDirection::Le)
    }

    /// `self > other`.
    pub fn gt(&self, other: &Tensor) -> Result<Tensor> {
        self.compare(Operand::Tensor(other), "gt", CompareDirection::Gt)
    }

    /// `self >= other`.
    pub fn ge(&self, other: &Tensor) -> Result<Tensor> {
        self.compare(Operand::Tensor(other), "ge", CompareDirection::Ge)
    }

    /// `self == value`.
    pub fn eq_scalar<T: Element>(&self, value: T) -> Result<Tensor> {
        self.compare(Operand::Scalar(value.to_scalar(), T::DTYPE), "eq", CompareDirection::Eq)
    }

    /// `self < value`.
    pub fn lt_scalar<T: Element>(&self, value: T) -> Result<Tensor> {
        self.compare(Operand::Scalar(value.to_scalar(), T::DTYPE), "lt", CompareDirection::Lt)
    }

    /// `self > value`.
    pub fn gt_scalar<T: Element>(&self, value: T) -> Result<Tensor> {
        self.compare(Operand::Scalar(value.to_scalar(), T::DTYPE), "gt", CompareDirection::Gt)
    }

    /// `self != value`.
    pub fn ne_scalar<T: Element>(&self, value: T) -> Result<Tensor> {
        self.compare(Operand::Scalar(value.to_scalar(), T::DTYPE), "ne", CompareDirection::Ne)
    }

    /// `self <= value`.
    pub fn le_scalar<T: Element>(&self, value: T) -> Result<Tensor> {
        self.compare(Operand::Scalar(value.to_scalar(), T::DTYPE), "le", CompareDirection::Le)
    }

    /// `self >= value`.
    pub fn ge_scalar<T: Element>(&self, value: T) -> Result<Tensor> {
        self.compare(Operand::Scalar(value.to_scalar(), T::DTYPE), "ge", CompareDirection::Ge)
    }

    /// A float-only unary op; integer and bool tensors are converted to `f32` first, as PyTorch
    /// does for `exp`, `log`, ...
    fn float_unary(&self, unary: UnaryOp) -> Result<Tensor> {
        let dtype = if self.dtype().is_float() { self.dtype() } else { DType::F32 };
        self.node.device.record(&[self], TapeOp::FloatUnary { op: unary, dtype })
    }

    /// `exp(self)`.
    pub fn exp(&self) -> Result<Tensor> {
        self.float_unary(UnaryOp::Exponential)
    }

    /// Natural logarithm.
    pub fn log(&self) -> Result<Tensor> {
        self.float_unary(UnaryOp::Log)
    }

    /// Hyperbolic tangent.
    pub fn tanh(&self) -> Result<Tensor> {
        self.float_unary(UnaryOp::Tanh)
    }

    /// `1 / (1 + exp(-self))`.
    pub fn sigmoid(&self) -> Result<Tensor> {
        self.float_unary(UnaryOp::Logistic)
    }

    /// Square root.
    pub fn sqrt(&self) -> Result<Tensor> {
        self.float_unary(UnaryOp::Sqrt)
    }

    /// `1 / sqrt(self)`.
    pub fn rsqrt(&self) -> Result<Tensor> {
        self.float_unary(UnaryOp::Rsqrt)
    }

    /// `-self`; not defined for bool.
    pub fn neg(&self) -> Result<Tensor> {
        self.signed_unary("neg", UnaryOp::Negate)
    }

    /// `|self|`; not defined for bool.
    pub fn abs(&self) -> Result<Tensor> {
        self.signed_unary("abs", UnaryOp::Abs)
    }

    fn signed_unary(&self, op: &'static str, unary: UnaryOp) -> Result<Tensor> {
        if matches!(self.dtype(), DType::Bool | DType::U8) {
            return Err(Error::UnsupportedDType { op, dtype: self.dtype() });
        }
        self.node.device.record(&[self], TapeOp::Unary(unary))
    }

    /// `max(self, 0)`; not defined for bool.
    pub fn relu(&self) -> Result<Tensor> {
        if self.dtype().is_bool() {
            return Err(Error::UnsupportedDType { op: "relu", dtype: DType::Bool });
        }
        self.node.device.record(&[self], TapeOp::Relu)
    }

    /// Elementwise conversion to `dtype` (`tensor.to(dtype)`).
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        self.node.device.record(&[self], TapeOp::Convert(dtype))
    }

    /// `torch.where(self, on_true, on_false)`: `self` must be bool; all three broadcast.
    pub fn where_(&self, on_true: &Tensor, on_false: &Tensor) -> Result<Tensor> {
        if !self.dtype().is_bool() {
            return Err(Error::UnsupportedDType { op: "where condition", dtype: self.dtype() });
        }
        let dtype = result_type(&[(on_true.dtype(), on_true.priority()), (on_false.dtype(), on_false.priority())]);
        broadcast_shapes(&broadcast_shapes(self.shape(), on_true.shape())?, on_false.shape())?;
        self.node.device.record(&[self, on_true, on_false], TapeOp::Where { dtype })
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

    /// `exp(x - max) / sum(exp(x - max))` along `dim`, floating-point tensors only.
    pub fn softmax(&self, dim: i64) -> Result<Tensor> {
        if !self.dtype().is_float() {
            return Err(Error::UnsupportedDType { op: "softmax", dtype: self.dtype() });
        }
        let axis = normalize_dim(dim, self.rank())? as i64;
        self.node.device.record(&[self], TapeOp::Softmax { axis })
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

    /// Broadcasts to `dims`, as `tensor.expand` (no `-1` sizes).
    pub fn broadcast_to(&self, dims: &[i64]) -> Result<Tensor> {
        let target = checked_shape(dims)?;
        let shape = broadcast_shapes(self.shape(), &target)?;
        if shape != target {
            return Err(Error::Broadcast {
                lhs: Box::new(self.shape().clone()),
                rhs: Box::new(target),
                lhs_size: 0,
                rhs_size: 0,
            });
        }
        self.node.device.record(&[self], TapeOp::BroadcastTo(dims.into()))
    }
}

/// Whether a reduction keeps reduced dims.
#[derive(Copy, Clone)]
enum Keep {
    Yes,
    No,
}

fn dtype_from_safetensors(dtype: safetensors::Dtype) -> Option<DType> {
    use safetensors::Dtype;
    Some(match dtype {
        Dtype::F64 => DType::F64,
        Dtype::F32 => DType::F32,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::I64 => DType::I64,
        Dtype::I32 => DType::I32,
        Dtype::I16 => DType::I16,
        Dtype::I8 => DType::I8,
        Dtype::U8 => DType::U8,
        Dtype::BOOL => DType::Bool,
        _ => return None,
    })
}

fn checked_shape(dims: &[i64]) -> Result<Shape> {
    element_count(dims)?;
    Ok(Shape::from_static(dims))
}

fn element_count(dims: &[i64]) -> Result<usize> {
    let invalid = || Error::InvalidShape { dims: dims.to_vec() };
    dims.iter().try_fold(1usize, |acc, &size| {
        acc.checked_mul(usize::try_from(size).map_err(|_| invalid())?).ok_or_else(invalid)
    })
}

/// Reduced axes, ascending; every axis when `dims` is empty (PyTorch's `dim=None`).
fn reduce_axes(dims: &[i64], rank: usize) -> Result<Vec<i64>> {
    if dims.is_empty() {
        return Ok((0..rank as i64).collect());
    }
    Ok(normalize_dims(dims, rank)?.into_iter().map(|index| index as i64).collect())
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor({}{})", self.node.ty, if self.is_pending() { ", pending" } else { "" })
    }
}
