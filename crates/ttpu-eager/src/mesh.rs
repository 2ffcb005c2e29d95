//! One device's tape run over a mesh of devices: single-controller SPMD.
//!
//! A [`Device`] given a mesh ([`Device::set_mesh`]) records as before, one global value per
//! tensor, and runs each program as one SPMD program over the mesh's devices: its inputs and
//! outputs carry a sharding (Shardy's annotation at the program boundary) and XLA's partitioner
//! splits the work and adds the collectives. A computed value is [`Stored`]: one buffer on one
//! device, or one buffer per mesh device (a shard, or a replica) with its sharding.
//!
//! Shardings are layout, never values: any choice computes the same numbers, so the choice of
//! an output's sharding is a heuristic. A value marked with [`Tensor::sharded`] keeps its
//! sharding; an output takes the sharding of the program's first sharded input of its own type
//! (a parameter's update, its optimizer state, an activation of a batch-split input), and is
//! replicated otherwise. A value computed before the mesh was set (one buffer) is replicated
//! onto the mesh's devices each time a program reads it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ttpu_ir::{Mesh, ProgramSharding, Sharding, TensorType};
use ttpu_runtime::{Buffer, CompileSpec, HostBuffer, HostTensor};

use crate::tape::{Tape, Used};
use crate::{Device, Error, Result, Tensor};

/// A mesh a device runs its programs over: the mesh and the runtime devices of its positions.
pub(crate) struct MeshPlacement {
    pub(crate) mesh: Mesh,
    pub(crate) devices: Vec<usize>,
    /// Bytes the stored values hold on each mesh device.
    resident: Vec<AtomicU64>,
}

/// A computed value: one buffer on its device, or one per mesh device.
pub(crate) struct Stored {
    pub(crate) buffers: Vec<Buffer>,
    /// The layout over the mesh; `None` for one buffer on one device.
    pub(crate) sharding: Option<Sharding>,
    /// The mesh it lies on and the bytes it holds on each of its devices.
    placed: Option<(Arc<MeshPlacement>, Vec<u64>)>,
}

impl Drop for Stored {
    fn drop(&mut self) {
        if let Some((mesh, bytes)) = &self.placed {
            for (cell, &count) in mesh.resident.iter().zip(bytes) {
                cell.fetch_sub(count, Ordering::Relaxed);
            }
        }
    }
}

impl Stored {
    /// One buffer on one device.
    pub(crate) fn single(buffer: Buffer) -> Stored {
        Stored { buffers: vec![buffer], sharding: None, placed: None }
    }

    /// One buffer per device of `mesh`, laid out by `sharding`.
    fn placed(buffers: Vec<Buffer>, sharding: Sharding, mesh: &Arc<MeshPlacement>) -> Result<Stored> {
        let mut bytes = Vec::with_capacity(buffers.len());
        for (buffer, cell) in buffers.iter().zip(&mesh.resident) {
            let size = buffer.on_device_size_in_bytes().map_err(ttpu_runtime::Error::from)? as u64;
            cell.fetch_add(size, Ordering::Relaxed);
            bytes.push(size);
        }
        Ok(Stored { buffers, sharding: Some(sharding), placed: Some((Arc::clone(mesh), bytes)) })
    }

    /// The buffer of a value on one device (the first replica or shard of a placed one).
    pub(crate) fn first(&self) -> &Buffer {
        &self.buffers[0]
    }

    /// The whole value on the host: the one buffer, or the mesh devices' shards assembled.
    pub(crate) fn to_host(&self, device: &Device, dims: &[i64]) -> Result<HostBuffer> {
        let runtime = &device.inner.runtime;
        let (Some(sharding), Some((mesh, _))) = (&self.sharding, &self.placed) else {
            return Ok(runtime.download_raw(self.first())?);
        };
        if sharding.is_replicated() {
            return Ok(runtime.download_raw(self.first())?);
        }
        let mut shards = Vec::with_capacity(self.buffers.len());
        let mut element_type = None;
        for buffer in &self.buffers {
            let host = runtime.download_raw(buffer)?;
            let dtype = ttpu_runtime::dtype_of_element(host.element_type)
                .ok_or_else(|| Error::internal("a shard of an element type the IR lacks"))?;
            element_type = Some(host.element_type);
            shards.push(HostTensor { dtype, shape: host.dims, data: host.data });
        }
        let whole = ttpu_runtime::shard::assemble(&shards, sharding, &mesh.mesh, dims)?;
        let element_type = element_type.ok_or_else(|| Error::internal("a placed value without buffers"))?;
        Ok(HostBuffer { element_type, dims: dims.to_vec(), data: whole.data })
    }
}

