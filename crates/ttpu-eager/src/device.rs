//! `Device`: a PJRT client, the pending graph of recorded ops, the compile cache and counters.
//!
//! Ops record into one pending graph per device. Materialization (a read, `sync`, the node
//! limit, or every op outside `DeferAndFuse`) takes the state lock and then:
//! 1. traverses: collects the live tensors still pending and extracts the nodes they need into a
//!    fresh graph whose inputs are the device buffers those nodes read;
//! 2. compiles on a cache miss (fuse with `ttpu_fuse`, lower to StableHLO, PJRT compile), keyed by
//!    the graph's structure before fusion, so a hit costs no fusion;
//! 3. executes, which in this PJRT binding also waits for the device (synchronizes);
//! 4. stores each output buffer in its tensor and starts an empty pending graph.
//!
//! Host transfers happen only when data is read. Lock order is always device state, then a
//! tensor's data, which keeps many threads on one device free of deadlocks.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use smallvec::SmallVec;
use ttpu_ir::{EntityId, Graph, GraphBuilder, NodeId, TensorType, ValueId};
use ttpu_pjrt::{Buffer, Client, Plugin};

use crate::cache::{CompileCache, DiskCache, FxHasher, StructureHasher, cache_key};
use crate::tensor::{Data, TensorNode};
use crate::{Error, Result, Tensor};

/// When recorded ops run.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Record ops and run the pending graph as one program when data is needed (the default).
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

/// Nodes a pending graph may reach before it is materialized without being asked.
pub const DEFAULT_PENDING_LIMIT: usize = 20_000;

/// Compiled graphs kept in memory by default.
pub const DEFAULT_CACHE_CAPACITY: usize = 256;

/// A device reached through a PJRT plugin, with its pending graph. Cheap to clone (a shared
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

/// The pending graph and what its inputs and results belong to.
pub(crate) struct State {
    mode: Mode,
    pending_limit: usize,
    /// Increases each time the pending graph is replaced, so a stale id is never read.
    pub(crate) epoch: u64,
    pub(crate) builder: GraphBuilder,
    /// The buffer each pending-graph input reads, by input index.
    inputs: Vec<Arc<Buffer>>,
    /// Input already made for a buffer, by the buffer's address (kept alive by `inputs`).
    /// Hashed with `FxHasher`: recording looks an operand's buffer up here on every op.
    input_of_buffer: HashMap<usize, ValueId, BuildHasherDefault<FxHasher>>,
    /// Tensors recorded in this epoch; dead ones are skipped when materializing.
    recorded: Vec<Weak<TensorNode>>,
    /// The structure hash of the pending graph, kept up to date as ops are recorded so that a
    /// read whose program is the whole pending graph finds its executable without walking it.
    structure: StructureHasher,
}

impl State {
    fn new(mode: Mode, pending_limit: usize, epoch: u64) -> State {
        State {
            mode,
            pending_limit,
            epoch,
            builder: GraphBuilder::new(),
            inputs: Vec::new(),
            input_of_buffer: HashMap::default(),
            recorded: Vec::new(),
            structure: StructureHasher::default(),
        }
    }

    /// Starts an empty pending graph in a new epoch. The arenas of `spare` (the graph just run)
    /// or of the old pending graph are reused, so steady-state recording does not regrow them.
    fn reset(&mut self, spare: Option<Graph>) {
        let mut graph = spare.unwrap_or_else(|| std::mem::take(&mut self.builder).finish(&[]));
        graph.clear();
        self.builder = GraphBuilder::from_graph(graph);
        self.epoch += 1;
        self.inputs.clear();
        self.input_of_buffer.clear();
        self.recorded.clear();
        self.structure = StructureHasher::default();
    }

