//! `LoadedModel`: a model whose weights live on its devices.
//!
//! Loading uploads every parameter, buffer and constant once per device. A run uploads only the
//! user inputs, executes, and hands the outputs back on the device ([`DeviceOutputs`]) or on the
//! host. A buffer the model mutates (`BUFFER_MUTATION`: BatchNorm running statistics, a step
//! counter, a KV cache) is updated in place: its graph input is aliased to the output holding its
//! new value, the run donates the old buffer to XLA, and the output becomes the resident buffer.
//! N runs therefore behave as N PyTorch calls, and no copy of the state is made. A donated
//! buffer is deleted; a handle to it read afterwards gives
//! [`ttpu_runtime::Error::Pjrt`]`(`[`ttpu_pjrt::Error::Donated`]`)`, never old data.
//!
//! With `replicas > 1` the weights are uploaded to devices `0..replicas` and each run takes one
//! input set per device: the same program runs on every device at once (data parallel).
//!
//! With a [`Parallelism`] the model is one SPMD program over a device mesh: each device keeps
//! only its shard of every weight, a run takes one input set and splits it per device, XLA's
//! partitioner adds the collectives, and the outputs are assembled from the devices' shards.
//!
//! In a job of several processes (a runtime with [`ttpu_runtime::Distributed`]) the mesh spans
//! every process's devices: each process takes the same input set, uploads only its own devices'
//! shards, runs its part of the one program and holds its own devices' outputs; an output is
//! read in a process from the blocks its devices hold, so outputs split over other processes are
//! read through a replicated (all-gathered) output. Replicated runs (`replicas`) use the
//! process's own devices.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use indexmap::IndexMap;
use ttpu_fx::{InputRole, ModelSignature, OutputRole};
use ttpu_ir::{Dim, Mesh, ProgramSharding, Sharding, TensorType};
use ttpu_runtime::shard::{assemble_from, split_for};
use ttpu_runtime::{Buffer, CompileInfo, CompileSpec, Executable, HostTensor, Runtime, TensorMap};

use crate::parallel::Parallelism;
use crate::prepare::WeightSplit;
use crate::session::{Bucketing, Model, Specialisation, bind_symbols, resize, resolved_shape};
use crate::{Error, Result};

/// A model with its weights resident on its devices. `Send + Sync`; runs are serialized when
/// the model mutates state, so each run sees the state the previous one left.
pub struct LoadedModel {
    runtime: Runtime,
    model: Model,
    bucketing: Bucketing,
    replicas: usize,
    /// The runtime devices of the program, one per replica or mesh device, in that order.
    devices: Vec<usize>,
    /// The positions in `devices` of this process's devices, ascending: what the resident
    /// state, argument lists and outputs are indexed by.
    local: Vec<usize>,
    /// The host shape of each weight, by signature input (`None` for user inputs).
    weight_shapes: Vec<Option<Vec<i64>>>,
    /// Symbols the weights' shapes fix: never bucketed, since the weights cannot be padded.
    fixed_symbols: IndexMap<String, i64>,
    /// `(output, input)` signature indices: the output is the input buffer's new value.
    mutations: Vec<(usize, usize)>,
    /// The mesh and plan of a sharded model, with each weight's placement (by signature input).
    sharded: Option<(Parallelism, Vec<Option<Sharding>>)>,
    /// The resident buffers, `[local device][signature input]` (`None` for user inputs): one
    /// list per replica, or per mesh device of this process of a sharded model (each holding its
    /// shards).
    state: Mutex<Vec<Vec<Option<Arc<Buffer>>>>>,
    /// Per signature input: a weight that no call changes, which load-time preparation may read.
    resident: Vec<bool>,
    /// The results of each specialisation's preparation program, `[device][prepared value]`,
    /// computed on its first run from the resident weights.
    prepared: Mutex<Vec<(Arc<Specialisation>, PreparedValues)>>,
}

/// Prepared values on each device, `[device][value]`.
type PreparedValues = Arc<Vec<Vec<Arc<Buffer>>>>;

/// Inputs checked, padded and uploaded for one run, with the executable that will run them.
pub struct Prepared {
    specialisation: Arc<Specialisation>,
    executable: Arc<Executable>,
    compile: Option<CompileInfo>,
    symbol_values: IndexMap<String, i64>,
    /// `[local device][signature input]`: the uploaded user inputs (or their shards).
    inputs: Vec<Vec<Option<Buffer>>>,
    /// The program's placements, for a sharded model.
    layout: Option<ProgramSharding>,
    /// The values the preparation computed, passed after the inputs, when the graph is split.
    prepared: Option<PreparedValues>,
}

