//! `Device`: a PJRT client, the pending tape of recorded ops, the compile cache and counters.
//!
//! Ops record into one pending tape per device (see `tape`). Materialization (a read, `sync`,
//! the op limit, or every op outside `DeferAndFuse`) takes the state lock and then:
//! 1. traverses: collects the live tensors still pending and takes the steps they need as the
//!    program, whose inputs are the device buffers those steps read (the whole tape, without a
//!    copy, when every step is needed);
//! 2. compiles on a cache miss: builds the program into IR, fuses it with `ttpu_fuse`, lowers it
//!    to StableHLO and compiles it with PJRT, keyed by the tape, so a hit builds no IR at all;
//! 3. executes, which in this PJRT binding also waits for the device (synchronizes);
//! 4. stores each output buffer in its tensor and starts an empty pending tape.
//!
//! Host transfers happen only when data is read. Recording and materializing hold the device
//! state's lock (and, inside it, the compile cache's), always in that order, which keeps many
//! threads on one device free of deadlocks; a tensor's buffer is set once, under the state lock,
//! and read without one.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use smallvec::SmallVec;
use ttpu_ir::Graph;
use ttpu_pjrt::{Buffer, Client, Plugin};

use crate::cache::{CompileCache, DiskCache, FxHasher, ProgramRef, cache_key, graph_hash};
use crate::tape::{Slot, Tape, TapeOp, TypeMemo};
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

/// Totals since the device was created.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Graphs compiled by PJRT (cache misses in memory and on disk).
    pub compiles: u64,
    /// Graphs found compiled in memory.
    pub cache_hits: u64,
    /// Graphs loaded from the disk cache instead of compiling.
    pub disk_hits: u64,
    /// Programs executed.
    pub executions: u64,
    /// Bytes copied from the host to the device.
    pub bytes_to_device: u64,
    /// Bytes copied from the device to the host.
    pub bytes_to_host: u64,
}

#[derive(Default)]
struct CounterCells {
    compiles: AtomicU64,
    cache_hits: AtomicU64,
    disk_hits: AtomicU64,
    executions: AtomicU64,
    bytes_to_device: AtomicU64,
    bytes_to_host: AtomicU64,
}

/// Ops the pending tape may reach before it is materialized without being asked.
pub const DEFAULT_PENDING_LIMIT: usize = 20_000;

/// Compiled graphs kept in memory by default.
pub const DEFAULT_CACHE_CAPACITY: usize = 256;

/// A device reached through a PJRT plugin, with its pending tape. Cheap to clone (a shared
/// handle); `Send + Sync`, so many threads can record on one device.
#[derive(Clone)]
pub struct Device {
    pub(crate) inner: Arc<DeviceInner>,
}

pub(crate) struct DeviceInner {
    pub(crate) client: Client,
    state: Mutex<State>,
    cache: Mutex<CompileCache>,
    counters: CounterCells,
}

/// The pending tape and what its inputs and results belong to.
pub(crate) struct State {
    mode: Mode,
    pending_limit: usize,
    /// Increases each time the pending tape is replaced, so a stale slot is never read.
    pub(crate) epoch: u64,
    tape: Tape,
    /// The buffer each pending-tape input reads, by input index.
    inputs: Vec<Arc<Buffer>>,
    /// Input already made for a buffer, by the buffer's address (kept alive by `inputs`).
    /// Hashed with `FxHasher`: recording looks an operand's buffer up here on every op.
    input_of_buffer: HashMap<usize, Slot, BuildHasherDefault<FxHasher>>,
    /// Tensors recorded in this epoch; dead ones are skipped when materializing.
    recorded: Vec<Weak<TensorNode>>,
    /// Interned tensor types and the result types of the op signatures seen so far.
    pub(crate) types: TypeMemo,
}

