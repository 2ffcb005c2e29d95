//! `Runtime`: a PJRT client, its devices, the compile caches (memory and disk) and counters.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ttpu_ir::{DType, Graph, ProgramSharding};
use ttpu_pjrt::{Buffer, Client, CompileOptions, HostBuffer, LoadedExecutable, NamedValue, OptionValue, Plugin};

use crate::cache::{CompileCache, ProgramKey};
use crate::disk::{DEFAULT_DISK_CACHE_BYTES, DiskCache, plugin_identity};
use crate::distributed::{Distributed, GlobalDevice};
use crate::host::{HostTensor, byte_size, element_type};
use crate::{Error, Result};

/// Compiled programs kept in memory by default.
pub const DEFAULT_CACHE_CAPACITY: usize = 256;

/// Environment variable naming the disk cache folder (see [`default_disk_cache_dir`]).
pub const CACHE_DIR_ENV_VAR: &str = "TTPU_CACHE_DIR";

/// How a [`Runtime`] is set up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeOptions {
    /// How many devices to use. The CPU plugin makes exactly this many (its `cpu_device_count`
    /// create option); other plugins expose their devices and the runtime uses the first this
    /// many. `None`: every addressable device the plugin makes by default.
    pub devices: Option<usize>,
    /// Compiled programs kept in memory (least recently used leave first).
    pub cache_capacity: usize,
    /// This process's place in a job of several processes, and the job's key-value store; `None`
    /// for a runtime of one process. With it, `devices` counts this process's devices, and the
    /// runtime's device indices number every device of the job (see [`Runtime::device_ids`]).
    pub distributed: Option<Distributed>,
}

impl Default for RuntimeOptions {
    fn default() -> RuntimeOptions {
        RuntimeOptions { devices: None, cache_capacity: DEFAULT_CACHE_CAPACITY, distributed: None }
    }
}

/// Where compiled programs are kept across processes unless told otherwise: `$TTPU_CACHE_DIR`,
/// else `$XDG_CACHE_HOME/ttpu/compiled`, else `$HOME/.cache/ttpu/compiled`; `None` when none of
/// them is set.
pub fn default_disk_cache_dir() -> Option<PathBuf> {
    let from_env = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty()).map(PathBuf::from);
    if let Some(dir) = from_env(CACHE_DIR_ENV_VAR) {
        return Some(dir);
    }
    let cache = from_env("XDG_CACHE_HOME")
        .filter(|dir| dir.is_absolute())
        .or_else(|| from_env("HOME").map(|home| home.join(".cache")))?;
    Some(cache.join("ttpu").join("compiled"))
}

/// XLA options whose executables the CPU plugin (PJRT C API 0.115) cannot serialize: with one of
/// them set (to anything but `false`), `PJRT_Executable_Serialize` throws a C++ exception through
/// the C API, which no caller can catch (the process aborts). Compiles with them skip the disk
/// cache. Found by storing every option tried in docs/performance.md ("XLA options").
pub const NOT_SERIALIZABLE_WITH: &[&str] = &["xla_cpu_experimental_onednn_custom_call"];

/// How a program is compiled: the devices its replicas run on, which inputs its outputs may
/// overwrite, and XLA's options. Part of the compile-cache key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CompileSpec {
    /// Runtime device indices, one replica (or partition) each, in replica (or mesh) order; empty
    /// means device 0 alone. Each device appears once. In a job of several processes they may
    /// name other processes' devices: each process runs its own ones
    /// ([`Executable::local_devices`]).
    pub devices: Vec<usize>,
    /// `(input, output)` pairs: output `output` is written into input `input`'s buffer, which
    /// each run donates (it is deleted afterwards). Types must match.
    pub aliases: Vec<(usize, usize)>,
    /// Input and output shardings over a mesh: the program is one SPMD program that XLA's
    /// partitioner (Shardy) splits into one partition per mesh device, `devices[i]` running mesh
    /// device `i` (`devices` empty: `0..mesh size`). Argument lists then hold each device's shard.
    pub sharding: Option<ProgramSharding>,
    /// XLA options by name (fields of `xla.DebugOptions`, such as `xla_cpu_use_thunk_runtime`),
    /// applied by the plugin on top of its defaults; see [`ttpu_pjrt::CompileOptions::xla_options`].
    /// A name the plugin does not know fails the compile with the plugin's error.
    pub xla_options: Vec<(String, OptionValue)>,
}

