//! `Device`: one device of a [`Runtime`], and the pending tape of ops recorded on it.
//!
//! Ops record into one pending tape per device (see `tape`). Materialization (a read, `sync`,
//! the op limit, or every op outside `DeferAndFuse`) takes the state lock and then:
//! 1. traverses: collects the live tensors still pending and takes the steps they need as the
//!    program, whose inputs are the device buffers those steps read (the whole tape, without a
//!    copy, when every step is needed);
//! 2. compiles on a cache miss: builds the program into IR and fuses it with `ttpu_fuse`; the
//!    runtime lowers and compiles it, keyed by the tape, so a hit builds no IR at all;
//! 3. executes, which in this PJRT binding also waits for the device (synchronizes);
//! 4. stores each output buffer in its tensor and starts an empty pending tape.
//!
//! Host transfers happen only when data is read. Recording and materializing hold the device
//! state's lock (and, inside it, the runtime's compile cache's), always in that order, which keeps many
//! threads on one device free of deadlocks; a tensor's buffer is set once, under the state lock,
//! and read without one.

use std::any::Any;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use smallvec::SmallVec;
use ttpu_ir::Collective;
use ttpu_ir::{DType, Graph};
use ttpu_runtime::{Buffer, CompileSpec, Counters, Executable, FxHasher, ProgramKey, Runtime, RuntimeOptions};

use crate::mesh::{MeshPlacement, Stored};
use crate::tape::{CallGraph, Slot, Tape, TapeOp, TypeMemo, Used};
use crate::tensor::{RecordedAt, TensorNode};
use crate::{Error, Result, Tensor};

/// When recorded ops run.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Record ops and run the pending tape as one program when data is needed (the default).
    #[default]
    DeferAndFuse,
    /// Compile each op once per signature and launch it at once.
    DeferNever,
    /// Like [`Mode::DeferNever`], and wait for the device after each op. This binding's
    /// `execute` always waits, so the two launch modes behave alike; the mode is kept so code
    /// written against TorchTPU's three modes ports unchanged.
    DeferNeverAndLaunchBlocking,
}

/// Ops the pending tape may reach before it is materialized without being asked.
pub const DEFAULT_PENDING_LIMIT: usize = 20_000;

/// One device of a [`Runtime`], with its pending tape. Cheap to clone (a shared handle);
/// `Send + Sync`, so many threads can record on one device. Compiles, the compile caches and
/// the counters are the runtime's, shared with everything else on it.
#[derive(Clone)]
pub struct Device {
    pub(crate) inner: Arc<DeviceInner>,
}

pub(crate) struct DeviceInner {
    pub(crate) runtime: Runtime,
    /// The runtime device index tensors of this device live on.
    pub(crate) index: usize,
    state: Mutex<State>,
    /// Input buffers runs have written their outputs into (see [`donations`]).
    donated: AtomicU64,
}

/// The pending tape and what its inputs and results belong to.
pub(crate) struct State {
    mode: Mode,
    pending_limit: usize,
    /// Increases each time the pending tape is replaced, so a stale slot is never read.
    pub(crate) epoch: u64,
    tape: Tape,
    /// The value each pending-tape input reads, by input index.
    inputs: Vec<Arc<Stored>>,
    /// The bytes of each pending-tape host value, by host index.
    host_data: Vec<Vec<u8>>,
    /// Input already made for a buffer, by the buffer's address (kept alive by `inputs`).
    /// Hashed with `FxHasher`: recording looks an operand's buffer up here on every op.
    input_of_buffer: HashMap<usize, Slot, BuildHasherDefault<FxHasher>>,
    /// Tensors recorded in this epoch; dead ones are skipped when materializing.
    recorded: Vec<Weak<TensorNode>>,
    /// Interned tensor types and the result types of the op signatures seen so far.
    pub(crate) types: TypeMemo,
    /// The mesh programs run over, if any (see `mesh`).
    pub(crate) mesh: Option<Arc<MeshPlacement>>,
    /// The replicas of the pending program, once it holds a collective recorded into it
    /// (`Tensor::collective_in_program`): runtime device indices in replica order, this device
    /// among them. `None`: a program of this device alone.
    pub(crate) replicas: Option<Vec<usize>>,
}