impl State {
    fn new(mode: Mode, pending_limit: usize, epoch: u64) -> State {
        State {
            mode,
            pending_limit,
            epoch,
            tape: Tape::default(),
            inputs: Vec::new(),
            input_of_buffer: HashMap::default(),
            recorded: Vec::new(),
            types: TypeMemo::default(),
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
        self.input_of_buffer.clear();
        self.recorded.clear();
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
    fn pending_program(&self) -> Result<(Tape, Vec<usize>)> {
        let outputs: Vec<Slot> = self.live()?.iter().map(|(_, slot)| *slot).collect();
        self.tape.extract(&self.tape.needed(&outputs), &outputs)
    }
}

impl Device {
    /// The CPU device of the plugin that `cargo xtask setup` installs (or `$TTPU_PJRT_PLUGIN`).
    /// Fails, saying to run `cargo xtask setup`, when the plugin is missing.
    pub fn cpu() -> Result<Device> {
        Device::from_plugin(ttpu_pjrt::find_plugin()?)
    }

    /// The device of the PJRT plugin at `path`.
    pub fn from_plugin(path: impl AsRef<Path>) -> Result<Device> {
        let path = path.as_ref();
        if !path.is_file() {
            return Err(ttpu_pjrt::Error::PluginNotFound { path: Some(path.to_owned()) }.into());
        }
        let client = Client::new(&Plugin::load(path)?)?;
        Ok(Device {
            inner: Arc::new(DeviceInner {
                client,
                state: Mutex::new(State::new(Mode::default(), DEFAULT_PENDING_LIMIT, 0)),
                cache: Mutex::new(CompileCache::new(DEFAULT_CACHE_CAPACITY)),
                counters: CounterCells::default(),
            }),
        })
    }

    /// The PJRT client, for transfers of callers that run executables from
    /// [`Device::executable_of`].
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The executable of a static `graph` through this device's compile cache (memory, then the
    /// disk cache, then a PJRT compile), keyed by the graph's structure and concrete shapes. It is
    /// the cache lazy tensors use, so a driver session built on this device and the lazy tensors
    /// share its capacity and counters; graphs and recorded tapes are separate keys there. The
    /// graph is lowered as given (the caller chose its optimizations); recorded programs are
    /// fused with the exact rules first, which is bit-exact, and the disk cache keys both by the
    /// graph's text, so one structure gives the same results whichever path compiled it.
    pub fn executable_of(&self, graph: &Graph) -> Result<Arc<ttpu_pjrt::LoadedExecutable>> {
        self.compiled(ProgramRef::Graph(graph), graph_hash(graph))
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

    /// Sets how many compiled graphs stay in memory (least recently used leave first).
    pub fn set_cache_capacity(&self, graphs: usize) -> Result<()> {
        self.inner.cache.lock()?.set_capacity(graphs);
        Ok(())
    }

    /// Also keeps compiled graphs in `dir`, across processes. Entries are checked before use and
    /// ignored when torn, corrupt or from another plugin build.
    pub fn set_disk_cache(&self, dir: impl AsRef<Path>) -> Result<()> {
        let client = &self.inner.client;
        let platform = format!("{} {}", client.platform_name()?, client.platform_version()?);
        let disk = DiskCache::new(dir.as_ref(), platform)
            .map_err(|source| Error::DiskCache { path: dir.as_ref().to_owned(), source })?;
        self.inner.cache.lock()?.set_disk(Some(disk));
        Ok(())
    }

    /// Number of compiled graphs held in memory.
    pub fn cached_graphs(&self) -> Result<usize> {
        Ok(self.inner.cache.lock()?.len())
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

    /// Totals of compiles, cache hits, executions and transfers so far.
    pub fn counters(&self) -> Counters {
        let cells = &self.inner.counters;
        let read = |cell: &AtomicU64| cell.load(Ordering::Relaxed);
        Counters {
            compiles: read(&cells.compiles),
            cache_hits: read(&cells.cache_hits),
            disk_hits: read(&cells.disk_hits),
            executions: read(&cells.executions),
            bytes_to_device: read(&cells.bytes_to_device),
            bytes_to_host: read(&cells.bytes_to_host),
        }
    }

    /// The StableHLO module that would run the pending work of live tensors now (after fusion,
    /// as it would be compiled).
    pub fn computation_mlir(&self) -> Result<String> {
        let graph = self.state()?.pending_program()?.0.to_graph()?;
        Ok(ttpu_stablehlo::lower(&fused(&graph))?)
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

    pub(crate) fn count_to_device(&self, bytes: usize) {
        self.inner.counters.bytes_to_device.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub(crate) fn count_to_host(&self, bytes: usize) {
        self.inner.counters.bytes_to_host.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Records one tensor-level op on `operands` as a tape step. Outside `DeferAndFuse`, or past
    /// the op limit, the pending work runs at once.
    pub(crate) fn record(&self, operands: &[&Tensor], op: TapeOp) -> Result<Tensor> {
        if operands.iter().any(|operand| !operand.node.device.same(self)) {
            return Err(Error::DeviceMismatch);
        }
        let mut state = self.state()?;
        let state = &mut *state;
        // The type first: an op that fails its checks leaves nothing on the tape.
        let operand_types: SmallVec<[&Arc<ttpu_ir::TensorType>; 3]> =
            operands.iter().map(|operand| &operand.node.ty).collect();
        let ty = state.types.result_type(&op, &operand_types)?;
        let mut slots = SmallVec::<[Slot; 3]>::new();
        for operand in operands {
            slots.push(state.slot_of(operand)?);
        }
        let slot = state.tape.push(op, slots);
        let recorded_at = Some(RecordedAt { epoch: state.epoch, slot });
        let node = Arc::new(TensorNode { device: self.clone(), ty, recorded_at, buffer: OnceLock::new() });
        // A chain `x = x.op()` drops each result one op after the next one is recorded. Forgetting
        // such dead entries now frees their nodes while the allocator's caches are warm, instead
        // of a thousand at once when the tape runs; the order of the rest is kept.
        while let [.., before_last, _] = state.recorded.as_slice()
            && before_last.strong_count() == 0
        {
            let index = state.recorded.len() - 2;
            state.recorded.remove(index);
        }
        state.recorded.push(Arc::downgrade(&node));
        if state.mode != Mode::DeferAndFuse || state.tape.steps.len() > state.pending_limit {
            self.materialize(state)?;
        }
        Ok(Tensor { node })
    }

    /// The buffer of `tensor`, running pending work first if it has none yet.
    pub(crate) fn buffer(&self, tensor: &Tensor) -> Result<Arc<Buffer>> {
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
    fn materialize(&self, state: &mut State) -> Result<()> {
        let live = state.live()?;
        let mut spare = None;
        if !live.is_empty() {
            let outputs: Vec<Slot> = live.iter().map(|(_, slot)| *slot).collect();
            let needed = state.tape.needed(&outputs);
            // When every step and input is needed (a chain of ops whose intermediates died), the
            // pending tape is the program: take it instead of copying it step by step.
            let taken = needed.is_everything();
            let (program, used_inputs) = if taken {
                let mut tape = std::mem::take(&mut state.tape);
                tape.outputs = outputs;
                let input_count = tape.inputs.len();
                (tape, (0..input_count).collect())
            } else {
                state.tape.extract(&needed, &outputs)?
            };
            let results = self.run(&program, &used_inputs, &state.inputs);
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
            for ((node, _), buffer) in live.iter().zip(results) {
                if node.buffer.set(Arc::new(buffer)).is_err() {
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
    fn run(&self, program: &Tape, used_inputs: &[usize], inputs: &[Arc<Buffer>]) -> Result<Vec<Buffer>> {
        let executable = self.compiled(ProgramRef::Tape(program), program.structure_hash())?;
        let args: Vec<&Buffer> = used_inputs.iter().map(|&index| &*inputs[index]).collect();
        let results = executable.execute(&args)?;
        self.inner.counters.executions.fetch_add(1, Ordering::Relaxed);
        Ok(results)
    }

    /// The executable of `program`, whose structure hash is `hash`: from memory, from disk, or
    /// compiled now. A recorded tape is built into IR and fused with the exact rules first; a
    /// graph is lowered as given.
    fn compiled(&self, program: ProgramRef<'_>, hash: u64) -> Result<Arc<ttpu_pjrt::LoadedExecutable>> {
        let counters = &self.inner.counters;
        let mut cache = self.inner.cache.lock()?;
        if let Some(executable) = cache.get(hash, program) {
            counters.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(executable);
        }
        let built;
        let (graph, fuse) = match program {
            ProgramRef::Graph(graph) => (graph, false),
            ProgramRef::Tape(tape) => {
                built = tape.to_graph()?;
                (&built, true)
            }
        };
        let client = &self.inner.client;
        // The disk key is text, built only now: a memory hit never pays for it.
        let key = cache.disk().map(|_| cache_key(graph));
        if let Some(executable) = cache.disk().zip(key.as_deref()).and_then(|(disk, key)| disk.load(client, key)) {
            counters.disk_hits.fetch_add(1, Ordering::Relaxed);
            let executable = Arc::new(executable);
            cache.insert(hash, program.to_owned(), Arc::clone(&executable));
            return Ok(executable);
        }
        let mlir = if fuse { ttpu_stablehlo::lower(&fused(graph))? } else { ttpu_stablehlo::lower(graph)? };
        let executable = client.compile(&mlir)?;
        counters.compiles.fetch_add(1, Ordering::Relaxed);
        if let Some((disk, key)) = cache.disk().zip(key.as_deref()) {
            disk.store(key, &executable);
        }
        let executable = Arc::new(executable);
        cache.insert(hash, program.to_owned(), Arc::clone(&executable));
        Ok(executable)
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device").field("plugin", &self.inner.client.plugin().path()).finish()
    }
}

/// `graph` after `ttpu_fuse`'s exact rewrites (same inputs, outputs and bits). Fusion is an
/// optimization, so when it fails the graph runs as recorded and the failure is only logged.
fn fused(graph: &Graph) -> Graph {
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
