//! `Tensor`: a handle to a value that is either still pending in its device's graph or held in
//! a device buffer, and the PyTorch-style ops that record new tensors.
//!
//! A tensor holds an id into the pending graph or an `Arc` of its buffer, never a pointer to
//! another tensor. Every op checks shapes and dtypes while recording (through
//! `ttpu_ir::GraphBuilder` and the checks here), so errors surface at the call that caused them.
//! Broadcasting and PyTorch type promotion become explicit `broadcast_in_dim` and `convert`
//! nodes, as the IR requires.

use std::fmt;
use std::sync::{Arc, Mutex};

use smallvec::SmallVec;
use ttpu_ir::{
    BinaryOp, CompareDirection, DType, Dim, DotDims, GraphBuilder, Literal, ReduceKind, Scalar, Shape, TensorType,
    UnaryOp, ValueId,
};
use ttpu_pjrt::{Buffer, HostBuffer};

use crate::element::{Element, element_type};
use crate::promote::{
    Priority, broadcast_shapes, normalize_dim, normalize_dims, promote_types, result_type, static_dims,
};
use crate::{Device, Error, Result};

/// A tensor on a [`Device`]. Cheap to clone (a shared handle); `Send + Sync`.
#[derive(Clone)]
pub struct Tensor {
    pub(crate) node: Arc<TensorNode>,
}

pub(crate) struct TensorNode {
    pub(crate) device: Device,
    /// Shared with the operand of the same type where there is one (most elementwise results):
    /// recording then copies no type, and the node stays a small allocation.
    pub(crate) ty: Arc<TensorType>,
    pub(crate) data: Mutex<Data>,
}