impl State {
    fn new(mode: Mode, pending_limit: usize, epoch: u64) -> State {
        State {
            mode,
            pending_limit,
            epoch,
            tape: Tape::default(),
            inputs: Vec::new(),
            host_data: Vec::new(),
            input_of_buffer: HashMap::default(),
            recorded: Vec::new(),
            types: TypeMemo::default(),
            mesh: None,
            replicas: None,
        }
    }

    /// Starts an empty pending tape in a new epoch. The memory of `spare` (the tape just run) or
    /// of the old pending tape is reused, so steady-state recording does not regrow it.
    fn reset(&mut self, spare: Option<Tape>) {
        if let Some(spare) = spare {
            self.tape = spare;
        }
        self.tape.clear();
        self.epoch += 1;
        self.inputs.clear();
        self.host_data.clear();
        self.input_of_buffer.clear();
        self.recorded.clear();
        self.replicas = None;
    }

    /// The pending-tape slot holding `tensor`, adding its buffer as an input if needed.
    fn slot_of(&mut self, tensor: &Tensor) -> Result<Slot> {
        match (tensor.node.buffer.get(), tensor.node.recorded_at) {
            (Some(buffer), _) => {
                let address = Arc::as_ptr(buffer) as usize;
                if let Some(&slot) = self.input_of_buffer.get(&address) {
                    return Ok(slot);
                }
                let slot = self.tape.add_input(Arc::clone(&tensor.node.ty));
                self.inputs.push(Arc::clone(buffer));
                self.input_of_buffer.insert(address, slot);
                Ok(slot)
            }
            (None, Some(RecordedAt { epoch, slot })) if epoch == self.epoch => Ok(slot),
            (None, _) => Err(Error::internal("a pending tensor outlived its tape")),
        }
    }

    /// The live pending tensors and their slots, in recording order.
    fn live(&self) -> Result<Vec<(Arc<TensorNode>, Slot)>> {
        let mut res = Vec::new();
        for node in self.recorded.iter().filter_map(Weak::upgrade) {
            if node.buffer.get().is_some() {
                continue;
            }
            match node.recorded_at {
                Some(RecordedAt { epoch, slot }) if epoch == self.epoch => res.push((node, slot)),
                _ => continue,
            }
        }
        Ok(res)
    }

    /// The program that materializing now would run, and the pending inputs it reads.
    fn pending_program(&self) -> Result<(Tape, Used)> {
        let outputs: Vec<Slot> = self.live()?.iter().map(|(_, slot)| *slot).collect();
        self.tape.extract(&self.tape.needed(&outputs), &outputs)
    }
}

impl Device {
    /// The first CPU device of the plugin that `cargo xtask setup` installs (or
    /// `$TTPU_PJRT_PLUGIN`), on a runtime of its own. Fails, saying to run `cargo xtask setup`,
    /// when the plugin is missing.
    pub fn cpu() -> Result<Device> {
        Device::on(&Runtime::cpu()?, 0)
    }

    /// The first device of the PJRT plugin at `path`, on a runtime of its own.
    pub fn from_plugin(path: impl AsRef<Path>) -> Result<Device> {
        Device::on(&Runtime::new(path.as_ref(), &RuntimeOptions::default())?, 0)
    }

    /// Device `index` of `runtime`. Devices made from one runtime share its compiles, caches and
    /// counters with each other and with the driver's sessions on it.
    pub fn on(runtime: &Runtime, index: usize) -> Result<Device> {
        if index >= runtime.device_count() {
            return Err(ttpu_runtime::Error::NoSuchDevice { index, count: runtime.device_count() }.into());
        }
        Ok(Device {
            inner: Arc::new(DeviceInner {
                runtime: runtime.clone(),
                index,
                state: Mutex::new(State::new(Mode::default(), DEFAULT_PENDING_LIMIT, 0)),
                donated: AtomicU64::new(0),
            }),
        })
    }

    /// The runtime this device belongs to.
    pub fn runtime(&self) -> &Runtime {
        &self.inner.runtime
    }

    /// The runtime device index of this device.
    pub fn index(&self) -> usize {
        self.inner.index
    }