impl Prepared {
    /// How the executable was obtained, when this run was the first of its sizes and placement
    /// on this model (`None` when the model already held it).
    pub fn compile_info(&self) -> Option<CompileInfo> {
        self.compile
    }

    /// The model's graph at this run's sizes (before the load-time split of weight-only work).
    pub fn program(&self) -> &ttpu_ir::Graph {
        &self.specialisation.module.graph
    }

    /// XLA's cost analysis of the executable this run will use (see
    /// [`ttpu_runtime::Executable::cost_analysis`]).
    pub fn cost_analysis(&self) -> Result<Vec<(String, ttpu_runtime::NamedValue)>> {
        Ok(self.executable.cost_analysis()?)
    }
}

/// The outputs of one run, still on the devices.
pub struct DeviceOutputs {
    runtime: Runtime,
    /// Per output: its key and its type with symbolic dims.
    keys: Vec<(String, TensorType)>,
    symbol_values: IndexMap<String, i64>,
    /// `[local device][output]`.
    buffers: Vec<Vec<Arc<Buffer>>>,
    /// For a sharded model: the mesh, each output's placement and compiled (padded) shape.
    layout: Option<OutputLayout>,
    /// The mesh device of each local device's outputs (a sharded model's).
    mesh_devices: Vec<usize>,
}

/// Where a sharded model's outputs lie: the mesh, and per output its placement and compiled
/// (padded) shape.
type OutputLayout = (Mesh, Vec<(Sharding, Vec<i64>)>);

/// The whole tensor from the shards this process's devices hold (`(mesh device, shard)`).
fn assemble_local(
    runtime: &Runtime,
    buffers: &[(usize, &Buffer)],
    sharding: &Sharding,
    mesh: &Mesh,
    shape: &[i64],
) -> Result<HostTensor> {
    // A replicated tensor is whole on any device: one download does.
    let needed = if sharding.is_replicated() { &buffers[..buffers.len().min(1)] } else { buffers };
    let shards = needed
        .iter()
        .map(|&(device, buffer)| Ok((device, runtime.download(buffer)?)))
        .collect::<Result<Vec<(usize, HostTensor)>>>()?;
    let refs: Vec<(usize, &HostTensor)> = shards.iter().map(|(device, shard)| (*device, shard)).collect();
    Ok(assemble_from(&refs, sharding, mesh, shape)?)
}

impl DeviceOutputs {
    /// The keys, in output order: `output_0`, ... and mutated targets.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|(key, _)| key.as_str())
    }

    /// The device buffer of output `key` on `replica`. A mutated buffer's output is the
    /// resident state itself, which the next run donates. Outputs along padded symbols hold the
    /// padded size; [`DeviceOutputs::to_host`] slices them back.
    pub fn buffer(&self, key: &str, replica: usize) -> Option<&Arc<Buffer>> {
        let index = self.keys.iter().position(|(known, _)| known == key)?;
        self.buffers.get(replica)?.get(index)
    }

    /// Output `key` of replica `replica` copied to the host (a sharded model's assembled from
    /// the devices' shards, whatever `replica`), cut back to the sizes the inputs gave.
    pub fn get(&self, key: &str, replica: usize) -> Result<HostTensor> {
        let index = self.keys.iter().position(|(known, _)| known == key).ok_or_else(|| Error::UnknownState {
            key: key.to_owned(),
            known: self.keys.iter().map(|(key, _)| format!("`{key}`")).collect::<Vec<_>>().join(", "),
        })?;
        let ty = &self.keys[index].1;
        let tensor = match &self.layout {
            Some((mesh, placements)) => {
                let held: Vec<(usize, &Buffer)> = self
                    .mesh_devices
                    .iter()
                    .zip(&self.buffers)
                    .map(|(&device, buffers)| (device, &*buffers[index]))
                    .collect();
                let (sharding, shape) = &placements[index];
                assemble_local(&self.runtime, &held, sharding, mesh, shape)?
            }
            None => {
                let buffers = self
                    .buffers
                    .get(replica)
                    .ok_or(ttpu_runtime::Error::NoSuchDevice { index: replica, count: self.buffers.len() })?;
                self.runtime.download(&buffers[index])?
            }
        };
        let tensor = tensor.as_value_of(ty.dtype);
        let true_shape = resolved_shape(ty, &tensor.shape, &self.symbol_values);
        Ok(if true_shape == tensor.shape { tensor } else { resize(&tensor, &true_shape) })
    }

    /// Every output of every replica copied to the host, cut back to the sizes the inputs gave.
    /// A sharded model's outputs are assembled from the devices' shards: one map.
    pub fn to_host(&self) -> Result<Vec<TensorMap>> {
        let _span = tracing::debug_span!("to_host").entered();
        if let Some((mesh, placements)) = &self.layout {
            let mut outputs = TensorMap::new();
            for (index, ((key, ty), (sharding, shape))) in self.keys.iter().zip(placements).enumerate() {
                let held: Vec<(usize, &Buffer)> = self
                    .mesh_devices
                    .iter()
                    .zip(&self.buffers)
                    .map(|(&device, buffers)| (device, &*buffers[index]))
                    .collect();
                let tensor = assemble_local(&self.runtime, &held, sharding, mesh, shape)?.as_value_of(ty.dtype);
                let true_shape = resolved_shape(ty, &tensor.shape, &self.symbol_values);
                let tensor = if true_shape == tensor.shape { tensor } else { resize(&tensor, &true_shape) };
                outputs.insert(key.clone(), tensor);
            }
            return Ok(vec![outputs]);
        }
        self.buffers
            .iter()
            .map(|buffers| {
                let mut outputs = TensorMap::new();
                for ((key, ty), buffer) in self.keys.iter().zip(buffers) {
                    let tensor = self.runtime.download(buffer)?.as_value_of(ty.dtype);
                    let true_shape = resolved_shape(ty, &tensor.shape, &self.symbol_values);
                    let tensor = if true_shape == tensor.shape { tensor } else { resize(&tensor, &true_shape) };
                    outputs.insert(key.clone(), tensor);
                }
                Ok(outputs)
            })
            .collect()
    }
}