impl CompileSpec {
    /// One replica on device `device`.
    pub fn on(device: usize) -> CompileSpec {
        CompileSpec { devices: vec![device], ..CompileSpec::default() }
    }

    /// One replica on each of devices `0..replicas`.
    pub fn replicated(replicas: usize) -> CompileSpec {
        CompileSpec { devices: (0..replicas.max(1)).collect(), ..CompileSpec::default() }
    }

    /// One SPMD program over the mesh of `sharding`, on devices `0..mesh size`.
    pub fn sharded(sharding: ProgramSharding) -> CompileSpec {
        CompileSpec {
            devices: (0..sharding.mesh.device_count()).collect(),
            sharding: Some(sharding),
            ..CompileSpec::default()
        }
    }

    /// The same spec with these XLA options.
    pub fn with_xla_options(self, xla_options: Vec<(String, OptionValue)>) -> CompileSpec {
        CompileSpec { xla_options, ..self }
    }

    /// The same spec with these input-output aliases.
    pub fn with_aliases(self, aliases: Vec<(usize, usize)>) -> CompileSpec {
        CompileSpec { aliases, ..self }
    }

    /// The devices, with the empty list read as device 0.
    pub fn device_list(&self) -> Vec<usize> {
        match (&self.sharding, self.devices.is_empty()) {
            (_, false) => self.devices.clone(),
            (Some(sharding), true) => (0..sharding.mesh.device_count()).collect(),
            (None, true) => vec![0],
        }
    }
}

/// Where an executable came from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CacheSource {
    /// The in-memory cache.
    Memory,
    /// The disk cache (deserialized, not compiled).
    Disk,
    /// Compiled now by the plugin.
    Compiled,
}

/// What getting one executable took.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct CompileInfo {
    /// Where it came from.
    pub source: CacheSource,
    /// Seconds spent building and lowering the program (zero on a memory hit).
    pub lower_s: f64,
    /// Seconds spent compiling or deserializing it (zero on a memory hit).
    pub compile_s: f64,
}

/// Totals since the runtime was created, shared by everything that uses it.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Programs compiled by PJRT (misses in memory and on disk).
    pub compiles: u64,
    /// Programs found compiled in memory.
    pub cache_hits: u64,
    /// Programs loaded from the disk cache instead of compiling.
    pub disk_hits: u64,
    /// Program executions (a replicated run counts once).
    pub executions: u64,
    /// Bytes copied from the host to devices.
    pub bytes_to_device: u64,
    /// Bytes copied from devices to the host.
    pub bytes_to_host: u64,
}

#[derive(Debug, Default)]
struct CounterCells {
    compiles: AtomicU64,
    cache_hits: AtomicU64,
    disk_hits: AtomicU64,
    executions: AtomicU64,
    bytes_to_device: AtomicU64,
    bytes_to_host: AtomicU64,
}

fn bump(cell: &AtomicU64, by: u64) {
    cell.fetch_add(by, Ordering::Relaxed);
}

/// A PJRT client with its devices, compile caches and counters. Cheap to clone (a shared
/// handle); `Send + Sync`. Frontends that share one `Runtime` share its compiles and counters.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    plugin_path: PathBuf,
    /// By runtime device index: this process's devices, `None` for another process's.
    devices: Vec<Option<ttpu_pjrt::Device>>,
    /// PJRT ids by runtime device index.
    device_ids: Vec<i32>,
    /// The process running each device, by runtime device index.
    device_processes: Vec<usize>,
    /// This process's devices, as runtime device indices.
    local: Vec<usize>,
    process_index: usize,
    process_count: usize,
    cache: Mutex<CompileCache<Executable>>,
    disk: Mutex<Option<Arc<DiskCache>>>,
    counters: Arc<CounterCells>,
}