    /// The pending-graph value holding `tensor`, adding its buffer as an input if needed.
    pub(crate) fn value_of(&mut self, tensor: &Tensor) -> Result<ValueId> {
        let data = tensor.node.data.lock()?;
        match &*data {
            Data::Pending { epoch, value } if *epoch == self.epoch => Ok(*value),
            Data::Pending { .. } => Err(Error::internal("a pending tensor outlived its graph")),
            Data::Ready(buffer) => {
                let address = Arc::as_ptr(buffer) as usize;
                if let Some(&value) = self.input_of_buffer.get(&address) {
                    return Ok(value);
                }
                let value = self.builder.input(TensorType::clone(&tensor.node.ty), None);
                self.structure.add_input(&tensor.node.ty);
                self.inputs.push(Arc::clone(buffer));
                self.input_of_buffer.insert(address, value);
                Ok(value)
            }
        }
    }

    /// The live pending tensors and their values, in recording order.
    fn live(&self) -> Result<Vec<(Arc<TensorNode>, ValueId)>> {
        let mut res = Vec::new();
        for node in self.recorded.iter().filter_map(Weak::upgrade) {
            let value = match &*node.data.lock()? {
                Data::Pending { epoch, value } if *epoch == self.epoch => *value,
                _ => continue,
            };
            res.push((node, value));
        }
        Ok(res)
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
    /// disk cache, then a PJRT compile): the cache the eager path uses, keyed by the graph's
    /// structure and concrete shapes, so a driver session built on this device and the lazy
    /// tensors share compiles and counters. The graph is lowered as given (the caller chose its
    /// optimizations); recorded graphs are fused with the exact rules first, which is bit-exact,
    /// so one structure gives the same results whichever path compiled it.
    pub fn executable_of(&self, graph: &Graph) -> Result<Arc<ttpu_pjrt::LoadedExecutable>> {
        self.compiled(graph, StructureHasher::of(graph), false)
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

    /// Sets how many nodes the pending graph may hold before it runs unasked.
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

    /// Nodes in the pending graph (dead ones included until the next materialization).
    pub fn pending_nodes(&self) -> Result<usize> {
        Ok(self.state()?.builder.graph().node_count())
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
        let state = self.state()?;
        let (graph, _) = pending_graph(&state)?;
        Ok(ttpu_stablehlo::lower(&fused(&graph))?)
    }

    /// The pending work of live tensors as Graphviz DOT text.
    pub fn computation_graphviz(&self) -> Result<String> {
        let state = self.state()?;
        let (graph, _) = pending_graph(&state)?;
        Ok(graphviz(&graph))
    }

    /// The pending graph of live tensors in ttpu's IR text form.
    pub fn computation_ir(&self) -> Result<String> {
        let state = self.state()?;
        let (graph, _) = pending_graph(&state)?;
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

    /// Records one tensor-level op: `build` appends its nodes to the pending graph, reading the
    /// operands' values, and returns the result value. Outside `DeferAndFuse`, or past the node
    /// limit, the pending work runs at once.
    pub(crate) fn record(
        &self,
        operands: &[&Tensor],
        build: impl FnOnce(&mut GraphBuilder, &[ValueId]) -> Result<ValueId>,
    ) -> Result<Tensor> {
        if operands.iter().any(|operand| !operand.node.device.same(self)) {
            return Err(Error::DeviceMismatch);
        }
        let mut state = self.state()?;
        let values =
            operands.iter().map(|operand| state.value_of(operand)).collect::<Result<SmallVec<[ValueId; 4]>>>()?;
        let built = build(&mut state.builder, &values);
        // Nodes of a failed build stay in the graph (unused), so they are hashed either way.
        let state = &mut *state;
        state.structure.catch_up(state.builder.graph());
        let value = built?;
        let ty = state.builder.ty(value);
        let ty = match operands.iter().find(|operand| *operand.node.ty == *ty) {
            Some(operand) => Arc::clone(&operand.node.ty),
            None => Arc::new(ty.clone()),
        };
        let data = Data::Pending { epoch: state.epoch, value };
        let node = Arc::new(TensorNode { device: self.clone(), ty, data: Mutex::new(data) });
        // A chain `x = x.op()` drops each result one op after the next one is recorded. Forgetting
        // such dead entries now frees their nodes while the allocator's caches are warm, instead
        // of a thousand at once when the graph runs; the order of the rest is kept.
        while let [.., before_last, _] = state.recorded.as_slice()
            && before_last.strong_count() == 0
        {
            let index = state.recorded.len() - 2;
            state.recorded.remove(index);
        }
        state.recorded.push(Arc::downgrade(&node));
        if state.mode != Mode::DeferAndFuse || state.builder.graph().node_count() > state.pending_limit {
            self.materialize(state)?;
        }
        Ok(Tensor { node })
    }

    /// The buffer of `tensor`, running pending work first if it has none yet.
    pub(crate) fn buffer(&self, tensor: &Tensor) -> Result<Arc<Buffer>> {
        let mut state = self.state()?;
        if let Data::Ready(buffer) = &*tensor.node.data.lock()? {
            return Ok(Arc::clone(buffer));
        }
        self.materialize(&mut state)?;
        match &*tensor.node.data.lock()? {
            Data::Ready(buffer) => Ok(Arc::clone(buffer)),
            Data::Pending { .. } => Err(Error::internal("a live tensor was not materialized")),
        }
    }

    /// Runs the pending work of every live tensor and starts an empty pending graph.
    fn materialize(&self, state: &mut State) -> Result<()> {
        let live = state.live()?;
        let mut spare = None;
        if !live.is_empty() {
            let outputs: Vec<ValueId> = live.iter().map(|(_, value)| *value).collect();
            let needed = Needed::of(state.builder.graph(), &outputs);
            // When every node and input is needed (a chain of ops whose intermediates died), the
            // pending graph is the program: take it instead of rebuilding it node by node.
            let taken = needed.is_everything(state.builder.graph());
            let (graph, used_inputs, hash) = if taken {
                state.structure.catch_up(state.builder.graph());
                let hash = state.structure.finish(state.builder.graph(), &outputs);
                let input_count = state.builder.graph().inputs.len();
                (std::mem::take(&mut state.builder).finish(&outputs), (0..input_count).collect(), hash)
            } else {
                let (graph, used_inputs) = needed.extract(state.builder.graph(), &outputs)?;
                let hash = StructureHasher::of(&graph);
                (graph, used_inputs, hash)
            };
            let results = self.run(&graph, hash, &used_inputs, &state.inputs);
            let results = match results {
                Ok(results) => results,
                Err(error) => {
                    if taken {
                        // Give the graph back so the pending tensors stay readable after a retry.
                        state.builder = GraphBuilder::from_graph(graph);
                    }
                    return Err(error);
                }
            };
            if results.len() != live.len() {
                return Err(Error::internal(format!("{} outputs for {} tensors", results.len(), live.len())));
            }
            for ((node, _), buffer) in live.iter().zip(results) {
                *node.data.lock()? = Data::Ready(Arc::new(buffer));
            }
            if taken {
                spare = Some(graph);
            }
        }
        state.reset(spare);
        Ok(())
    }

    /// Compiles `graph` (whose structure hash is `hash`) if needed and executes it on the pending
    /// inputs `used_inputs`.
    fn run(&self, graph: &Graph, hash: u64, used_inputs: &[usize], inputs: &[Arc<Buffer>]) -> Result<Vec<Buffer>> {
        let executable = self.executable(graph, hash)?;
        let args: Vec<&Buffer> = used_inputs.iter().map(|&index| &*inputs[index]).collect();
        let results = executable.execute(&args)?;
        self.inner.counters.executions.fetch_add(1, Ordering::Relaxed);
        Ok(results)
    }

    /// The executable of `graph`: from memory, from disk, or compiled now.
    fn executable(&self, graph: &Graph, hash: u64) -> Result<Arc<ttpu_pjrt::LoadedExecutable>> {
        self.compiled(graph, hash, true)
    }

    /// [`Device::executable`], fusing on a miss only when `fuse` says so.
    fn compiled(&self, graph: &Graph, hash: u64, fuse: bool) -> Result<Arc<ttpu_pjrt::LoadedExecutable>> {
        let counters = &self.inner.counters;
        let mut cache = self.inner.cache.lock()?;
        if let Some(executable) = cache.get(hash, graph) {
            counters.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(executable);
        }
        let client = &self.inner.client;
        // The disk key is text, built only now: a memory hit never pays for it.
        let key = cache.disk().map(|_| cache_key(graph));
        if let Some(executable) = cache.disk().zip(key.as_deref()).and_then(|(disk, key)| disk.load(client, key)) {
            counters.disk_hits.fetch_add(1, Ordering::Relaxed);
            let executable = Arc::new(executable);
            cache.insert(hash, graph.clone(), Arc::clone(&executable));
            return Ok(executable);
        }
        let mlir = if fuse { ttpu_stablehlo::lower(&fused(graph))? } else { ttpu_stablehlo::lower(graph)? };
        let executable = client.compile(&mlir)?;
        counters.compiles.fetch_add(1, Ordering::Relaxed);
        if let Some((disk, key)) = cache.disk().zip(key.as_deref()) {
            disk.store(key, &executable);
        }
        let executable = Arc::new(executable);
        cache.insert(hash, graph.clone(), Arc::clone(&executable));
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
            tracing::debug!(%report, "fused pending graph");
            fused
        }
        Err(error) => {
            tracing::warn!(%error, "fusion failed; running the graph as recorded");
            graph.clone()
        }
    }
}

/// The graph that materializing now would run, and the pending inputs it reads.
fn pending_graph(state: &State) -> Result<(Graph, Vec<usize>)> {
    let outputs: Vec<ValueId> = state.live()?.iter().map(|(_, value)| *value).collect();
    Needed::of(state.builder.graph(), &outputs).extract(state.builder.graph(), &outputs)
}

/// Which values and nodes of a graph some outputs need.
struct Needed {
    values: Vec<bool>,
    nodes: Vec<bool>,
}

impl Needed {
    fn of(graph: &Graph, outputs: &[ValueId]) -> Needed {
        let mut values = vec![false; graph.value_count()];
        for output in outputs {
            values[output.index_usize()] = true;
        }
        let mut nodes = vec![false; graph.node_count()];
        // Creation order is topological, so one backward walk sees every user before its operands.
        // Indexed rather than collected and reversed: this runs on every materialization.
        for index in (0..graph.node_count()).rev() {
            let node = graph.node(NodeId::new(index));
            if node.results.iter().any(|result| values[result.index_usize()]) {
                nodes[index] = true;
                for operand in &node.operands {
                    values[operand.index_usize()] = true;
                }
            }
        }
        Needed { values, nodes }
    }

    fn is_everything(&self, graph: &Graph) -> bool {
        self.nodes.iter().all(|&needed| needed) && graph.inputs.iter().all(|input| self.values[input.index_usize()])
    }

    /// The needed nodes as a new graph with only the inputs they read and no names, so equal
    /// work always prints (and caches) the same. Returns the indices of the inputs kept.
    fn extract(&self, graph: &Graph, outputs: &[ValueId]) -> Result<(Graph, Vec<usize>)> {
        let mut builder = GraphBuilder::new();
        let mut map: Vec<Option<ValueId>> = vec![None; graph.value_count()];
        let mut used_inputs = Vec::new();
        for (index, &input) in graph.inputs.iter().enumerate() {
            if self.values[input.index_usize()] {
                map[input.index_usize()] = Some(builder.input(graph.ty(input).clone(), None));
                used_inputs.push(index);
            }
        }
        let mapped = |map: &[Option<ValueId>], value: ValueId| {
            map[value.index_usize()].ok_or_else(|| Error::internal(format!("value {value} used before definition")))
        };
        for (node_id, node) in graph.nodes() {
            if !self.nodes[node_id.index_usize()] {
                continue;
            }
            let operands =
                node.operands.iter().map(|&operand| mapped(&map, operand)).collect::<Result<SmallVec<[_; 4]>>>()?;
            let result = builder.op(node.op.clone(), &operands)?;
            let old = node.results.first().ok_or_else(|| Error::internal("a node without results"))?;
            map[old.index_usize()] = Some(result);
        }
        let outputs = outputs.iter().map(|&output| mapped(&map, output)).collect::<Result<Vec<_>>>()?;
        Ok((builder.finish(&outputs), used_inputs))
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
