//! Tensors made from host data (slices, raw bytes, safetensors files), which are copied to the
//! device at once, and tensors made on the device (`full`, `zeros`, `ones`, `arange`), which are
//! recorded like any op and cost no transfer.

use ttpu_ir::{DType, Scalar, TensorType};

use super::{Tensor, checked_shape, element_count};
use crate::element::Element;
use crate::tape::{Bits, TapeOp};
use crate::{Device, Error, Result};

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
        let stored = device.upload_stored(dtype, bytes, dims)?;
        Tensor::ready_stored(device, TensorType::new(dtype, shape), stored)
    }

    /// Every tensor of a safetensors file's bytes, sorted by name, copied to `device`.
    pub fn from_safetensors(device: &Device, bytes: &[u8]) -> Result<Vec<(String, Tensor)>> {
        let tensors = ttpu_runtime::safetensors_from_bytes(bytes).map_err(|message| Error::Safetensors { message })?;
        tensors
            .into_iter()
            .map(|(name, tensor)| Ok((name, Tensor::from_bytes(device, tensor.dtype, &tensor.data, &tensor.shape)?)))
            .collect()
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

    /// A tensor of `dtype` and `dims` filled with zeros (`false` for bool), as `torch.zeros`.
    pub fn zeros(device: &Device, dtype: DType, dims: &[i64]) -> Result<Tensor> {
        checked_shape(dims)?;
        device.record(&[], TapeOp::Full { dtype, value: Bits(Scalar::Int(0)), dims: dims.into() })
    }

    /// A tensor of `dtype` and `dims` filled with ones (`true` for bool), as `torch.ones`.
    pub fn ones(device: &Device, dtype: DType, dims: &[i64]) -> Result<Tensor> {
        checked_shape(dims)?;
        device.record(&[], TapeOp::Full { dtype, value: Bits(Scalar::Int(1)), dims: dims.into() })
    }

    /// `torch.arange(start, end, step, dtype=dtype)`: `start`, `start + step`, ... while short of
    /// `end`, which is excluded; `ceil((end - start) / step)` elements, counted in `f64` as
    /// PyTorch does.
    ///
    /// Float dtypes compute each element as `start + step * i` in `f64` and round once. Integer
    /// dtypes compute in `i64` from `start` and `step` truncated toward zero, as PyTorch's kernel
    /// does, so `arange(0.0, 3.0, 0.5, i64)` holds six zeros there too. Bool is refused, and so
    /// are a zero or non-finite step, non-finite bounds and a step that leads away from `end`.
    pub fn arange(device: &Device, start: f64, end: f64, step: f64, dtype: DType) -> Result<Tensor> {
        if dtype.is_bool() {
            return Err(Error::UnsupportedDType { op: "arange", dtype });
        }
        if ![start, end, step].iter().all(|value| value.is_finite()) {
            return Err(Error::Arange {
                message: format!("start, end and step must be finite, found {start}, {end} and {step}"),
            });
        }
        if step == 0.0 {
            return Err(Error::Arange { message: "step must be nonzero".into() });
        }
        if (step > 0.0 && end < start) || (step < 0.0 && end > start) {
            return Err(Error::Arange { message: format!("step {step} does not lead from {start} to {end}") });
        }
        let count = ((end - start) / step).ceil();
        // `as` saturates; a count past what a shape can hold is refused as an invalid shape.
        let dims = [count as i64];
        checked_shape(&dims)?;
        let (start, step) = if dtype.is_float() {
            (Scalar::Float(start), Scalar::Float(step))
        } else {
            (Scalar::Int(start as i64), Scalar::Int(step as i64))
        };
        device.record(&[], TapeOp::Arange { dtype, start: Bits(start), step: Bits(step), count: dims[0] })
    }
}