impl Runtime {
    /// A runtime on the plugin at `path`.
    pub fn new(path: &Path, options: &RuntimeOptions) -> Result<Runtime> {
        if !path.is_file() {
            return Err(ttpu_pjrt::Error::PluginNotFound { path: Some(path.to_owned()) }.into());
        }
        let plugin = Plugin::load(path)?;
        if let Some(place) = &options.distributed
            && place.process_index >= place.process_count
        {
            return Err(Error::NoSuchProcess { index: place.process_index, count: place.process_count });
        }
        let client = match &options.distributed {
            Some(place) => crate::distributed::create_client(&plugin, options.devices, place)?,
            None => create_client(&plugin, options.devices)?,
        };
        let addressable = client.addressable_devices()?;
        let available = addressable.len();
        let count = options.devices.unwrap_or(available);
        if count == 0 || count > available {
            return Err(Error::DeviceCount {
                requested: count,
                available,
                platform: client.platform_name().unwrap_or_default(),
            });
        }
        let local_devices: Vec<ttpu_pjrt::Device> = addressable.into_iter().take(count).collect();
        let local_ids = local_devices.iter().map(|device| device.id()).collect::<Result<Vec<i32>, _>>()?;
        let (process_index, process_count, global) = match &options.distributed {
            Some(place) => {
                let listed = listed_devices(&client);
                (
                    place.process_index,
                    place.process_count,
                    crate::distributed::global_devices(place, &local_ids, &listed)?,
                )
            }
            None => (0, 1, local_ids.iter().map(|&id| GlobalDevice { process: 0, id }).collect()),
        };
        let devices: Vec<Option<ttpu_pjrt::Device>> = global
            .iter()
            .map(|device| {
                let position = local_ids.iter().position(|&id| id == device.id);
                position.filter(|_| device.process == process_index).map(|position| local_devices[position].clone())
            })
            .collect();
        let local: Vec<usize> = (0..global.len()).filter(|&index| devices[index].is_some()).collect();
        let device_ids: Vec<i32> = global.iter().map(|device| device.id).collect();
        tracing::debug!(
            platform = %client.platform_name().unwrap_or_default(),
            devices = ?device_ids,
            process_index,
            process_count,
            "pjrt runtime ready"
        );
        Ok(Runtime {
            inner: Arc::new(Inner {
                client,
                plugin_path: path.to_owned(),
                devices,
                device_ids,
                device_processes: global.iter().map(|device| device.process).collect(),
                local,
                process_index,
                process_count,
                cache: Mutex::new(CompileCache::new(options.cache_capacity)),
                disk: Mutex::new(None),
                counters: Arc::default(),
            }),
        })
    }

    /// A runtime on the plugin named by `path`, else `$TTPU_PJRT_PLUGIN`, else the one
    /// `cargo xtask setup` installed.
    pub fn from_plugin_or_default(path: Option<&Path>, options: &RuntimeOptions) -> Result<Runtime> {
        match path {
            Some(path) => Runtime::new(path, options),
            None => Runtime::new(&ttpu_pjrt::find_plugin()?, options),
        }
    }

    /// The default plugin's runtime with default options.
    pub fn cpu() -> Result<Runtime> {
        Runtime::from_plugin_or_default(None, &RuntimeOptions::default())
    }

    /// The PJRT client.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The plugin file.
    pub fn plugin_path(&self) -> &Path {
        &self.inner.plugin_path
    }