impl LoadedModel {
    pub(crate) fn new(
        runtime: Runtime,
        model: Model,
        bucketing: Bucketing,
        weights: &TensorMap,
        replicas: usize,
    ) -> Result<LoadedModel> {
        LoadedModel::build(runtime, model, bucketing, weights, replicas, None)
    }

    pub(crate) fn sharded(
        runtime: Runtime,
        model: Model,
        bucketing: Bucketing,
        weights: &TensorMap,
        parallelism: Parallelism,
    ) -> Result<LoadedModel> {
        let devices = parallelism.mesh.device_count();
        LoadedModel::build(runtime, model, bucketing, weights, devices, Some(parallelism))
    }

    fn build(
        runtime: Runtime,
        model: Model,
        bucketing: Bucketing,
        weights: &TensorMap,
        replicas: usize,
        parallelism: Option<Parallelism>,
    ) -> Result<LoadedModel> {
        let _span = tracing::info_span!("weights_in", tensors = weights.len(), replicas).entered();
        // A mesh spans the job's devices; replicas run on this process's own.
        let available = match &parallelism {
            Some(_) => runtime.device_count(),
            None => runtime.local_devices().len(),
        };
        if replicas == 0 || replicas > available {
            return Err(match &parallelism {
                Some(parallelism) => Error::Sharding {
                    message: format!(
                        "mesh {} needs {replicas} devices, but the runtime has {available}",
                        parallelism.mesh
                    ),
                },
                None => ttpu_runtime::Error::Replicas { replicas, count: available }.into(),
            });
        }
        let devices: Vec<usize> = match &parallelism {
            Some(_) => (0..replicas).collect(),
            None => runtime.local_devices()[..replicas].to_vec(),
        };
        let local: Vec<usize> = (0..replicas).filter(|&position| runtime.is_local(devices[position])).collect();
        if let (Some(parallelism), true) = (&parallelism, local.is_empty()) {
            return Err(Error::Sharding {
                message: format!(
                    "mesh {} takes devices 0..{replicas} of the job's {}, none of them process {}'s: a mesh spans every \
                     process's devices",
                    parallelism.mesh,
                    runtime.device_count(),
                    runtime.process_index()
                ),
            });
        }
        let signature = model.signature();
        let weight_tensors = bind_part(signature, weights, false)?;
        let weight_shapes: Vec<Option<Vec<i64>>> =
            weight_tensors.iter().map(|tensor| tensor.map(|tensor| tensor.shape.clone())).collect();
        let shapes: Vec<Option<&[i64]>> = weight_shapes.iter().map(|shape| shape.as_deref()).collect();
        let fixed_symbols = bind_symbols(model.module(), &shapes)?;
        let mutations = mutations(signature)?;
        let mut state: Vec<Vec<Option<Arc<Buffer>>>> = vec![vec![None; weight_tensors.len()]; local.len()];
        let mut shardings = vec![None; weight_tensors.len()];
        for (index, (input, tensor)) in signature.inputs.iter().zip(&weight_tensors).enumerate() {
            let Some(tensor) = tensor else { continue };
            match &parallelism {
                Some(parallelism) => {
                    // Each device of this process keeps only its shard.
                    let sharding = parallelism.weight_sharding(&input.key, &tensor.ty())?;
                    let shards = split_for(tensor, &sharding, &parallelism.mesh, &local)?;
                    for ((buffers, shard), &position) in state.iter_mut().zip(&shards).zip(&local) {
                        buffers[index] = Some(Arc::new(runtime.upload(shard, devices[position])?));
                    }
                    shardings[index] = Some(sharding);
                }
                None => {
                    for (buffers, &position) in state.iter_mut().zip(&local) {
                        buffers[index] = Some(Arc::new(runtime.upload(tensor, devices[position])?));
                    }
                }
            }
        }
        let resident = crate::prepare::resident_inputs(signature);
        Ok(LoadedModel {
            runtime,
            model,
            bucketing,
            replicas,
            devices,
            local,
            weight_shapes,
            fixed_symbols,
            resident,
            mutations,
            sharded: parallelism.map(|parallelism| (parallelism, shardings)),
            state: Mutex::new(state),
            prepared: Mutex::new(Vec::new()),
        })
    }