/// Where a tensor's value is.
pub(crate) enum Data {
    /// Not computed yet: `value` of the pending graph of `epoch`.
    Pending { epoch: u64, value: ValueId },
    /// Computed and held on the device.
    Ready(Arc<Buffer>),
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
        Ok(Tensor::ready(device, TensorType::new(dtype, shape), buffer))
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
        let shape = checked_shape(dims)?;
        device.record(&[], |builder, _| {
            let scalar = builder.constant(Literal::scalar(T::DTYPE, value.to_scalar()));
            Ok(builder.broadcast_in_dim(scalar, &[], shape)?)
        })
    }

    /// A rank-0 tensor holding `value`.
    pub fn scalar<T: Element>(device: &Device, value: T) -> Result<Tensor> {
        Tensor::full(device, value, &[])
    }

    fn ready(device: &Device, ty: TensorType, buffer: Buffer) -> Tensor {
        let data = Mutex::new(Data::Ready(Arc::new(buffer)));
        Tensor { node: Arc::new(TensorNode { device: device.clone(), ty: Arc::new(ty), data }) }
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
        self.node.data.lock().is_ok_and(|data| matches!(*data, Data::Pending { .. }))
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

    /// Records an elementwise op of `self` and `rhs`: both are promoted to `dtype` (from the
    /// common dtype through `compute_dtype`) and broadcast to one shape, then `build` runs.
    fn elementwise(
        &self,
        rhs: Operand<'_>,
        op: &'static str,
        compute_dtype: impl FnOnce(DType) -> Option<DType>,
        build: impl FnOnce(&mut GraphBuilder, ValueId, ValueId) -> Result<ValueId>,
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
        let shape = broadcast_shapes(self.shape(), rhs_shape)?;
        let operands: SmallVec<[&Tensor; 2]> = match rhs {
            Operand::Tensor(tensor) => smallvec::smallvec![self, tensor],
            Operand::Scalar(..) => smallvec::smallvec![self],
        };
        self.node.device.record(&operands, |builder, values| {
            let rhs_value = match rhs {
                Operand::Tensor(_) => values[1],
                Operand::Scalar(value, _) => builder.constant(Literal::scalar(dtype, value)),
            };
            let lhs = cast(builder, values[0], dtype, &shape)?;
            let rhs = cast(builder, rhs_value, dtype, &shape)?;
            build(builder, lhs, rhs)
        })
    }

    fn binary(&self, rhs: Operand<'_>, op: &'static str, binary: BinaryOp) -> Result<Tensor> {
        let compute_dtype = |dtype: DType| match binary {
            // True division: integers divide as the default float dtype, like `torch.div`.
            BinaryOp::Divide if !dtype.is_float() => Some(DType::F32),
            BinaryOp::Subtract | BinaryOp::Power if dtype.is_bool() => None,
            _ => Some(dtype),
        };
        self.elementwise(rhs, op, compute_dtype, move |builder, lhs, rhs| Ok(builder.binary(binary, lhs, rhs)?))
    }

    fn compare(&self, rhs: Operand<'_>, op: &'static str, direction: CompareDirection) -> Result<Tensor> {
        self.elementwise(rhs, op, Some, move |builder, lhs, rhs| Ok(builder.compare(direction, lhs, rhs)?))
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
        self.node.device.record(&[self], |builder, values| {
            let operand = builder_convert(builder, values[0], dtype)?;
            Ok(builder.unary(unary, operand)?)
        })
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
        self.node.device.record(&[self], |builder, values| Ok(builder.unary(unary, values[0])?))
    }

    /// `max(self, 0)`; not defined for bool.
    pub fn relu(&self) -> Result<Tensor> {
        if self.dtype().is_bool() {
            return Err(Error::UnsupportedDType { op: "relu", dtype: DType::Bool });
        }
        let (dtype, shape) = (self.dtype(), self.shape().clone());
        self.node.device.record(&[self], |builder, values| {
            let zero = splat(builder, dtype, Scalar::Int(0), shape.dims())?;
            Ok(builder.binary(BinaryOp::Maximum, values[0], zero)?)
        })
    }

    /// Elementwise conversion to `dtype` (`tensor.to(dtype)`).
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        self.node.device.record(&[self], |builder, values| Ok(builder.convert(values[0], dtype)?))
    }

    /// `torch.where(self, on_true, on_false)`: `self` must be bool; all three broadcast.
    pub fn where_(&self, on_true: &Tensor, on_false: &Tensor) -> Result<Tensor> {
        if !self.dtype().is_bool() {
            return Err(Error::UnsupportedDType { op: "where condition", dtype: self.dtype() });
        }
        let dtype = result_type(&[(on_true.dtype(), on_true.priority()), (on_false.dtype(), on_false.priority())]);
        let shape = broadcast_shapes(&broadcast_shapes(self.shape(), on_true.shape())?, on_false.shape())?;
        self.node.device.record(&[self, on_true, on_false], |builder, values| {
            let pred = cast(builder, values[0], DType::Bool, &shape)?;
            let on_true = cast(builder, values[1], dtype, &shape)?;
            let on_false = cast(builder, values[2], dtype, &shape)?;
            Ok(builder.select(pred, on_true, on_false)?)
        })
    }

    /// Matrix product, as `torch.matmul`: 1-D operands are vectors, and dims before the last
    /// two are batch dims that broadcast.
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        let mismatch = || Error::Matmul { lhs: Box::new(self.shape().clone()), rhs: Box::new(other.shape().clone()) };
        let (lhs_dims, rhs_dims) = (self.dims(), other.dims());
        if lhs_dims.is_empty() || rhs_dims.is_empty() {
            return Err(mismatch());
        }
        // A vector becomes a matrix of one row (lhs) or one column (rhs); that dim is dropped
        // from the result again.
        let lhs_matrix: Vec<i64> = if lhs_dims.len() == 1 { vec![1, lhs_dims[0]] } else { lhs_dims.clone() };
        let rhs_matrix: Vec<i64> = if rhs_dims.len() == 1 { vec![rhs_dims[0], 1] } else { rhs_dims.clone() };
        let (lhs_batch, lhs_mk) = lhs_matrix.split_at(lhs_matrix.len() - 2);
        let (rhs_batch, rhs_kn) = rhs_matrix.split_at(rhs_matrix.len() - 2);
        if lhs_mk[1] != rhs_kn[0] {
            return Err(mismatch());
        }
        let batch =
            broadcast_shapes(&Shape::from_static(lhs_batch), &Shape::from_static(rhs_batch)).map_err(|_| mismatch())?;
        let batch = static_dims(&batch);
        let dtype = result_type(&[(self.dtype(), Priority::Dimensioned), (other.dtype(), Priority::Dimensioned)]);
        if dtype.is_bool() {
            return Err(Error::UnsupportedDType { op: "matmul", dtype });
        }
        let mut result_dims: Vec<i64> = batch.to_vec();
        if lhs_dims.len() > 1 {
            result_dims.push(lhs_mk[0]);
        }
        if rhs_dims.len() > 1 {
            result_dims.push(rhs_kn[1]);
        }
        let n_batch = batch.len() as i64;
        let lhs_full: Vec<i64> = batch.iter().copied().chain(lhs_mk.iter().copied()).collect();
        let rhs_full: Vec<i64> = batch.iter().copied().chain(rhs_kn.iter().copied()).collect();
        self.node.device.record(&[self, other], |builder, values| {
            let lhs = builder_convert(builder, values[0], dtype)?;
            let rhs = builder_convert(builder, values[1], dtype)?;
            let lhs = builder.reshape(lhs, Shape::from_static(&lhs_matrix))?;
            let rhs = builder.reshape(rhs, Shape::from_static(&rhs_matrix))?;
            let lhs = broadcast_to(builder, lhs, &Shape::from_static(&lhs_full))?;
            let rhs = broadcast_to(builder, rhs, &Shape::from_static(&rhs_full))?;
            let batch_dims: SmallVec<[i64; 4]> = (0..n_batch).collect();
            let dims = DotDims {
                lhs_batch: batch_dims.clone(),
                rhs_batch: batch_dims,
                lhs_contracting: smallvec::smallvec![n_batch + 1],
                rhs_contracting: smallvec::smallvec![n_batch],
            };
            let product = builder.dot_general(lhs, rhs, dims)?;
            reshape_if_needed(builder, product, &result_dims)
        })
    }

    /// Records `reduce` of `kind` over `dims` (all dims when empty), keeping reduced dims as
    /// size 1 when `keep` is set.
    fn reduce(&self, op: &'static str, kind: ReduceKind, dims: &[i64], dtype: DType, keep: Keep) -> Result<Tensor> {
        let axes = reduce_axes(dims, self.rank())?;
        let kept_dims = keep_dims(&self.dims(), &axes);
        let mean = op == "mean";
        self.node.device.record(&[self], |builder, values| {
            let operand = builder_convert(builder, values[0], dtype)?;
            let mut res = builder.reduce(operand, kind, &axes)?;
            if mean {
                let count: i64 = axes.iter().map(|&axis| self.dims()[axis as usize]).product();
                let reduced_shape = builder.ty(res).shape.clone();
                let divisor = splat(builder, dtype, Scalar::Int(count), reduced_shape.dims())?;
                res = builder.binary(BinaryOp::Divide, res, divisor)?;
            }
            match keep {
                Keep::Yes => reshape_if_needed(builder, res, &kept_dims),
                Keep::No => Ok(res),
            }
        })
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
        let shape = self.shape().clone();
        let kept_dims = keep_dims(&self.dims(), &[axis]);
        self.node.device.record(&[self], |builder, values| {
            let x = values[0];
            let max = builder.reduce(x, ReduceKind::Max, &[axis])?;
            let max = reshape_if_needed(builder, max, &kept_dims)?;
            let max = broadcast_to(builder, max, &shape)?;
            let shifted = builder.binary(BinaryOp::Subtract, x, max)?;
            let exp = builder.unary(UnaryOp::Exponential, shifted)?;
            let sum = builder.reduce(exp, ReduceKind::Sum, &[axis])?;
            let sum = reshape_if_needed(builder, sum, &kept_dims)?;
            let sum = broadcast_to(builder, sum, &shape)?;
            Ok(builder.binary(BinaryOp::Divide, exp, sum)?)
        })
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
        let (dtype, shape) = (self.dtype(), self.shape().clone());
        let first = (dims.len() - normalized_shape.len()) as i64;
        let axes: Vec<i64> = (first..dims.len() as i64).collect();
        let kept_dims = keep_dims(&dims, &axes);
        let count: i64 = normalized_shape.iter().product();
        let mut operands = vec![self];
        operands.extend(weight);
        operands.extend(bias);
        let has_weight = weight.is_some();
        self.node.device.record(&operands, |builder, values| {
            let x = values[0];
            let mean_of = |builder: &mut GraphBuilder, value: ValueId| -> Result<ValueId> {
                let sum = builder.reduce(value, ReduceKind::Sum, &axes)?;
                let sum = reshape_if_needed(builder, sum, &kept_dims)?;
                let divisor = splat(builder, dtype, Scalar::Int(count), &kept_dims_as_shape(&kept_dims))?;
                let mean = builder.binary(BinaryOp::Divide, sum, divisor)?;
                broadcast_to(builder, mean, &shape)
            };
            let mean = mean_of(builder, x)?;
            let centered = builder.binary(BinaryOp::Subtract, x, mean)?;
            let squared = builder.binary(BinaryOp::Multiply, centered, centered)?;
            let variance = mean_of(builder, squared)?;
            let eps = splat(builder, dtype, Scalar::Float(eps), shape.dims())?;
            let shifted = builder.binary(BinaryOp::Add, variance, eps)?;
            let inv_std = builder.unary(UnaryOp::Rsqrt, shifted)?;
            let mut res = builder.binary(BinaryOp::Multiply, centered, inv_std)?;
            let mut params = values[1..].iter();
            if has_weight && let Some(&weight) = params.next() {
                let weight = cast(builder, weight, dtype, &shape)?;
                res = builder.binary(BinaryOp::Multiply, res, weight)?;
            }
            if let Some(&bias) = params.next() {
                let bias = cast(builder, bias, dtype, &shape)?;
                res = builder.binary(BinaryOp::Add, res, bias)?;
            }
            Ok(res)
        })
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
        self.node
            .device
            .record(&[self], |builder, values| Ok(builder.reshape(values[0], Shape::from_static(&resolved))?))
    }

    /// Reorders dims: result dim `i` is dim `permutation[i]` of `self`.
    pub fn permute(&self, permutation: &[i64]) -> Result<Tensor> {
        let rank = self.rank();
        let error = || Error::Permutation { permutation: permutation.to_vec(), rank };
        if permutation.len() != rank {
            return Err(error());
        }
        let mut order = Vec::with_capacity(rank);
        for &dim in permutation {
            let index = normalize_dim(dim, rank).map_err(|_| error())?;
            if order.contains(&(index as i64)) {
                return Err(error());
            }
            order.push(index as i64);
        }
        self.node.device.record(&[self], |builder, values| Ok(builder.transpose(values[0], &order)?))
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
        let mut starts = vec![0i64; dims.len()];
        let mut limits = dims.clone();
        let mut strides = vec![1i64; dims.len()];
        starts[axis] = start;
        limits[axis] = end;
        strides[axis] = step;
        self.node.device.record(&[self], |builder, values| Ok(builder.slice(values[0], &starts, &limits, &strides)?))
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
        first.node.device.record(tensors, |builder, values| {
            let converted =
                values.iter().map(|&value| builder_convert(builder, value, dtype)).collect::<Result<Vec<_>>>()?;
            Ok(builder.concatenate(&converted, axis as i64)?)
        })
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
        self.node.device.record(&[self], |builder, values| broadcast_to(builder, values[0], &shape))
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

/// `dims` with every axis in `axes` set to 1.
fn keep_dims(dims: &[i64], axes: &[i64]) -> Vec<i64> {
    dims.iter().enumerate().map(|(index, &size)| if axes.contains(&(index as i64)) { 1 } else { size }).collect()
}

fn kept_dims_as_shape(dims: &[i64]) -> Vec<Dim> {
    dims.iter().map(|&size| Dim::Static(size)).collect()
}

/// `value` converted to `dtype` (no node when it already has it).
fn builder_convert(builder: &mut GraphBuilder, value: ValueId, dtype: DType) -> Result<ValueId> {
    if builder.ty(value).dtype == dtype { Ok(value) } else { Ok(builder.convert(value, dtype)?) }
}

/// `value` broadcast to `shape`, aligned on the right (no node when it already has it).
fn broadcast_to(builder: &mut GraphBuilder, value: ValueId, shape: &Shape) -> Result<ValueId> {
    let operand_rank = builder.ty(value).rank();
    if builder.ty(value).shape == *shape {
        return Ok(value);
    }
    let offset = shape
        .rank()
        .checked_sub(operand_rank)
        .ok_or_else(|| Error::internal(format!("broadcast of rank {operand_rank} to {shape}")))?
        as i64;
    let dims: SmallVec<[i64; 4]> = (0..operand_rank as i64).map(|index| index + offset).collect();
    Ok(builder.broadcast_in_dim(value, &dims, shape.clone())?)
}

/// `value` converted to `dtype` and broadcast to `shape`.
fn cast(builder: &mut GraphBuilder, value: ValueId, dtype: DType, shape: &Shape) -> Result<ValueId> {
    let converted = builder_convert(builder, value, dtype)?;
    broadcast_to(builder, converted, shape)
}

/// `value` reshaped to `dims` (no node when it already has them).
fn reshape_if_needed(builder: &mut GraphBuilder, value: ValueId, dims: &[i64]) -> Result<ValueId> {
    let shape = Shape::from_static(dims);
    if builder.ty(value).shape == shape { Ok(value) } else { Ok(builder.reshape(value, shape)?) }
}

/// A tensor of `dims` whose every element is `value`, as a scalar constant broadcast.
fn splat(builder: &mut GraphBuilder, dtype: DType, value: Scalar, dims: &[Dim]) -> Result<ValueId> {
    let scalar = builder.constant(Literal::scalar(dtype, value));
    let shape: Shape = dims.iter().cloned().collect();
    broadcast_to(builder, scalar, &shape)
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor({}{})", self.node.ty, if self.is_pending() { ", pending" } else { "" })
    }
}