    /// `"cpu (PJRT C API 0.115)"`: the plugin's platform name, its version where it reports one
    /// of its own, and the C API version it speaks.
    pub fn platform(&self) -> String {
        let client = &self.inner.client;
        let name = client.platform_name().unwrap_or_default();
        let version = client.platform_version().unwrap_or_default();
        let (major, minor) = client.plugin().api_version();
        if version.is_empty() || version == name {
            format!("{name} (PJRT C API {major}.{minor})")
        } else {
            format!("{name} {version} (PJRT C API {major}.{minor})")
        }
    }

    /// Number of devices this runtime uses: in a job of several processes, every process's.
    pub fn device_count(&self) -> usize {
        self.inner.devices.len()
    }

    /// PJRT ids of the devices, by runtime device index. In a job of several processes these are
    /// every process's devices, sorted by process and then by id (JAX's order); the same list in
    /// every process.
    pub fn device_ids(&self) -> &[i32] {
        &self.inner.device_ids
    }

    /// This process's index in its job (0 alone).
    pub fn process_index(&self) -> usize {
        self.inner.process_index
    }

    /// Processes in the job (1 alone).
    pub fn process_count(&self) -> usize {
        self.inner.process_count
    }

    /// The runtime device indices of this process's devices, in order.
    pub fn local_devices(&self) -> &[usize] {
        &self.inner.local
    }

    /// The process that runs device `index`.
    pub fn device_process(&self, index: usize) -> Option<usize> {
        self.inner.device_processes.get(index).copied()
    }

    /// Whether device `index` is this process's.
    pub fn is_local(&self, index: usize) -> bool {
        self.inner.devices.get(index).is_some_and(Option::is_some)
    }

    /// Whether two handles are the same runtime.
    pub fn same(&self, other: &Runtime) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    fn device(&self, index: usize) -> Result<&ttpu_pjrt::Device> {
        match self.inner.devices.get(index) {
            Some(Some(device)) => Ok(device),
            Some(None) => Err(Error::NotLocal {
                index,
                id: self.inner.device_ids[index],
                owner: self.inner.device_processes[index],
                this: self.inner.process_index,
            }),
            None => Err(Error::NoSuchDevice { index, count: self.inner.devices.len() }),
        }
    }

    /// The PJRT id of device `index`.
    fn device_id(&self, index: usize) -> Result<i32> {
        self.inner.device_ids.get(index).copied().ok_or(Error::NoSuchDevice { index, count: self.inner.devices.len() })
    }

    /// The compile error for `error`: the plugin's own, unless it is the CPU plugin's refusal of
    /// a program over several processes' devices, which becomes [`Error::CrossProcess`].
    fn compile_error(&self, error: ttpu_pjrt::Error, devices: &[usize], ids: &[i32]) -> Error {
        let mut processes: Vec<usize> = devices.iter().filter_map(|&index| self.device_process(index)).collect();
        processes.sort_unstable();
        processes.dedup();
        match &error {
            ttpu_pjrt::Error::Plugin { message, .. }
                if processes.len() > 1 && message.contains("Multiprocess computations aren't implemented") =>
            {
                Error::CrossProcess {
                    platform: self.inner.client.platform_name().unwrap_or_default(),
                    processes: processes.len(),
                    ids: ids.to_vec(),
                    source: error,
                }
            }
            _ => error.into(),
        }
    }

    /// Sets how many compiled programs stay in memory.
    pub fn set_cache_capacity(&self, programs: usize) -> Result<()> {
        self.inner.cache.lock()?.set_capacity(programs);
        Ok(())
    }

    /// Number of compiled programs held in memory.
    pub fn cached_programs(&self) -> Result<usize> {
        Ok(self.inner.cache.lock()?.len())
    }

    /// Also keeps compiled programs in `dir` across processes, within
    /// [`DEFAULT_DISK_CACHE_BYTES`](crate::DEFAULT_DISK_CACHE_BYTES).
    pub fn set_disk_cache(&self, dir: &Path) -> Result<()> {
        self.set_disk_cache_with_budget(dir, DEFAULT_DISK_CACHE_BYTES)
    }