    /// The model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Devices the weights live on (`0..replicas`, or the mesh's devices).
    pub fn devices(&self) -> usize {
        self.replicas
    }

    /// Input sets one run takes: one per replica, or one for a sharded model (the whole input
    /// set, in every process of a job).
    pub fn input_sets(&self) -> usize {
        if self.sharded.is_some() { 1 } else { self.replicas }
    }

    /// Bytes of weights and buffers one device holds (the most any of this process's devices
    /// holds).
    pub fn resident_bytes_per_device(&self) -> Result<usize> {
        let state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut most = 0usize;
        for buffers in state.iter() {
            let mut total = 0usize;
            for buffer in buffers.iter().flatten() {
                let bytes = buffer.on_device_size_in_bytes().map_err(ttpu_runtime::Error::from)?;
                total = total.saturating_add(bytes);
            }
            most = most.max(total);
        }
        Ok(most)
    }

    /// The keys of the weights and buffers the model keeps resident, in signature order.
    pub fn state_keys(&self) -> Vec<String> {
        self.model
            .signature()
            .inputs
            .iter()
            .filter(|input| input.role != InputRole::UserInput)
            .map(|input| input.key.clone())
            .collect()
    }

    /// The resident buffer of weight or buffer `key` (a signature target) on `replica` (the
    /// `replica`-th of this process's devices). After a run that mutates it, this handle is
    /// donated and the model holds a new buffer.
    pub fn state_buffer(&self, key: &str, replica: usize) -> Result<Arc<Buffer>> {
        let index = self.weight_index(key)?;
        let state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        state
            .get(replica)
            .and_then(|buffers| buffers[index].clone())
            .ok_or(ttpu_runtime::Error::NoSuchDevice { index: replica, count: self.local.len() }.into())
    }

    /// The current value of weight or buffer `key` on `replica`, copied to the host (a sharded
    /// model's assembled from the shards of this process's devices, whatever `replica`).
    pub fn state(&self, key: &str, replica: usize) -> Result<HostTensor> {
        if let Some((parallelism, shardings)) = &self.sharded {
            let index = self.weight_index(key)?;
            let buffers = (0..self.local.len())
                .map(|position| self.state_buffer(key, position))
                .collect::<Result<Vec<Arc<Buffer>>>>()?;
            let held: Vec<(usize, &Buffer)> =
                self.local.iter().zip(&buffers).map(|(&device, buffer)| (device, &**buffer)).collect();
            let shape = self.weight_shapes[index].clone().unwrap_or_default();
            let sharding = shardings[index].clone().unwrap_or_else(|| Sharding::replicated(shape.len()));
            return assemble_local(&self.runtime, &held, &sharding, &parallelism.mesh, &shape);
        }
        let buffer = self.state_buffer(key, replica)?;
        Ok(self.runtime.download(&buffer)?)
    }

    fn weight_index(&self, key: &str) -> Result<usize> {
        let signature = self.model.signature();
        signature.inputs.iter().position(|input| input.role != InputRole::UserInput && input.key == key).ok_or_else(
            || Error::UnknownState {
                key: key.to_owned(),
                known: join_keys(
                    signature
                        .inputs
                        .iter()
                        .filter(|input| input.role != InputRole::UserInput)
                        .map(|input| input.key.as_str()),
                ),
            },
        )
    }

    /// Runs on one input set (keyed by placeholder name) and copies every output to the host:
    /// user outputs as `output_0`, ... and each mutated buffer's new value under its target.
    pub fn run(&self, inputs: &TensorMap) -> Result<TensorMap> {
        let _span = tracing::info_span!("run").entered();
        let mut outputs = self.run_replicated(&[inputs])?;
        Ok(outputs.pop().unwrap_or_default())
    }