    /// The executable of a static `graph` (lowered as given: the caller chose its
    /// optimizations) on this device, through the runtime's compile cache, keyed by the graph's
    /// structure and concrete shapes. Recorded tapes are other keys there.
    pub fn executable_of(&self, graph: &Graph) -> Result<Arc<Executable>> {
        Ok(self.inner.runtime.graph_executable(graph, &CompileSpec::on(self.inner.index))?)
    }

    /// The execution mode.
    pub fn mode(&self) -> Result<Mode> {
        Ok(self.state()?.mode)
    }

    /// Sets the execution mode; work pending under the old mode runs first.
    pub fn set_mode(&self, mode: Mode) -> Result<()> {
        let mut state = self.state()?;
        self.materialize(&mut state)?;
        state.mode = mode;
        Ok(())
    }

    /// Sets how many ops the pending tape may hold before it runs unasked.
    pub fn set_pending_limit(&self, nodes: usize) -> Result<()> {
        self.state()?.pending_limit = nodes;
        Ok(())
    }

    /// Sets how many compiled programs the runtime keeps in memory (least recently used leave
    /// first).
    pub fn set_cache_capacity(&self, graphs: usize) -> Result<()> {
        Ok(self.inner.runtime.set_cache_capacity(graphs)?)
    }

    /// Also keeps the runtime's compiled programs in `dir`, across processes. Entries are
    /// checked before use and ignored when torn, corrupt or from another plugin build.
    pub fn set_disk_cache(&self, dir: impl AsRef<Path>) -> Result<()> {
        Ok(self.inner.runtime.set_disk_cache(dir.as_ref())?)
    }

    /// Number of compiled programs the runtime holds in memory.
    pub fn cached_graphs(&self) -> Result<usize> {
        Ok(self.inner.runtime.cached_programs()?)
    }

    /// Runs all pending work of live tensors and waits for it.
    pub fn sync(&self) -> Result<()> {
        let mut state = self.state()?;
        self.materialize(&mut state)
    }

    /// Ops recorded on the pending tape (dead ones included until the next materialization).
    pub fn pending_ops(&self) -> Result<usize> {
        Ok(self.state()?.tape.steps.len())
    }

    /// How many input buffers programs on this device have written their outputs into because
    /// no tensor held them any more (an update in place keeps one copy in memory).
    pub fn donated_buffers(&self) -> u64 {
        self.inner.donated.load(Ordering::Relaxed)
    }

    /// The runtime's totals of compiles, cache hits, executions and transfers so far.
    pub fn counters(&self) -> Counters {
        self.inner.runtime.counters()
    }

    /// The StableHLO module that would run the pending work of live tensors now (after fusion,
    /// as it would be compiled).
    pub fn computation_mlir(&self) -> Result<String> {
        let graph = self.state()?.pending_program()?.0.to_graph()?;
        Ok(ttpu_runtime::lower(&fused(&graph))?)
    }

    /// The pending work of live tensors as Graphviz DOT text.
    pub fn computation_graphviz(&self) -> Result<String> {
        let graph = self.state()?.pending_program()?.0.to_graph()?;
        Ok(graphviz(&graph))
    }

    /// The pending work of live tensors in ttpu's IR text form.
    pub fn computation_ir(&self) -> Result<String> {
        let graph = self.state()?.pending_program()?.0.to_graph()?;
        Ok(ttpu_ir::text::print(&graph))
    }