    /// Also keeps compiled programs in `dir` across processes; storing past `max_bytes` evicts
    /// the least recently used entries.
    pub fn set_disk_cache_with_budget(&self, dir: &Path, max_bytes: u64) -> Result<()> {
        let mut identity = plugin_identity(&self.inner.client, &self.inner.plugin_path);
        // A job of several processes compiles for its own global assignment: its entries never
        // serve a job of another shape, nor a single process.
        if self.inner.process_count > 1 {
            let devices: Vec<String> = self
                .inner
                .device_ids
                .iter()
                .zip(&self.inner.device_processes)
                .map(|(id, process)| format!("{id}@{process}"))
                .collect();
            identity.push_str(&format!(" processes={} devices={}", self.inner.process_count, devices.join(",")));
        }
        let disk = DiskCache::new(dir, identity, max_bytes)
            .map_err(|source| Error::DiskCache { path: dir.to_owned(), source })?;
        *self.inner.disk.lock()? = Some(Arc::new(disk));
        Ok(())
    }

    /// Stops using the disk cache.
    pub fn disable_disk_cache(&self) -> Result<()> {
        *self.inner.disk.lock()? = None;
        Ok(())
    }

    /// The disk cache folder in use, if any.
    pub fn disk_cache_dir(&self) -> Result<Option<PathBuf>> {
        Ok(self.inner.disk.lock()?.as_ref().map(|disk| disk.dir().to_owned()))
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

    /// The executable of the program `key` compiled under `spec`: from memory, else from the
    /// disk cache, else compiled now. Only a memory miss calls `build`, which gives the graph to
    /// lower (the caller decides whether it is optimized first). Compiles are serialized.
    pub fn executable<E: From<Error>>(
        &self,
        key: &dyn ProgramKey,
        spec: &CompileSpec,
        build: impl FnOnce() -> Result<Graph, E>,
    ) -> Result<Arc<Executable>, E> {
        self.executable_with_info(key, spec, build).map(|(executable, _)| executable)
    }

    /// [`executable`](Self::executable), also saying where it came from and what it took.
    pub fn executable_with_info<E: From<Error>>(
        &self,
        key: &dyn ProgramKey,
        spec: &CompileSpec,
        build: impl FnOnce() -> Result<Graph, E>,
    ) -> Result<(Arc<Executable>, CompileInfo), E> {
        let hash = key.structure_hash();
        // One span per lookup: its `source` says whether XLA compiled (`compiled`) or a cache
        // held the program (`memory`, `disk`).
        let span = tracing::debug_span!("compile", program = hash, source = tracing::field::Empty).entered();
        let counters = &self.inner.counters;
        let mut cache = self.inner.cache.lock().map_err(Error::from)?;
        if let Some(executable) = cache.get(hash, key, spec) {
            span.record("source", "memory");
            bump(&counters.cache_hits, 1);
            return Ok((executable, CompileInfo { source: CacheSource::Memory, lower_s: 0.0, compile_s: 0.0 }));
        }
        let devices = spec.device_list();
        if let Some(sharding) = &spec.sharding
            && sharding.mesh.device_count() != devices.len()
        {
            return Err(Error::MeshSize {
                mesh: sharding.mesh.to_string(),
                size: sharding.mesh.device_count(),
                devices: devices.len(),
            }
            .into());
        }
        // Two parts of one program on one device abort the CPU plugin.
        if let Some(&index) = devices
            .iter()
            .enumerate()
            .find_map(|(position, index)| devices[..position].contains(index).then_some(index))
        {
            return Err(Error::RepeatedDevice { index, devices }.into());
        }
        let device_ids = devices.iter().map(|&index| self.device_id(index)).collect::<Result<Vec<i32>>>()?;
        let local: Vec<usize> = devices.iter().copied().filter(|&index| self.is_local(index)).collect();
        let start = Instant::now();
        let graph = build()?;
        self.check_host_kernels(&graph)?;
        let lower_options = ttpu_stablehlo::LowerOptions {
            aliases: spec.aliases.clone(),
            sharding: spec.sharding.clone(),
            ..Default::default()
        };
        let mlir = tracing::debug_span!("lower")
            .in_scope(|| ttpu_stablehlo::lower_with(&graph, &lower_options))
            .map_err(Error::from)?;
        let lower_s = start.elapsed().as_secs_f64();
        let options = match &spec.sharding {
            Some(_) => CompileOptions::partitioned(&device_ids),
            None => CompileOptions::replicated(&device_ids),
        }
        .with_xla_options(spec.xla_options.clone());
        let options_bytes = options.to_proto_bytes();
        let disk = self.inner.disk.lock().map_err(Error::from)?.clone();
        // An executable the plugin cannot serialize must not reach the disk cache: the plugin
        // throws through the C API there, which aborts the process.
        let unserializable = spec.xla_options.iter().find_map(|(name, value)| {
            NOT_SERIALIZABLE_WITH.iter().find(|&&known| known == name).filter(|_| *value != OptionValue::Bool(false))
        });
        let disk = match unserializable {
            Some(name) => {
                tracing::info!(
                    option = name,
                    "compiled without the disk cache: the plugin cannot serialize the result"
                );
                None
            }
            None => disk,
        };
        let start = Instant::now();
        let (loaded, source) = match disk.as_ref().and_then(|disk| disk.load(&self.inner.client, &mlir, &options_bytes))
        {
            Some(loaded) => {
                bump(&counters.disk_hits, 1);
                (loaded, CacheSource::Disk)
            }
            None => {
                let _span = tracing::info_span!("pjrt_compile").entered();
                let loaded = self
                    .inner
                    .client
                    .compile_with(&mlir, &options)
                    .map_err(|error| self.compile_error(error, &devices, &device_ids))?;
                bump(&counters.compiles, 1);
                if let Some(disk) = &disk {
                    disk.store(&mlir, &options_bytes, &loaded);
                }
                (loaded, CacheSource::Compiled)
            }
        };
        let compile_s = start.elapsed().as_secs_f64();
        span.record("source", if source == CacheSource::Disk { "disk" } else { "compiled" });
        // A deserialized executable keeps the placement it was compiled with; make sure it is
        // the one asked for (this process's part of it) before any argument list is matched to it.
        let placed = loaded.device_ids().map_err(Error::from)?;
        let local_ids: Vec<i32> = local.iter().map(|&index| self.inner.device_ids[index]).collect();
        if placed != local_ids {
            return Err(Error::Placement { requested: local_ids, actual: placed }.into());
        }
        let mut donated: Vec<usize> = spec.aliases.iter().map(|&(input, _)| input).collect();
        donated.sort_unstable();
        let executable = Arc::new(Executable {
            loaded,
            devices,
            local,
            donated,
            num_inputs: graph.inputs.len(),
            counters: Arc::clone(&self.inner.counters),
        });
        cache.insert(hash, key.boxed(), spec.clone(), Arc::clone(&executable));
        Ok((executable, CompileInfo { source, lower_s, compile_s }))
    }

    /// Makes sure every host kernel `graph` calls can run: its function is registered in this
    /// process ([`ttpu_pjrt::register_host_kernel`]) and the plugin takes XLA FFI handlers (the
    /// one handler of all host kernels is registered with it here, once).
    fn check_host_kernels(&self, graph: &Graph) -> Result<()> {
        fn host_kernels(graph: &Graph, out: &mut Vec<String>) {
            for (_, node) in graph.nodes() {
                match &node.op {
                    ttpu_ir::Op::Kernel(kernel) if kernel.body == ttpu_ir::KernelBody::Host => {
                        out.push(kernel.name.to_string())
                    }
                    ttpu_ir::Op::While(while_loop) => {
                        host_kernels(&while_loop.cond, out);
                        host_kernels(&while_loop.body, out);
                    }
                    _ => {}
                }
            }
        }
        let mut kernels = Vec::new();
        host_kernels(graph, &mut kernels);
        let Some(first) = kernels.first() else { return Ok(()) };
        if let Some(missing) = kernels.iter().find(|name| !ttpu_pjrt::host_kernel_registered(name)) {
            return Err(Error::HostKernel {
                kernel: missing.clone(),
                message: "no function is registered under this name in this process".into(),
            });
        }
        let platform = self.inner.client.platform_name()?;
        self.inner
            .client
            .plugin()
            .register_host_kernels(ttpu_stablehlo::HOST_KERNEL_TARGET, &platform)
            .map_err(|error| Error::HostKernel { kernel: first.clone(), message: error.to_string() })
    }

    /// The executable of a static `graph` (lowered as given), keyed by its structure.
    pub fn graph_executable(&self, graph: &Graph, spec: &CompileSpec) -> Result<Arc<Executable>> {
        self.executable(graph, spec, || Ok::<_, Error>(graph.clone()))
    }

    /// Copies `tensor` to device `device`.
    pub fn upload(&self, tensor: &HostTensor, device: usize) -> Result<Buffer> {
        self.upload_bytes(&tensor.data, tensor.dtype, &tensor.shape, device)
    }

    /// Copies dense little-endian `data` of `dtype` and `dims` to device `device`.
    pub fn upload_bytes(&self, data: &[u8], dtype: DType, dims: &[i64], device: usize) -> Result<Buffer> {
        let expected = byte_size(dtype, dims).ok_or_else(|| Error::InvalidShape { dims: dims.to_vec() })?;
        if expected != data.len() {
            return Err(Error::DataLength {
                ty: ttpu_ir::TensorType::from_static(dtype, dims).to_string(),
                expected,
                actual: data.len(),
            });
        }
        let device = self.device(device)?;
        let _span = tracing::debug_span!("transfer_in", bytes = data.len()).entered();
        let data = crate::host::device_bytes(dtype, data);
        let buffer = self.inner.client.buffer_from_host_on(device, &data, element_type(dtype), dims)?;
        bump(&self.inner.counters.bytes_to_device, data.len() as u64);
        Ok(buffer)
    }

    /// Copies `buffer` to the host.
    pub fn download(&self, buffer: &Buffer) -> Result<HostTensor> {
        let host = self.download_raw(buffer)?;
        let element = host.element_type;
        HostTensor::from_host_buffer(host).ok_or(Error::ElementType { element })
    }

    /// Copies `buffer` to the host as PJRT gives it.
    pub fn download_raw(&self, buffer: &Buffer) -> Result<HostBuffer> {
        let _span = tracing::debug_span!("transfer_out").entered();
        let host = buffer.to_host()?;
        bump(&self.inner.counters.bytes_to_host, host.data.len() as u64);
        Ok(host)
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("plugin", &self.inner.plugin_path)
            .field("devices", &self.inner.device_ids)
            .field("process", &(self.inner.process_index, self.inner.process_count))
            .finish_non_exhaustive()
    }
}

/// A client asking for synchronous execution and, when `devices` is given, that many CPU devices.
/// Options a plugin rejects are dropped (GPU plugins validate option names and know neither), and
/// the device count is then checked against what the plugin made.
fn create_client(plugin: &Plugin, devices: Option<usize>) -> Result<Client> {
    let count = devices.map(|count| NamedValue::Int64(i64::try_from(count).unwrap_or(i64::MAX)));
    let mut attempts: Vec<Vec<(&str, NamedValue)>> = Vec::new();
    let asynchronous = ("asynchronous", NamedValue::Bool(false));
    match &count {
        Some(count) => {
            attempts.push(vec![asynchronous.clone(), ("cpu_device_count", count.clone())]);
            attempts.push(vec![("cpu_device_count", count.clone())]);
        }
        None => attempts.push(vec![asynchronous.clone()]),
    }
    attempts.push(Vec::new());
    let mut last = None;
    for options in &attempts {
        match Client::with_options(plugin, options) {
            Ok(client) => return Ok(client),
            Err(error @ ttpu_pjrt::Error::Plugin { .. }) => {
                tracing::debug!(%error, ?options, "pjrt plugin rejected the client options");
                last = Some(error);
            }
            Err(error) => return Err(error.into()),
        }
    }
    Err(last.map_or(Error::Poisoned, Error::from))
}

/// The devices the plugin lists, with their processes; empty where it cannot say.
fn listed_devices(client: &Client) -> Vec<GlobalDevice> {
    let listed = client.devices().and_then(|devices| {
        devices
            .iter()
            .map(|device| {
                let process = usize::try_from(device.process_index()?).unwrap_or(usize::MAX);
                Ok(GlobalDevice { process, id: device.id()? })
            })
            .collect::<Result<Vec<GlobalDevice>, ttpu_pjrt::Error>>()
    });
    listed.unwrap_or_else(|error| {
        tracing::debug!(%error, "the plugin does not say which process runs each device");
        Vec::new()
    })
}

/// A compiled program on its devices (one replica each), with the inputs its runs donate.
pub struct Executable {
    loaded: LoadedExecutable,
    devices: Vec<usize>,
    /// The devices of `devices` this process runs, in order.
    local: Vec<usize>,
    donated: Vec<usize>,
    num_inputs: usize,
    counters: Arc<CounterCells>,
}

impl Executable {
    /// XLA's cost analysis of the program, by the plugin's names (`flops`, `bytes accessed`,
    /// ...); plugins that do not implement it (the CPU plugin) answer `Unimplemented`.
    pub fn cost_analysis(&self) -> Result<Vec<(String, ttpu_pjrt::NamedValue)>> {
        Ok(self.loaded.cost_analysis()?)
    }