    /// Runs every replica on its own input set and copies every output to the host.
    pub fn run_replicated(&self, inputs: &[&TensorMap]) -> Result<Vec<TensorMap>> {
        let prepared = self.prepare(inputs)?;
        self.execute(prepared)?.to_host()
    }

    /// Checks, pads and uploads one input set per replica, and finds (or compiles) the
    /// executable for their sizes.
    pub fn prepare(&self, inputs: &[&TensorMap]) -> Result<Prepared> {
        let _span = tracing::debug_span!("prepare").entered();
        if inputs.len() != self.input_sets() {
            return Err(Error::ReplicaInputs { given: inputs.len(), replicas: self.input_sets() });
        }
        let signature = self.model.signature();
        let mut bound: Option<IndexMap<String, i64>> = None;
        let mut per_replica = Vec::with_capacity(inputs.len());
        for (replica, inputs) in inputs.iter().enumerate() {
            let tensors = bind_part(signature, inputs, true)?;
            let shapes: Vec<Option<&[i64]>> = tensors
                .iter()
                .zip(&self.weight_shapes)
                .map(|(input, weight)| input.map(|tensor| tensor.shape.as_slice()).or(weight.as_deref()))
                .collect();
            let values = bind_symbols(self.model.module(), &shapes)?;
            match &bound {
                Some(first) if *first != values => {
                    return Err(Error::ReplicaSizes {
                        replica,
                        first: describe_sizes(first),
                        here: describe_sizes(&values),
                    });
                }
                Some(_) => {}
                None => bound = Some(values),
            }
            per_replica.push(tensors);
        }
        let mut symbol_values = bound.unwrap_or_default();
        let module = self.model.module();
        let mut compiled_values: IndexMap<String, i64> = symbol_values
            .iter()
            .map(|(symbol, &size)| {
                let bucket = if self.model.paddable(symbol) && !self.fixed_symbols.contains_key(symbol) {
                    self.bucketing.bucket(size, module.graph.symbols.range(symbol))
                } else {
                    size
                };
                (symbol.clone(), bucket)
            })
            .collect();
        let mut specialisation = self.model.specialise(compiled_values.clone())?;
        // A sharded model's input placements; they do not depend on sizes the data decides.
        let input_layout = match &self.sharded {
            Some((parallelism, shardings)) => {
                let placements = parallelism.input_shardings(&specialisation.module.signature)?;
                // The resident shards were cut by the load-time placements; they must still hold.
                for (index, resident) in shardings.iter().enumerate() {
                    if let Some(resident) = resident
                        && *resident != placements[index]
                    {
                        return Err(Error::Sharding {
                            message: format!(
                                "`{}` was loaded as {resident} but this size places it as {}",
                                signature.inputs[index].key, placements[index]
                            ),
                        });
                    }
                }
                Some((parallelism.mesh.clone(), placements))
            }
            None => None,
        };
        let uploaded = match &input_layout {
            Some((mesh, placements)) => {
                let tensors = per_replica.into_iter().next().unwrap_or_default();
                self.upload_shards(tensors, &signature.inputs, mesh, placements, &compiled_values)?
            }
            None => self.upload(per_replica, &signature.inputs, &compiled_values)?,
        };
        // Sizes the data decides: run size programs on the uploaded inputs until every size is
        // known, then the whole program at those sizes.
        while !specialisation.module.pending.is_empty() {
            let size_layout = input_layout.as_ref().map(|(mesh, placements)| ProgramSharding {
                mesh: mesh.clone(),
                inputs: placements.clone(),
                outputs: vec![Sharding::replicated(0); specialisation.module.pending.len()],
            });
            let sizes = self.run_sizes(&specialisation, &uploaded, size_layout)?;
            for (pending, value) in specialisation.module.pending.iter().zip(sizes) {
                if compiled_values.contains_key(&pending.symbol) {
                    return Err(Error::Bug {
                        message: format!("the size program computes `{}` again", pending.symbol),
                    });
                }
                check_data_size(module, pending, value)?;
                compiled_values.insert(pending.symbol.clone(), value);
                symbol_values.insert(pending.symbol.clone(), value);
            }
            specialisation = self.model.specialise(compiled_values.clone())?;
        }
        let layout = match &self.sharded {
            Some((parallelism, _)) => Some(parallelism.program_sharding(&specialisation.module.signature)?),
            None => None,
        };
        let spec = CompileSpec {
            devices: self.devices.clone(),
            aliases: self.aliases(&specialisation.module.signature, &specialisation.module.graph),
            sharding: layout.clone(),
            xla_options: self.model.xla_options().to_vec(),
        };
        let split = match self.sharded {
            None if self.model.prepares_weights() => specialisation.weight_split(&self.resident)?,
            _ => None,
        };
        let (executable, compile, prepared) = match split {
            Some(split) => {
                let (executables, compile) = specialisation.split_executables(&self.runtime, &spec, &split)?;
                let prepared = self.prepared_values(&specialisation, &split, &executables.prep)?;
                (executables.main, compile, Some(prepared))
            }
            None => {
                let (executable, compile) = specialisation.executable(&self.runtime, &spec)?;
                (executable, compile, None)
            }
        };
        Ok(Prepared { specialisation, executable, compile, symbol_values, inputs: uploaded, layout, prepared })
    }

