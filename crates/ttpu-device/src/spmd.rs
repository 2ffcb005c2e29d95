//! Single-controller SPMD on the device: one process drives every device of a mesh.
//!
//! The device `ttpu:0` runs its programs over a mesh ([`Backend::set_mesh`]): each tensor is
//! one global lazy value, a storage marked with a sharding ([`Backend::mark_sharding`]) keeps
//! its value split over the mesh's devices, and each flush is one SPMD program that XLA's
//! partitioner splits (see `ttpu_eager`'s mesh). PyTorch code runs as written for one device.

use ttpu_ir::{Mesh, Sharding};

use crate::{Backend, DeviceTensor, Error, Result};

impl Backend {
    /// Runs device `index`'s programs over `mesh`, laid on runtime devices `devices` (row-major).
    pub fn set_mesh(&self, index: usize, mesh: Mesh, devices: Vec<usize>) -> Result<()> {
        self.synchronize("mesh change")?;
        Ok(self.eager_device(index)?.set_mesh(mesh, devices)?)
    }

    /// The mesh device `index` runs its programs over, if any.
    pub fn mesh(&self, index: usize) -> Result<Option<(Mesh, Vec<usize>)>> {
        Ok(self.eager_device(index)?.mesh()?)
    }

    /// Lays `tensor`'s storage out over its device's mesh by `sharding` (the tensor must be its
    /// storage's whole value: a parameter, an input, not a view of one); its views see the
    /// same values.
    pub fn mark_sharding(&self, tensor: &DeviceTensor, sharding: &Sharding) -> Result<()> {
        let state = tensor.state()?;
        if !state.chain.is_empty() || state.meta != state.storage.meta {
            return Err(Error::Call {
                op: "mark_sharding".into(),
                message: "marks a whole tensor (a parameter or an input), not a view of one; clone() the view first"
                    .into(),
            });
        }
        let value = state.storage.value.lock()?.clone();
        let placed = value.sharded(sharding)?;
        *state.storage.value.lock()? = placed;
        Ok(())
    }

    /// How `tensor`'s storage is laid out over its mesh, once computed (`None`: one device).
    pub fn sharding_of(&self, tensor: &DeviceTensor) -> Result<Option<Sharding>> {
        let state = tensor.state()?;
        let value = state.storage.value.lock()?.clone();
        Ok(value.sharding())
    }

    /// Bytes device `index`'s values hold on each device of its mesh (empty without one).
    pub fn resident_bytes(&self, index: usize) -> Result<Vec<u64>> {
        Ok(self.eager_device(index)?.resident_bytes()?)
    }
}
