//! Tensors as PyTorch sees them: a storage shared by views, each view a chain of view calls from
//! the storage's value.
//!
//! A [`Storage`] holds the value of the tensor that allocated it (a lazy `ttpu_eager::Tensor`,
//! pending or on the device). A [`DeviceTensor`] is that storage plus the view calls that take
//! its own value from the storage's (`select`, `slice`, `t`, `view`, ...), and PyTorch's sizes,
//! strides and offset for it. Reading a view replays its chain from the storage's current value,
//! so an older view sees every later write to its base. Writing a view (an in-place op on it)
//! computes the view's new value functionally, then writes it back up the chain with each view's
//! inverse (`select_scatter`, `slice_scatter`, the inverse permutation, ...), and the storage
//! takes the result: PyTorch's functionalization, done on lazy values, so nothing is copied that
//! the fused program does not need.
//!
//! Views hold no values of their own: what stays live across a flush is the storages' values,
//! the state a PyTorch program really has, and a view costs one replayed call per use.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ttpu_aten::eager::{Arg, Inverse, Strides};
use ttpu_ir::DType;

use crate::memo::Entry;
use crate::{Error, Result};

/// PyTorch's metadata of a tensor: dtype, sizes, strides and storage offset (in elements).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    /// The element type.
    pub dtype: DType,
    /// Sizes, strides and offset.
    pub strides: Strides,
}

impl Meta {
    /// A contiguous tensor of `sizes` from offset 0.
    pub fn contiguous(dtype: DType, sizes: &[i64]) -> Meta {
        Meta { dtype, strides: Strides::contiguous(sizes) }
    }

    /// The sizes.
    pub fn sizes(&self) -> &[i64] {
        &self.strides.sizes
    }

    /// The number of elements.
    pub fn numel(&self) -> i64 {
        self.strides.sizes.iter().fold(1i64, |acc, &size| acc.saturating_mul(size))
    }
}

/// Bytes the storages of one device hold, now and at most (PyTorch's `memory_allocated` and
/// `max_memory_allocated`).
#[derive(Debug, Default)]
pub(crate) struct Memory {
    pub(crate) allocated: AtomicU64,
    pub(crate) peak: AtomicU64,
}

/// The memory a tensor and its views share.
pub struct Storage {
    /// Unique per storage, for PyTorch's storage identity (`untyped_storage().data_ptr()`).
    pub(crate) id: u64,
    /// The runtime device index it lives on.
    pub(crate) device: usize,
    /// The allocating tensor's metadata.
    pub(crate) meta: Meta,
    /// The allocating tensor's current value.
    pub(crate) value: Mutex<ttpu_eager::Tensor>,
    /// Its device's byte count, which holds its bytes while it lives.
    memory: Arc<Memory>,
    bytes: u64,
    /// Whether `untyped_storage().resize_(0)` released it (until it is resized back).
    pub(crate) released: AtomicBool,
}

impl Drop for Storage {
    fn drop(&mut self) {
        if !self.released.load(Ordering::Relaxed) {
            self.memory.allocated.fetch_sub(self.bytes, Ordering::Relaxed);
        }
    }
}

static NEXT_STORAGE: AtomicU64 = AtomicU64::new(1);

impl Storage {
    pub(crate) fn new(device: usize, meta: Meta, value: ttpu_eager::Tensor, memory: &Arc<Memory>) -> Arc<Storage> {
        let bytes = u64::try_from(meta.numel()).unwrap_or(0).saturating_mul(meta.dtype.byte_size() as u64);
        let now = memory.allocated.fetch_add(bytes, Ordering::Relaxed).saturating_add(bytes);
        memory.peak.fetch_max(now, Ordering::Relaxed);
        Arc::new(Storage {
            id: NEXT_STORAGE.fetch_add(1, Ordering::Relaxed),
            device,
            meta,
            value: Mutex::new(value),
            memory: Arc::clone(memory),
            bytes,
            released: AtomicBool::new(false),
        })
    }