    /// The preparation's results for `specialisation` on every device: computed from the
    /// resident weights on its first run, then kept.
    fn prepared_values(
        &self,
        specialisation: &Arc<Specialisation>,
        split: &WeightSplit,
        prep: &Executable,
    ) -> Result<PreparedValues> {
        let mut prepared = self.prepared.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((_, values)) = prepared.iter().find(|(known, _)| Arc::ptr_eq(known, specialisation)) {
            return Ok(Arc::clone(values));
        }
        let state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let lists = state
            .iter()
            .map(|weights| {
                split
                    .prep_inputs
                    .iter()
                    .map(|&index| {
                        weights[index].as_deref().ok_or_else(|| Error::Bug {
                            message: format!("the preparation reads input {index}, which is not resident"),
                        })
                    })
                    .collect::<Result<Vec<&Buffer>>>()
            })
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<&[&Buffer]> = lists.iter().map(Vec::as_slice).collect();
        let _span = tracing::debug_span!("prepare weights", values = split.prep.outputs.len()).entered();
        let results = prep.run_replicated(&refs)?;
        let values: PreparedValues =
            Arc::new(results.into_iter().map(|outputs| outputs.into_iter().map(Arc::new).collect()).collect());
        prepared.push((Arc::clone(specialisation), Arc::clone(&values)));
        Ok(values)
    }

    /// Splits one input set over a mesh by `placements` and uploads the shards of this process's
    /// devices, padded to the compiled sizes first.
    fn upload_shards(
        &self,
        tensors: Vec<Option<&HostTensor>>,
        inputs: &[ttpu_fx::ModelInput],
        mesh: &Mesh,
        placements: &[Sharding],
        compiled_values: &IndexMap<String, i64>,
    ) -> Result<Vec<Vec<Option<Buffer>>>> {
        let mut uploaded: Vec<Vec<Option<Buffer>>> = (0..self.local.len()).map(|_| Vec::new()).collect();
        for ((input, tensor), sharding) in inputs.iter().zip(tensors).zip(placements) {
            let Some(tensor) = tensor else {
                uploaded.iter_mut().for_each(|buffers| buffers.push(None));
                continue;
            };
            let shape = resolved_shape(&input.ty, &tensor.shape, compiled_values);
            let padded = if shape == tensor.shape { Cow::Borrowed(tensor) } else { Cow::Owned(resize(tensor, &shape)) };
            let shards = split_for(&padded, sharding, mesh, &self.local)?;
            for ((buffers, shard), &position) in uploaded.iter_mut().zip(&shards).zip(&self.local) {
                buffers.push(Some(self.runtime.upload(shard, self.devices[position])?));
            }
        }
        Ok(uploaded)
    }

    /// Uploads each replica's user inputs, padded to the compiled sizes.
    fn upload(
        &self,
        per_replica: Vec<Vec<Option<&HostTensor>>>,
        inputs: &[ttpu_fx::ModelInput],
        compiled_values: &IndexMap<String, i64>,
    ) -> Result<Vec<Vec<Option<Buffer>>>> {
        let mut uploaded = Vec::with_capacity(self.replicas);
        for (&device, tensors) in self.devices.iter().zip(per_replica) {
            let buffers = inputs
                .iter()
                .zip(tensors)
                .map(|(input, tensor)| {
                    let Some(tensor) = tensor else { return Ok(None) };
                    let shape = resolved_shape(&input.ty, &tensor.shape, compiled_values);
                    let padded =
                        if shape == tensor.shape { Cow::Borrowed(tensor) } else { Cow::Owned(resize(tensor, &shape)) };
                    Ok(Some(self.runtime.upload(&padded, device)?))
                })
                .collect::<Result<Vec<Option<Buffer>>>>()?;
            uploaded.push(buffers);
        }
        Ok(uploaded)
    }