impl Device {
    /// Runs this device's programs over `devices` (runtime device indices, in `mesh`'s
    /// row-major order) from now on; pending work runs first. Values computed before stay where
    /// they are and are replicated onto the mesh when a program reads them.
    pub fn set_mesh(&self, mesh: Mesh, devices: Vec<usize>) -> Result<()> {
        if devices.len() != mesh.device_count() {
            return Err(Error::Mesh {
                message: format!("mesh {mesh} has {} positions, given {} devices", mesh.device_count(), devices.len()),
            });
        }
        let count = self.inner.runtime.device_count();
        if let Some(&index) = devices.iter().find(|&&index| index >= count) {
            return Err(ttpu_runtime::Error::NoSuchDevice { index, count }.into());
        }
        let mut unique = devices.clone();
        unique.sort_unstable();
        unique.dedup();
        if unique.len() != devices.len() {
            return Err(Error::Mesh { message: format!("devices {devices:?} name one device twice") });
        }
        let resident = devices.iter().map(|_| AtomicU64::new(0)).collect();
        let placement = Arc::new(MeshPlacement { mesh, devices, resident });
        let mut state = self.state()?;
        self.materialize(&mut state)?;
        state.mesh = Some(placement);
        Ok(())
    }

    /// The mesh and its devices, when programs run over one.
    pub fn mesh(&self) -> Result<Option<(Mesh, Vec<usize>)>> {
        Ok(self.state()?.mesh.as_ref().map(|placement| (placement.mesh.clone(), placement.devices.clone())))
    }

    /// Bytes the values of this device hold on each mesh device (empty without a mesh).
    pub fn resident_bytes(&self) -> Result<Vec<u64>> {
        let state = self.state()?;
        Ok(state.mesh.as_ref().map_or_else(Vec::new, |placement| {
            placement.resident.iter().map(|cell| cell.load(Ordering::Relaxed)).collect()
        }))
    }

    /// Uploads host bytes as a value: to this device, or replicated over its mesh.
    pub(crate) fn upload_stored(&self, dtype: ttpu_ir::DType, bytes: &[u8], dims: &[i64]) -> Result<Stored> {
        let mesh = self.state()?.mesh.clone();
        match mesh {
            None => Ok(Stored::single(self.inner.runtime.upload_bytes(bytes, dtype, dims, self.inner.index)?)),
            Some(mesh) => {
                let buffers = mesh
                    .devices
                    .iter()
                    .map(|&index| self.inner.runtime.upload_bytes(bytes, dtype, dims, index))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                Stored::placed(buffers, Sharding::replicated(dims.len()), &mesh)
            }
        }
    }