    pub(crate) fn state(&self) -> Result<MutexGuard<'_, State>> {
        Ok(self.inner.state.lock()?)
    }

    pub(crate) fn same(&self, other: &Device) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Records one tensor-level op on `operands` as a tape step. Outside `DeferAndFuse`, or past
    /// the op limit, the pending work runs at once.
    pub(crate) fn record(&self, operands: &[&Tensor], op: TapeOp) -> Result<Tensor> {
        let mut results = self.record_step(operands, op)?;
        results.pop().ok_or_else(|| Error::internal("an op recorded no result"))
    }

    /// A tensor of `dtype` and `dims` holding `data` (row-major little-endian bytes) from the
    /// host, recorded rather than uploaded: the program that first reads it receives it packed
    /// with the other host values of its dtype, one transfer for all (Python numbers passed as
    /// tensors, random keys). Its value is not part of the program's structure.
    pub fn host(&self, dtype: DType, dims: &[i64], data: Vec<u8>) -> Result<Tensor> {
        let count = crate::tensor::checked_element_count(dims)?;
        if data.len() != count.saturating_mul(dtype.byte_size()) {
            return Err(Error::DataLength {
                shape: Box::new(ttpu_ir::Shape::from_static(dims)),
                expected: count,
                actual: data.len() / dtype.byte_size().max(1),
            });
        }
        let mut state = self.state()?;
        let state = &mut *state;
        let ty = state.types.intern(ttpu_ir::TensorType::new(dtype, ttpu_ir::Shape::from_static(dims)));
        let slot = state.tape.add_host(Arc::clone(&ty));
        state.host_data.push(data);
        let recorded_at = Some(RecordedAt { epoch: state.epoch, slot });
        let node = Arc::new(TensorNode { device: self.clone(), ty, recorded_at, buffer: OnceLock::new() });
        state.recorded.push(Arc::downgrade(&node));
        Ok(Tensor { node })
    }

    /// Records `graph` called on `operands` as one step: a pending tensor per output of the
    /// graph. The operands must have the types of the graph's inputs.
    pub fn call(&self, graph: &CallGraph, operands: &[&Tensor]) -> Result<Vec<Tensor>> {
        Ok(self.record_step(operands, TapeOp::Call(graph.clone()))?.into_vec())
    }

    /// Records `collective` on `operand` into the pending program, which then runs as one
    /// replica of `devices` (see `Tensor::collective_in_program`). A pending program over other
    /// replicas runs first.
    pub(crate) fn record_collective(
        &self,
        operand: &Tensor,
        collective: Collective,
        devices: &[usize],
    ) -> Result<Tensor> {
        collective
            .check_replicas(devices.len())
            .map_err(|message| Error::CallOperands { message: format!("`{}`: {message}", collective.mnemonic()) })?;
        let local = self.inner.runtime.local_devices();
        let here: Vec<usize> = devices.iter().copied().filter(|device| local.contains(device)).collect();
        if here != [self.inner.index] {
            return Err(Error::CallOperands {
                message: format!(
                    "a collective recorded into device {}'s program needs that device, and no other device of this \
                     process, among its replicas {devices:?}",
                    self.inner.index
                ),
            });
        }
        {
            let mut state = self.state()?;
            if state.mesh.is_some() {
                return Err(Error::Mesh {
                    message:
                        "a collective cannot be recorded into a program over a mesh, whose partitioner adds its own"
                            .into(),
                });
            }
            if state.replicas.as_deref().is_some_and(|current| current != devices) {
                self.materialize(&mut state)?;
            }
            state.replicas = Some(devices.to_vec());
        }
        self.record(&[operand], TapeOp::Collective(collective))
    }

    fn record_step(&self, operands: &[&Tensor], op: TapeOp) -> Result<SmallVec<[Tensor; 1]>> {
        if operands.iter().any(|operand| !operand.node.device.same(self)) {
            return Err(Error::DeviceMismatch);
        }
        let mut state = self.state()?;
        let state = &mut *state;
        // The types first: an op that fails its checks leaves nothing on the tape.
        let operand_types: SmallVec<[&Arc<ttpu_ir::TensorType>; 3]> =
            operands.iter().map(|operand| &operand.node.ty).collect();
        let types = match &op {
            TapeOp::Call(call) => state.types.call_types(call, &operand_types)?,
            op => smallvec::smallvec![state.types.result_type(op, &operand_types)?],
        };
        let mut slots = SmallVec::<[Slot; 3]>::new();
        for operand in operands {
            slots.push(state.slot_of(operand)?);
        }
        let step = state.tape.push(op, slots);
        // A chain `x = x.op()` drops each result one op after the next one is recorded. Forgetting
        // such dead entries now frees their nodes while the allocator's caches are warm, instead
        // of a thousand at once when the tape runs; the order of the rest is kept.
        while let [.., before_last, _] = state.recorded.as_slice()
            && before_last.strong_count() == 0
        {
            let index = state.recorded.len() - 2;
            state.recorded.remove(index);
        }
        let mut results = SmallVec::new();
        for (index, ty) in types.into_iter().enumerate() {
            let slot = Slot::Step(step, u32::try_from(index).unwrap_or(u32::MAX));
            let recorded_at = Some(RecordedAt { epoch: state.epoch, slot });
            let node = Arc::new(TensorNode { device: self.clone(), ty, recorded_at, buffer: OnceLock::new() });
            state.recorded.push(Arc::downgrade(&node));
            results.push(Tensor { node });
        }
        if state.mode != Mode::DeferAndFuse || state.tape.steps.len() > state.pending_limit {
            self.materialize(state)?;
        }
        Ok(results)
    }

    /// The buffer of `tensor`, running pending work first if it has none yet.
    pub(crate) fn buffer(&self, tensor: &Tensor) -> Result<Arc<Stored>> {
        if let Some(buffer) = tensor.node.buffer.get() {
            return Ok(Arc::clone(buffer));
        }
        let mut state = self.state()?;
        self.materialize(&mut state)?;
        match tensor.node.buffer.get() {
            Some(buffer) => Ok(Arc::clone(buffer)),
            None => Err(Error::internal("a live tensor was not materialized")),
        }
    }

    /// Runs the pending work of every live tensor and starts an empty pending tape.
    pub(crate) fn materialize(&self, state: &mut State) -> Result<()> {
        let live = state.live()?;
        let mut spare = None;
        if !live.is_empty() {
            let outputs: Vec<Slot> = live.iter().map(|(_, slot)| *slot).collect();
            let needed = state.tape.needed(&outputs);
            // When every step and input is needed (a chain of ops whose intermediates died), the
            // pending tape is the program: take it instead of copying it step by step.
            let taken = needed.is_everything();
            let (program, used) = if taken {
                let mut tape = std::mem::take(&mut state.tape);
                tape.outputs = outputs;
                let used = Used { inputs: (0..tape.inputs.len()).collect(), hosts: (0..tape.hosts.len()).collect() };
                (tape, used)
            } else {
                state.tape.extract(&needed, &outputs)?
            };
            let aliases = donations(&program, &used.inputs, &state.inputs, &live);
            self.inner.donated.fetch_add(aliases.len() as u64, Ordering::Relaxed);
            let results = match state.mesh.clone() {
                None => self
                    .run(&program, &used, &state.inputs, &state.host_data, aliases, state.replicas.as_deref())
                    .map(|buffers| buffers.into_iter().map(Stored::single).collect::<Vec<_>>()),
                Some(mesh) => {
                    let types: Vec<_> = live.iter().map(|(node, _)| Arc::clone(&node.ty)).collect();
                    self.run_over_mesh(&mesh, &program, &used, &state.inputs, &state.host_data, aliases, &types)
                }
            };
            let results = match results {
                Ok(results) => results,
                Err(error) => {
                    if taken {
                        // Give the tape back so the pending tensors stay readable after a retry.
                        state.tape = program;
                        state.tape.outputs.clear();
                    }
                    return Err(error);
                }
            };
            if results.len() != live.len() {
                return Err(Error::internal(format!("{} outputs for {} tensors", results.len(), live.len())));
            }
            for ((node, _), stored) in live.iter().zip(results) {
                if node.buffer.set(Arc::new(stored)).is_err() {
                    return Err(Error::internal("a tensor was computed twice"));
                }
            }
            if taken {
                spare = Some(program);
            }
        }
        state.reset(spare);
        Ok(())
    }

    /// Compiles `program` if needed and executes it on the pending inputs `used_inputs`.
    fn run(
        &self,
        program: &Tape,
        used: &Used,
        inputs: &[Arc<Stored>],
        host_data: &[Vec<u8>],
        aliases: Vec<(usize, usize)>,
        replicas: Option<&[usize]>,
    ) -> Result<Vec<Buffer>> {
        // A recorded tape is built into IR and fused with the exact rules (bit-exact) only on a
        // memory miss. A program holding collectives runs as one replica of several, this
        // process running this device's.
        let devices = replicas.map_or_else(|| vec![self.inner.index], <[usize]>::to_vec);
        let spec = CompileSpec { aliases, devices, ..CompileSpec::default() };
        let executable =
            self.inner.runtime.executable(program, &spec, || Ok::<_, Error>(fused(&program.to_graph()?)))?;
        // Host values go up packed: one transfer per dtype, in the program's order.
        let mut packed = Vec::new();
        for (dtype, members) in program.host_groups() {
            let bytes: Vec<u8> =
                members.iter().flat_map(|&member| host_data[used.hosts[member]].iter().copied()).collect();
            let count = (bytes.len() / dtype.byte_size().max(1)) as i64;
            packed.push(self.inner.runtime.upload_bytes(&bytes, dtype, &[count], self.inner.index)?);
        }
        let args: Vec<&Buffer> = used.inputs.iter().map(|&index| inputs[index].first()).chain(packed.iter()).collect();
        Ok(executable.run(&args)?)
    }
}