    /// Runs a size program on the resident weights and `inputs` (laid out over the mesh by
    /// `layout` for a sharded model, its sizes replicated) and reads back its sizes; every
    /// replica's data must give the same sizes, since one program runs on every device.
    fn run_sizes(
        &self,
        specialisation: &Specialisation,
        inputs: &[Vec<Option<Buffer>>],
        layout: Option<ProgramSharding>,
    ) -> Result<Vec<i64>> {
        let spec = CompileSpec {
            devices: self.devices.clone(),
            aliases: Vec::new(),
            sharding: layout,
            xla_options: self.model.xla_options().to_vec(),
        };
        let (executable, _) = specialisation.executable(&self.runtime, &spec)?;
        let results = {
            let state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let lists = argument_lists(&state, inputs)?;
            let refs: Vec<&[&Buffer]> = lists.iter().map(Vec::as_slice).collect();
            let _span = tracing::debug_span!("size program", replicas = self.replicas).entered();
            executable.run_replicated(&refs)?
        };
        let pending = &specialisation.module.pending;
        let mut first: Option<Vec<i64>> = None;
        for (replica, outputs) in results.iter().enumerate() {
            let sizes = outputs
                .iter()
                .map(|buffer| {
                    let tensor = self.runtime.download(buffer)?;
                    let bytes: [u8; 8] = tensor.data.as_slice().try_into().map_err(|_| Error::Bug {
                        message: format!("a size program returned {}, not one i64", tensor.describe()),
                    })?;
                    Ok(i64::from_le_bytes(bytes))
                })
                .collect::<Result<Vec<i64>>>()?;
            match &first {
                Some(first) if *first != sizes => {
                    let show = |sizes: &[i64]| {
                        pending
                            .iter()
                            .zip(sizes)
                            .map(|(pending, size)| format!("{} = {size}", pending.symbol))
                            .collect::<Vec<_>>()
                            .join(", ")
                    };
                    return Err(Error::ReplicaSizes { replica, first: show(first), here: show(&sizes) });
                }
                Some(_) => {}
                None => first = Some(sizes),
            }
        }
        Ok(first.unwrap_or_default())
    }

    /// Runs prepared inputs; mutated buffers become the new resident state.
    pub fn execute(&self, prepared: Prepared) -> Result<DeviceOutputs> {
        let Prepared { specialisation, executable, symbol_values, inputs, layout, prepared, .. } = prepared;
        let mut state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let results = {
            let mut lists = argument_lists(&state, &inputs)?;
            if let Some(prepared) = &prepared {
                for (list, values) in lists.iter_mut().zip(prepared.iter()) {
                    list.extend(values.iter().map(|value| &**value));
                }
            }
            let refs: Vec<&[&Buffer]> = lists.iter().map(Vec::as_slice).collect();
            let _span = tracing::debug_span!("execute", replicas = self.replicas).entered();
            executable.run_replicated(&refs)?
        };
        let buffers: Vec<Vec<Arc<Buffer>>> =
            results.into_iter().map(|outputs| outputs.into_iter().map(Arc::new).collect()).collect();
        for (replica, outputs) in buffers.iter().enumerate() {
            for &(output, input) in &self.mutations {
                state[replica][input] = Some(Arc::clone(&outputs[output]));
            }
        }
        let keys = self
            .model
            .signature()
            .outputs
            .iter()
            .zip(&specialisation.module.signature.outputs)
            .map(|(symbolic, _)| (symbolic.key.clone(), symbolic.ty.clone()))
            .collect();
        let layout = layout.map(|layout| {
            let placements = layout
                .outputs
                .iter()
                .zip(&specialisation.module.signature.outputs)
                .map(|(sharding, output)| {
                    (sharding.clone(), output.ty.shape.as_static().map(|dims| dims.to_vec()).unwrap_or_default())
                })
                .collect();
            (layout.mesh, placements)
        });
        Ok(DeviceOutputs {
            runtime: self.runtime.clone(),
            keys,
            symbol_values,
            buffers,
            layout,
            mesh_devices: self.local.clone(),
        })
    }

    /// Input-output aliases of the mutations whose buffer and new value have one static type
    /// in the specialised graph: those update in place through donation; any other mutation
    /// still replaces the resident buffer, through a copy.
    fn aliases(&self, signature: &ModelSignature, graph: &ttpu_ir::Graph) -> Vec<(usize, usize)> {
        self.mutations
            .iter()
            .filter(|&&(output, input)| {
                let (input_ty, output_ty) = (graph.ty(graph.inputs[input]), graph.ty(graph.outputs[output]));
                input_ty == output_ty
                    && input_ty.shape.dims().iter().all(|dim| matches!(dim, Dim::Static(_)))
                    && signature.inputs[input].role != InputRole::UserInput
            })
            .map(|&(output, input)| (input, output))
            .collect()
    }
}