    /// Its size in bytes: 0 while released.
    pub(crate) fn nbytes(&self) -> u64 {
        if self.released.load(Ordering::Relaxed) { 0 } else { self.bytes }
    }

    /// Releases its bytes (`resize_(0)`) or takes them back (`resize_` to its size): the byte
    /// count of its device follows. Returns whether anything changed.
    pub(crate) fn set_released(&self, released: bool) -> bool {
        if self.released.swap(released, Ordering::Relaxed) == released {
            return false;
        }
        if released {
            self.memory.allocated.fetch_sub(self.bytes, Ordering::Relaxed);
        } else {
            let now = self.memory.allocated.fetch_add(self.bytes, Ordering::Relaxed).saturating_add(self.bytes);
            self.memory.peak.fetch_max(now, Ordering::Relaxed);
        }
        true
    }
}

/// One view call of a chain: the call's template on the previous value, and which of its
/// results this view is.
#[derive(Clone, Debug)]
pub(crate) struct ViewStep {
    /// The view call built on the previous value's type and strides.
    pub(crate) entry: Arc<Entry>,
    /// The call's arguments (operand 0 is the previous value).
    pub(crate) args: Vec<Arg>,
    /// Which graph output of the template is this view.
    pub(crate) output: usize,
    /// Which result of the call it is (a `split` gives several).
    pub(crate) result: usize,
    /// The previous value's metadata.
    pub(crate) source: Meta,
}

/// A tensor on the device: a shared handle, cheap to clone.
#[derive(Clone)]
pub struct DeviceTensor {
    pub(crate) inner: Arc<Mutex<TensorState>>,
}

#[derive(Clone)]
pub(crate) struct TensorState {
    pub(crate) storage: Arc<Storage>,
    pub(crate) chain: Arc<[ViewStep]>,
    pub(crate) meta: Meta,
}

impl DeviceTensor {
    pub(crate) fn new(storage: Arc<Storage>, chain: Arc<[ViewStep]>, meta: Meta) -> DeviceTensor {
        DeviceTensor { inner: Arc::new(Mutex::new(TensorState { storage, chain, meta })) }
    }

    /// A tensor of its own storage holding `value`.
    pub(crate) fn fresh(device: usize, meta: Meta, value: ttpu_eager::Tensor, memory: &Arc<Memory>) -> DeviceTensor {
        let storage = Storage::new(device, meta.clone(), value, memory);
        DeviceTensor::new(storage, Arc::from(Vec::new()), meta)
    }

    pub(crate) fn state(&self) -> Result<TensorState> {
        Ok(self.inner.lock()?.clone())
    }

    /// PyTorch's metadata of the tensor.
    pub fn meta(&self) -> Result<Meta> {
        Ok(self.inner.lock()?.meta.clone())
    }

    /// The runtime device index it lives on.
    pub fn device(&self) -> Result<usize> {
        Ok(self.inner.lock()?.storage.device)
    }

    /// The identity of its storage (equal for a tensor and its views).
    pub fn storage_id(&self) -> Result<u64> {
        Ok(self.inner.lock()?.storage.id)
    }

    /// The element count of its storage (0 while the storage is released, see
    /// [`crate::Backend::resize_storage`]).
    pub fn storage_numel(&self) -> Result<i64> {
        let state = self.inner.lock()?;
        Ok(if state.storage.nbytes() == 0 { 0 } else { state.storage.meta.numel() })
    }

    /// The size of its storage in bytes (0 while released).
    pub fn storage_nbytes(&self) -> Result<u64> {
        Ok(self.inner.lock()?.storage.nbytes())
    }

    /// Whether two handles are the same tensor.
    pub fn same(&self, other: &DeviceTensor) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl std::fmt::Debug for DeviceTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.inner.lock() {
            Ok(state) => write!(f, "DeviceTensor(ttpu:{}, {:?})", state.storage.device, state.meta),
            Err(_) => f.write_str("DeviceTensor(poisoned)"),
        }
    }
}