    /// Runs `program` as one SPMD program over `mesh`: inputs as their values are laid out,
    /// outputs as the module docs say. Returns one value per output.
    #[allow(clippy::too_many_arguments)] // The pending tape's parts, as materializing holds them.
    pub(crate) fn run_over_mesh(
        &self,
        mesh: &Arc<MeshPlacement>,
        program: &Tape,
        used: &Used,
        inputs: &[Arc<Stored>],
        host_data: &[Vec<u8>],
        aliases: Vec<(usize, usize)>,
        outputs: &[Arc<TensorType>],
    ) -> Result<Vec<Stored>> {
        let runtime = &self.inner.runtime;
        let positions = mesh.devices.len();
        // Per input: its sharding and one buffer per mesh device.
        let mut shardings = Vec::with_capacity(used.inputs.len());
        let mut copies: Vec<Option<Vec<Buffer>>> = Vec::with_capacity(used.inputs.len());
        for (input, &pending) in used.inputs.iter().enumerate() {
            let stored = &inputs[pending];
            let rank = program.inputs[input].rank();
            match (&stored.sharding, stored.buffers.len() == positions) {
                (Some(sharding), true) => {
                    shardings.push(sharding.clone());
                    copies.push(None);
                }
                _ => {
                    // A value on one device: replicated onto the mesh for this run.
                    let host = runtime.download_raw(stored.first())?;
                    let dtype = ttpu_runtime::dtype_of_element(host.element_type)
                        .ok_or_else(|| Error::internal("a value of an element type the IR lacks"))?;
                    let buffers = mesh
                        .devices
                        .iter()
                        .map(|&index| runtime.upload_bytes(&host.data, dtype, &host.dims, index))
                        .collect::<std::result::Result<Vec<_>, _>>()?;
                    shardings.push(Sharding::replicated(rank));
                    copies.push(Some(buffers));
                }
            }
        }
        let mut packed: Vec<Vec<Buffer>> = Vec::new();
        for (dtype, members) in program.host_groups() {
            let bytes: Vec<u8> =
                members.iter().flat_map(|&member| host_data[used.hosts[member]].iter().copied()).collect();
            let count = (bytes.len() / dtype.byte_size().max(1)) as i64;
            let buffers = mesh
                .devices
                .iter()
                .map(|&index| runtime.upload_bytes(&bytes, dtype, &[count], index))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            packed.push(buffers);
            shardings.push(Sharding::replicated(1));
        }
        let output_shardings: Vec<Sharding> = outputs
            .iter()
            .map(|ty| {
                program
                    .inputs
                    .iter()
                    .zip(&shardings)
                    .find(|(input, sharding)| **input == *ty && !sharding.is_replicated())
                    .map_or_else(|| Sharding::replicated(ty.rank()), |(_, sharding)| sharding.clone())
            })
            .collect();
        // An input's buffers take an output's only where both are laid out alike.
        let aliases: Vec<(usize, usize)> =
            aliases.into_iter().filter(|&(input, output)| shardings[input] == output_shardings[output]).collect();
        let sharding = ProgramSharding { mesh: mesh.mesh.clone(), inputs: shardings, outputs: output_shardings };
        let spec =
            CompileSpec { devices: mesh.devices.clone(), aliases, sharding: Some(sharding), ..CompileSpec::default() };
        let executable =
            runtime.executable(program, &spec, || Ok::<_, Error>(crate::device::fused(&program.to_graph()?)))?;
        let lists: Vec<Vec<&Buffer>> = (0..positions)
            .map(|position| {
                used.inputs
                    .iter()
                    .zip(&copies)
                    .map(|(&pending, copy)| match copy {
                        Some(buffers) => &buffers[position],
                        None => &inputs[pending].buffers[position],
                    })
                    .chain(packed.iter().map(|buffers| &buffers[position]))
                    .collect()
            })
            .collect();
        let lists: Vec<&[&Buffer]> = lists.iter().map(Vec::as_slice).collect();
        let results = executable.run_replicated(&lists)?;
        let Some(ProgramSharding { outputs: output_shardings, .. }) = spec.sharding else {
            return Err(Error::internal("a mesh program without its sharding"));
        };
        let mut per_output: Vec<Vec<Buffer>> = (0..outputs.len()).map(|_| Vec::with_capacity(positions)).collect();
        for device_results in results {
            if device_results.len() != outputs.len() {
                return Err(Error::internal(format!("{} outputs for {} tensors", device_results.len(), outputs.len())));
            }
            for (slot, buffer) in per_output.iter_mut().zip(device_results) {
                slot.push(buffer);
            }
        }
        per_output
            .into_iter()
            .zip(output_shardings)
            .map(|(buffers, sharding)| Stored::placed(buffers, sharding, mesh))
            .collect()
    }
}

impl Tensor {
    /// This value laid out over its device's mesh by `sharding`, as a new tensor (the value is
    /// computed and split on the host once; each mesh device receives its shard).
    pub fn sharded(&self, sharding: &Sharding) -> Result<Tensor> {
        let device = &self.node.device;
        let mesh = device.state()?.mesh.clone().ok_or_else(|| Error::Mesh {
            message: "sharding a tensor needs a device that runs over a mesh (set_mesh)".into(),
        })?;
        sharding
            .check(&mesh.mesh, &self.node.ty, "the tensor")
            .map_err(|error| Error::Mesh { message: error.message })?;
        let host = self.to_host()?;
        // The host form (`complex32` narrowed from its `c64` buffer), which the upload widens back.
        let data = ttpu_runtime::host_bytes(self.dtype(), host.data);
        let whole = HostTensor { dtype: self.dtype(), shape: self.dims(), data };
        let shards = ttpu_runtime::shard::split(&whole, sharding, &mesh.mesh)?;
        let buffers = shards
            .iter()
            .zip(&mesh.devices)
            .map(|(shard, &index)| device.inner.runtime.upload_bytes(&shard.data, shard.dtype, &shard.shape, index))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let stored = Stored::placed(buffers, sharding.clone(), &mesh)?;
        Tensor::ready_stored(device, (*self.node.ty).clone(), stored)
    }

    /// How the value is laid out over its device's mesh, once computed (`None`: one device).
    pub fn sharding(&self) -> Option<Sharding> {
        self.node.buffer.get().and_then(|stored| stored.sharding.clone())
    }
}