/// Each device's argument list: its resident weights, and the uploaded inputs between them.
fn argument_lists<'a>(
    state: &'a [Vec<Option<Arc<Buffer>>>],
    inputs: &'a [Vec<Option<Buffer>>],
) -> Result<Vec<Vec<&'a Buffer>>> {
    state
        .iter()
        .zip(inputs)
        .map(|(weights, inputs)| {
            weights
                .iter()
                .zip(inputs)
                .map(|(weight, input)| match (weight, input) {
                    (Some(weight), _) => Ok(&**weight),
                    (None, Some(input)) => Ok(input),
                    (None, None) => Err(Error::Bug { message: "a graph input has neither weight nor input".into() }),
                })
                .collect::<Result<Vec<&Buffer>>>()
        })
        .collect()
}

/// Checks a size the data gave against its symbol's range, as PyTorch's runtime asserts do.
fn check_data_size(module: &ttpu_fx::Module, pending: &ttpu_fx::DataSize, value: i64) -> Result<()> {
    let Some(range) = module.graph.symbols.range(&pending.symbol) else { return Ok(()) };
    if value >= range.min && range.max.is_none_or(|max| value <= max) {
        return Ok(());
    }
    let range_text = match range.max {
        Some(max) => format!("[{}, {max}]", range.min),
        None => format!("[{}, inf]", range.min),
    };
    let message = if value < 0 {
        format!("{} is invalid for these inputs (PyTorch raises here)", pending)
    } else {
        format!("{} is {value} for these inputs, outside the range", pending)
    };
    Err(Error::SymbolSize { symbol: pending.symbol.clone(), range: range_text, message })
}

/// `(output, input)` for every buffer mutation: the output is the new value of the buffer input
/// with the same target.
fn mutations(signature: &ModelSignature) -> Result<Vec<(usize, usize)>> {
    let mut res = Vec::new();
    for (output_index, output) in signature.outputs.iter().enumerate() {
        if output.role != OutputRole::BufferMutation {
            continue;
        }
        let input = signature
            .inputs
            .iter()
            .position(|input| matches!(input.role, InputRole::Buffer { .. }) && input.key == output.key)
            .ok_or_else(|| Error::UnknownState { key: output.key.clone(), known: "no buffer of that target".into() })?;
        let input_ty = &signature.inputs[input].ty;
        if input_ty.dtype != output.ty.dtype || input_ty.rank() != output.ty.rank() {
            return Err(Error::TensorMismatch {
                what: "mutated buffer",
                key: output.key.clone(),
                expected: input_ty.to_string(),
                found: output.ty.to_string(),
            });
        }
        res.push((output_index, input));
    }
    Ok(res)
}

/// The tensors of one role (user inputs, or everything else: the weights), by signature input,
/// checked: each present and of the right type, and no other key given.
pub(crate) fn bind_part<'a>(
    signature: &ModelSignature,
    source: &'a TensorMap,
    user: bool,
) -> Result<Vec<Option<&'a HostTensor>>> {
    let what = if user { "input" } else { "weight" };
    let mut res = Vec::with_capacity(signature.inputs.len());
    for input in &signature.inputs {
        if (input.role == InputRole::UserInput) != user {
            res.push(None);
            continue;
        }
        let tensor = source.get(&input.key).ok_or_else(|| Error::MissingTensor {
            what,
            key: input.key.clone(),
            expected: input.ty.to_string(),
        })?;
        if !tensor.fits(&input.ty) {
            let found = match ttpu_runtime::byte_size(tensor.dtype, &tensor.shape) {
                Some(bytes) if bytes != tensor.data.len() => {
                    format!("{} holding {} bytes, not {bytes}", tensor.describe(), tensor.data.len())
                }
                _ => tensor.describe(),
            };
            return Err(Error::TensorMismatch { what, key: input.key.clone(), expected: input.ty.to_string(), found });
        }
        res.push(Some(tensor));
    }
    let known: Vec<&str> = signature
        .inputs
        .iter()
        .filter(|input| (input.role == InputRole::UserInput) == user)
        .map(|input| input.key.as_str())
        .collect();
    if let Some((key, tensor)) = source.iter().find(|(key, _)| !known.contains(&key.as_str())) {
        return Err(Error::UnexpectedTensor {
            what,
            key: key.clone(),
            found: tensor.describe(),
            known: join_keys(known.into_iter()),
        });
    }
    Ok(res)
}

fn join_keys<'a>(keys: impl Iterator<Item = &'a str>) -> String {
    let keys: Vec<String> = keys.map(|key| format!("`{key}`")).collect();
    if keys.is_empty() { "none".into() } else { keys.join(", ") }
}

fn describe_sizes(values: &IndexMap<String, i64>) -> String {
    values.iter().map(|(name, size)| format!("{name} = {size}")).collect::<Vec<_>>().join(", ")
}