impl ProgramKey for Tape {
    fn structure_hash(&self) -> u64 {
        Tape::structure_hash(self)
    }

    fn same_program(&self, other: &dyn ProgramKey) -> bool {
        other.as_any().downcast_ref::<Tape>().is_some_and(|other| self.same_program(other))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn boxed(&self) -> Box<dyn ProgramKey> {
        Box::new(self.clone())
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("plugin", &self.inner.runtime.plugin_path())
            .field("index", &self.inner.index)
            .finish()
    }
}

/// The `(input, output)` pairs of `program` whose input buffer no live tensor holds any more
/// (only the pending tape's input list does), each with the first output of its type: the run
/// writes that output into the dead buffer (donation), so an update in place (`x = x + 1` with
/// the old `x` dropped, a parameter's optimizer step) holds one copy in memory, not two.
fn donations(
    program: &Tape,
    used_inputs: &[usize],
    inputs: &[Arc<Stored>],
    live: &[(Arc<TensorNode>, Slot)],
) -> Vec<(usize, usize)> {
    let mut taken = vec![false; live.len()];
    let mut aliases = Vec::new();
    for (input, &pending_input) in used_inputs.iter().enumerate() {
        if Arc::strong_count(&inputs[pending_input]) != 1 {
            continue;
        }
        let ty = &program.inputs[input];
        let output = live.iter().enumerate().position(|(index, (node, _))| !taken[index] && node.ty == *ty);
        if let Some(output) = output {
            taken[output] = true;
            aliases.push((input, output));
        }
    }
    aliases
}

/// `graph` after `ttpu_fuse`'s exact rewrites (same inputs, outputs and bits). Fusion is an
/// optimization, so when it fails the graph runs as recorded and the failure is only logged.
pub(crate) fn fused(graph: &Graph) -> Graph {
    match ttpu_fuse::fuse(graph, &ttpu_fuse::FuseOptions::default()) {
        Ok((fused, report)) => {
            tracing::debug!(%report, "fused a recorded program");
            fused
        }
        Err(error) => {
            tracing::warn!(%error, "fusion failed; running the graph as recorded");
            graph.clone()
        }
    }
}

/// DOT text of `graph`: one box per input and node, labelled with its op and type.
fn graphviz(graph: &Graph) -> String {
    use std::fmt::Write;
    let mut out = String::from("digraph pending {\n  node [shape=box, fontname=monospace];\n");
    for (index, &input) in graph.inputs.iter().enumerate() {
        let _ =
            writeln!(out, "  v{} [label=\"input {index}\\n{}\", shape=ellipse];", input.index_usize(), graph.ty(input));
    }
    for (_, node) in graph.nodes() {
        for &result in &node.results {
            let _ =
                writeln!(out, "  v{} [label=\"{}\\n{}\"];", result.index_usize(), node.op.mnemonic(), graph.ty(result));
            for operand in &node.operands {
                let _ = writeln!(out, "  v{} -> v{};", operand.index_usize(), result.index_usize());
            }
        }
    }
    for (index, output) in graph.outputs.iter().enumerate() {
        let _ = writeln!(out, "  out{index} [label=\"output {index}\", shape=ellipse];");
        let _ = writeln!(out, "  v{} -> out{index};", output.index_usize());
    }
    out.push_str("}\n");
    out
}