    /// Runtime device indices of the replicas (or partitions), in replica (or mesh) order.
    pub fn devices(&self) -> &[usize] {
        &self.devices
    }

    /// The devices of [`devices`](Self::devices) this process runs, in the order
    /// [`run_replicated`](Self::run_replicated) takes argument lists: all of them in a runtime of
    /// one process.
    pub fn local_devices(&self) -> &[usize] {
        &self.local
    }

    /// Inputs each run donates (their buffers are deleted by the run).
    pub fn donated_inputs(&self) -> &[usize] {
        &self.donated
    }

    /// Inputs one replica takes.
    pub fn num_inputs(&self) -> usize {
        self.num_inputs
    }

    /// Outputs one replica produces.
    pub fn num_outputs(&self) -> usize {
        self.loaded.num_outputs()
    }

    /// Runs a single-device program and waits for it.
    pub fn run(&self, args: &[&Buffer]) -> Result<Vec<Buffer>> {
        let mut results = self.run_replicated(&[args])?;
        Ok(results.pop().unwrap_or_default())
    }

    /// Runs every replica (or SPMD partition) of this process, one argument list per device in
    /// [`local_devices`](Self::local_devices) order, and waits for all of them; one output list
    /// per device. In a job of several processes, every process runs its part at once.
    pub fn run_replicated(&self, args: &[&[&Buffer]]) -> Result<Vec<Vec<Buffer>>> {
        if args.len() != self.local.len() {
            return Err(ttpu_pjrt::Error::ArgumentLists(format!(
                "{} argument lists for a program on {} devices",
                args.len(),
                self.local.len()
            ))
            .into());
        }
        if let Some(list) = args.iter().find(|list| list.len() != self.num_inputs) {
            return Err(ttpu_pjrt::Error::ArgumentLists(format!(
                "{} arguments for a program of {} inputs",
                list.len(),
                self.num_inputs
            ))
            .into());
        }
        let results = self.loaded.execute_replicated(args, &self.donated)?;
        bump(&self.counters.executions, 1);
        Ok(results)
    }
}

impl std::fmt::Debug for Executable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executable")
            .field("devices", &self.devices)
            .field("local", &self.local)
            .field("donated", &self.donated)
            .field("num_outputs", &self.num_outputs())
            .finish_non_exhaustive()
    }
}
