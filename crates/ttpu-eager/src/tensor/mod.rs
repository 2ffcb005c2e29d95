//! `Tensor`: a handle to a value that is either still pending on its device's tape or held in a
//! device buffer, and the PyTorch-style ops that record new tensors.
//!
//! A tensor holds a slot of the pending tape or an `Arc` of its buffer, never a pointer to
//! another tensor. Every op checks shapes and dtypes while recording (the checks here, and the
//! graph builder the first time a signature is seen, see `tape`), so errors surface at the call
//! that caused them. Each op records one tape step; broadcasting and PyTorch type promotion
//! become explicit `broadcast_in_dim` and `convert` nodes when the tape is built into IR.
//!
//! The ops live in one file per topic: `creation` (host data, fills, `arange`), `elementwise`
//! (arithmetic, comparisons, math, logic, selection), `reduce`, `layout` (shapes and joins),
//! `index` (gathers by index tensors) and `nn` (activations, normalisation, matrix products).
//! This file holds the handle itself and reading data back.

mod creation;
mod elementwise;
mod index;
mod layout;
mod nn;
mod reduce;

use std::fmt;
use std::sync::{Arc, OnceLock};

use ttpu_ir::{DType, Shape, TensorType};
use ttpu_runtime::HostBuffer;

use crate::element::Element;
use crate::mesh::Stored;
use crate::promote::{Priority, static_dims};
use crate::tape::Slot;
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
    /// The value on the device (or its mesh), once computed. Set once and never replaced, so
    /// reading it needs no lock (recording reads it for every operand).
    pub(crate) buffer: OnceLock<Arc<Stored>>,
}

/// The tape slot a recorded tensor's value comes from.
#[derive(Copy, Clone, Debug)]
pub(crate) struct RecordedAt {
    pub(crate) epoch: u64,
    pub(crate) slot: Slot,
}

impl Tensor {
    pub(crate) fn ready_stored(device: &Device, ty: TensorType, stored: Stored) -> Result<Tensor> {
        let ty = device.state()?.types.intern(ty);
        let node =
            TensorNode { device: device.clone(), ty, recorded_at: None, buffer: OnceLock::from(Arc::new(stored)) };
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
        let stored = self.node.device.buffer(self)?;
        stored.to_host(&self.node.device, &self.dims())
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
        Priority::of_rank(self.rank())
    }
}

fn checked_shape(dims: &[i64]) -> Result<Shape> {
    element_count(dims)?;
    Ok(Shape::from_static(dims))
}

/// The element count of `dims`, refusing negative sizes and counts that overflow.
pub(crate) fn checked_element_count(dims: &[i64]) -> Result<usize> {
    element_count(dims)
}

fn element_count(dims: &[i64]) -> Result<usize> {
    let invalid = || Error::InvalidShape { dims: dims.to_vec() };
    dims.iter().try_fold(1usize, |acc, &size| {
        acc.checked_mul(usize::try_from(size).map_err(|_| invalid())?).ok_or_else(invalid)
    })
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor({}{})", self.node.ty, if self.is_pending() { ", pending" } else { "" })
    }
}