/// The lazy value of `state`: its storage's value with the chain replayed on it.
pub(crate) fn value_of(device: &ttpu_eager::Device, state: &TensorState) -> Result<ttpu_eager::Tensor> {
    let mut value = state.storage.value.lock()?.clone();
    for step in state.chain.iter() {
        value = replay(device, step, &value)?;
    }
    Ok(value)
}

fn replay(device: &ttpu_eager::Device, step: &ViewStep, value: &ttpu_eager::Tensor) -> Result<ttpu_eager::Tensor> {
    let mut results = device.call(&step.entry.call, &[value])?;
    if step.output >= results.len() {
        return Err(Error::Call { op: step.entry.op.to_string(), message: "a view lost its result".into() });
    }
    Ok(results.swap_remove(step.output))
}

/// Writes `new` (the tensor's whole new value, of its type) into `state`'s storage: up the
/// chain through each view's inverse, built by `inverse` (the memo), then into the storage.
pub(crate) fn write_back(
    device: &ttpu_eager::Device,
    state: &TensorState,
    new: ttpu_eager::Tensor,
    inverse: &mut dyn FnMut(&ViewStep, &ttpu_eager::Tensor, &ttpu_eager::Tensor) -> Result<ttpu_eager::Tensor>,
) -> Result<()> {
    let mut slot = state.storage.value.lock()?;
    if state.chain.is_empty() {
        *slot = new;
        return Ok(());
    }
    // The value before each step: the storage's, then each view's along the chain.
    let mut befores = vec![slot.clone()];
    for step in &state.chain[..state.chain.len() - 1] {
        let next = replay(device, step, befores.last().expect("starts with the storage's value"))?;
        befores.push(next);
    }
    let mut value = new;
    for (step, before) in state.chain.iter().zip(&befores).rev() {
        value = inverse(step, before, &value)?;
    }
    *slot = value;
    Ok(())
}

/// The inverse call of a view step, or PyTorch's refusal for views whose elements overlap.
pub(crate) fn inverse_of(step: &ViewStep) -> Result<Inverse> {
    ttpu_aten::eager::view_inverse(step.entry.def, &step.args, step.result, step.source.sizes()).ok_or_else(|| {
        Error::InPlace {
            message: format!(
                "writing into a view made by `{}` is not supported on the ttpu device (its elements may overlap, \
                 or the op table has no inverse for it); clone() the view before writing into it",
                step.entry.op
            ),
        }
    })
}

impl crate::Backend {
    /// `tensor.untyped_storage().resize_(nbytes)`, as FSDP frees and re-allocates the memory
    /// of unsharded parameters between uses: 0 releases the storage (its device's byte count
    /// drops, and its value becomes zeros, so the buffer it held is freed once no program
    /// reads it), and its own size takes it back (zeros, as fresh memory holds no value worth
    /// reading; FSDP writes every element before reading). Other sizes are refused: a lazy
    /// value has the type it was made with.
    pub fn resize_storage(&self, tensor: &DeviceTensor, nbytes: u64) -> Result<()> {
        let state = tensor.state()?;
        let storage = &state.storage;
        let full =
            u64::try_from(storage.meta.numel()).unwrap_or(0).saturating_mul(storage.meta.dtype.byte_size() as u64);
        let released = match nbytes {
            0 => true,
            n if n == full => false,
            n => {
                return Err(Error::InPlace {
                    message: format!(
                        "resize_ of a ttpu storage of {full} bytes to {n} bytes: only 0 (release it) and its own size \
                         (allocate it again) are supported"
                    ),
                });
            }
        };
        if storage.set_released(released) {
            let device = self.eager_device(storage.device)?;
            let zeros = ttpu_eager::Tensor::zeros(device, storage.meta.dtype, storage.meta.sizes())?;
            *storage.value.lock()? = zeros;
        }
        Ok(())
    }
}
