//! The backend: the devices of one runtime, the overloads PyTorch has dispatched to them, and
//! what a dispatched call does to tensors.
//!
//! Every call goes through the op table's eager entry point (`ttpu_aten::eager`): its template
//! is built once per signature (the memo) and recorded as one step of the lazy tape of its
//! device, so nothing runs until a host read or an explicit flush, and then as one fused program
//! that the runtime compiles once per structure. What PyTorch's dispatcher says of an overload
//! ([`OpKind`]) decides what happens to the results:
//! - a functional call's results are new tensors with storages of their own;
//! - a view's results share their operand's storage, one more step on its chain;
//! - a mutating call (in-place, `out=`, optimizer steps) runs its functional form, and each
//!   tensor it writes takes its new value through its chain (see `tensor`);
//! - an in-place view (`t_`, `unsqueeze_`) moves the tensor itself onto the new view.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use indexmap::IndexMap;
use ttpu_aten::eager::{self, Arg, Inverse, Operand, Output, Strides, Template};
use ttpu_aten::ops::OpDef;
use ttpu_ir::{DType, Kernel, Shape, TensorType};
use ttpu_runtime::Runtime;

use crate::checks::Checks;
use crate::collective::Collectives;
use crate::memo::{Entry, KernelEntry, Lookup, Memo};
use crate::tensor::{self, DeviceTensor, Memory, Meta, TensorState, ViewStep};
use crate::{Error, Result};

/// When recorded calls run (TorchTPU's three execution modes).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Record calls and run them as one fused program at a sync point (the default).
    #[default]
    DeferAndFuse,
    /// Run every call as its own (cached) program at once.
    DeferNever,
    /// As `DeferNever`, waiting for the device after each call.
    DeferNeverAndLaunchBlocking,
}

/// What an overload does to its arguments, from its schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// Returns new tensors.
    Functional,
    /// Returns views of its first tensor argument.
    View,
    /// Writes the arguments at these positions (keyword-only ones by name), and returns
    /// `fresh` results of its own before them (results that alias an argument are the caller's
    /// to return).
    Mutating {
        /// The written arguments, by schema position and name.
        written: Vec<(usize, String)>,
        /// How many of its results are new tensors (they come first).
        fresh: usize,
    },
    /// Changes the view of its first argument in place (`t_`, `unsqueeze_`, `detach_`).
    InplaceView,
}

/// An overload as PyTorch's dispatcher describes it.
#[derive(Clone, Debug)]
pub struct OpSpec {
    /// Its name, `aten.add_.Tensor`.
    pub name: String,
    /// What it does to its arguments.
    pub kind: OpKind,
    /// For a mutating or in-place view overload: the functional overload computing what it
    /// writes (found from the schemas by the caller), else the table's own pairing.
    pub functional: Option<String>,
}

/// A registered overload, by index.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct OpId(usize);

impl OpId {
    /// The index, for a caller that keeps ids as integers.
    pub fn index(self) -> usize {
        self.0
    }

    /// The id of index `index` (an unknown one is an error when dispatched).
    pub fn from_index(index: usize) -> OpId {
        OpId(index)
    }
}

struct Registered {
    spec: OpSpec,
    /// The table's entry that runs it, `None` when the table has none.
    def: Option<&'static OpDef>,
    /// The user kernel that runs it instead (a custom op; see [`Backend::register_kernel`]).
    kernel: Option<Arc<Kernel>>,
}

/// Host data: a CPU tensor's dtype, sizes and row-major bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    /// The element type.
    pub dtype: DType,
    /// Sizes.
    pub dims: Vec<i64>,
    /// Row-major little-endian bytes.
    pub data: Vec<u8>,
}

/// An argument of a dispatched call.
#[derive(Clone, Debug)]
pub enum Value {
    /// `None`.
    None,
    /// A Python int.
    Int(i64),
    /// A Python float.
    Float(f64),
    /// A Python bool.
    Bool(bool),
    /// A string.
    Str(String),
    /// A dtype.
    DType(DType),
    /// A device, layout or memory format.
    Opaque(String),
    /// A list or tuple.
    List(Vec<Value>),
    /// A tensor on the device.
    Tensor(DeviceTensor),
    /// A CPU tensor (only zero-dim ones may join device tensors, as with CUDA).
    Host(HostTensor),
}

/// A result of a dispatched call.
#[derive(Clone, Debug)]
pub enum Returned {
    /// A tensor.
    Tensor(DeviceTensor),
    /// An int.
    Int(i64),
    /// A bool.
    Bool(bool),
    /// Nothing.
    None,
    /// Several results.
    List(Vec<Returned>),
}

/// Counters of what the device has done, for `torch.ttpu`'s statistics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    /// Calls dispatched to the device.
    pub calls: u64,
    /// Templates built (call signatures seen for the first time).
    pub templates: u64,
    /// Programs compiled by the plugin.
    pub compiles: u64,
    /// Programs found compiled in memory.
    pub cache_hits: u64,
    /// Programs run.
    pub executions: u64,
    /// Flushes of pending work, by reason.
    pub flushes: BTreeMap<String, u64>,
    /// Copies to the host, by reason.
    pub to_host: BTreeMap<String, u64>,
    /// Copies from the host (uploads of CPU tensors, scalars and generator states).
    pub to_device: u64,
    /// Bytes copied to the devices.
    pub bytes_to_device: u64,
    /// Bytes copied to the host.
    pub bytes_to_host: u64,
    /// Buffers that took a program's result in place.
    pub donated: u64,
    /// Calls run on the CPU instead, by overload.
    pub fallbacks: BTreeMap<String, u64>,
}

#[derive(Default)]
struct Counters {
    calls: AtomicU64,
    uploads: AtomicU64,
    flushes: Mutex<BTreeMap<String, u64>>,
    to_host: Mutex<BTreeMap<String, u64>>,
    fallbacks: Mutex<BTreeMap<String, u64>>,
}

/// PyTorch's default seed of its generators.
const DEFAULT_SEED: u64 = 67_280_421_310_721;

struct Rng {
    seed: u64,
    draws: u64,
}

struct Inner {
    runtime: Runtime,
    devices: Vec<ttpu_eager::Device>,
    memo: Mutex<Memo>,
    ops: RwLock<Vec<Registered>>,
    rng: Mutex<Rng>,
    counters: Counters,
    mode: Mutex<Mode>,
    /// Bytes held per device.
    memory: Vec<Arc<Memory>>,
    /// Collective statistics and the flush log (`collective`).
    collectives: Collectives,
    /// The most bytes one tensor may take (see [`Backend::tensor_byte_limit`]).
    tensor_byte_limit: u64,
    /// Index checks not read yet (`checks`).
    checks: Checks,
}

/// The ttpu device: every device of one runtime, with PyTorch's semantics. Cheap to clone.
#[derive(Clone)]
pub struct Backend {
    inner: Arc<Inner>,
}

/// A call's operands as the table sees them, with the values the template reads.
struct Flat {
    args: Vec<Arg>,
    kwargs: Vec<(String, Arg)>,
    operands: Vec<Operand>,
    values: Vec<ttpu_eager::Tensor>,
    /// The device tensors among the operands, by operand index (host tensors are `None`).
    tensors: Vec<Option<(DeviceTensor, TensorState)>>,
    device: usize,
}

impl Backend {
    /// The devices of `runtime` this process runs: device `i` of the backend is the runtime's
    /// `i`-th local device (every device of a runtime of one process; in a job of several
    /// processes, this process's own, whose runtime indices are global).
    pub fn new(runtime: Runtime) -> Result<Backend> {
        let local = runtime.local_devices().to_vec();
        let runtime_devices = local.len();
        let runtime_platform = runtime.platform();
        let devices = local
            .iter()
            .map(|&index| ttpu_eager::Device::on(&runtime, index))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(Backend {
            inner: Arc::new(Inner {
                runtime,
                devices,
                memo: Mutex::new(Memo::default()),
                ops: RwLock::new(Vec::new()),
                rng: Mutex::new(Rng { seed: DEFAULT_SEED, draws: 0 }),
                counters: Counters::default(),
                mode: Mutex::new(Mode::default()),
                memory: (0..runtime_devices).map(|_| Arc::new(Memory::default())).collect(),
                collectives: Collectives::default(),
                tensor_byte_limit: tensor_byte_limit(&runtime_platform),
                checks: Checks::new(runtime_devices),
            }),
        })
    }

    /// The most bytes one tensor may take: the host's memory on the CPU plugin (whose buffers are
    /// host memory), else 128 TiB. A call whose result is larger is refused when it is recorded,
    /// before the plugin is asked for the memory: a size from user input (`torch.empty(2**62)`)
    /// must be an error, and the plugin may abort the process on such a request.
    pub fn tensor_byte_limit(&self) -> u64 {
        self.inner.tensor_byte_limit
    }

    /// Refuses `graph`'s results that would not fit on `device`.
    pub(crate) fn check_result_sizes(&self, op: &str, device: usize, graph: &ttpu_ir::Graph) -> Result<()> {
        let limit = self.inner.tensor_byte_limit;
        for &output in &graph.outputs {
            let ty = graph.ty(output);
            let Some(dims) = ty.shape.as_static() else { continue };
            let bytes = dims
                .iter()
                .try_fold(ty.dtype.byte_size() as u64, |acc, &dim| acc.checked_mul(u64::try_from(dim).ok()?))
                .unwrap_or(u64::MAX);
            if bytes > limit {
                return Err(Error::OutOfMemory { op: op.to_string(), device, bytes, limit });
            }
        }
        Ok(())
    }

    /// The runtime under the devices.
    pub fn runtime(&self) -> &Runtime {
        &self.inner.runtime
    }

    /// How many devices there are (`ttpu:0` ... `ttpu:N-1`).
    pub fn device_count(&self) -> usize {
        self.inner.devices.len()
    }

    pub(crate) fn memory(&self, index: usize) -> Result<&Arc<Memory>> {
        self.inner.memory.get(index).ok_or(Error::NoSuchDevice { index, count: self.inner.memory.len() })
    }

    /// `(bytes the tensors on device `index` hold now, the most they held since the last reset)`.
    pub fn memory_allocated(&self, index: usize) -> Result<(u64, u64)> {
        let memory = self.memory(index)?;
        Ok((memory.allocated.load(Ordering::Relaxed), memory.peak.load(Ordering::Relaxed)))
    }

    /// Starts the peak of device `index` over from what it holds now.
    pub fn reset_peak_memory(&self, index: usize) -> Result<()> {
        let memory = self.memory(index)?;
        memory.peak.store(memory.allocated.load(Ordering::Relaxed), Ordering::Relaxed);
        Ok(())
    }

    pub(crate) fn collectives(&self) -> &Collectives {
        &self.inner.collectives
    }

    pub(crate) fn eager_device(&self, index: usize) -> Result<&ttpu_eager::Device> {
        self.device(index)
    }

    /// The template of a call, from the memo.
    pub(crate) fn lookup(
        &self,
        def: &'static OpDef,
        args: &[Arg],
        kwargs: &[(String, Arg)],
        operands: &[Operand],
    ) -> Result<Lookup> {
        self.inner.memo.lock()?.lookup(def, args, kwargs, operands, &IndexMap::new())
    }

    pub(crate) fn rng_states_on(&self, device: usize, count: usize) -> Result<Vec<ttpu_eager::Tensor>> {
        self.rng_states(device, count)
    }

    /// A new tensor of its own storage holding `value`.
    pub(crate) fn fresh_on(&self, device: usize, meta: Meta, value: ttpu_eager::Tensor) -> Result<DeviceTensor> {
        Ok(DeviceTensor::fresh(device, meta, value, self.memory(device)?))
    }

    pub(crate) fn device(&self, index: usize) -> Result<&ttpu_eager::Device> {
        self.inner.devices.get(index).ok_or(Error::NoSuchDevice { index, count: self.inner.devices.len() })
    }

    /// Registers an overload as PyTorch describes it; calls name it by the returned id.
    pub fn register(&self, spec: OpSpec) -> Result<OpId> {
        let def = match &spec.kind {
            OpKind::Functional | OpKind::View => eager::lookup(&spec.name),
            OpKind::Mutating { .. } | OpKind::InplaceView => match &spec.functional {
                Some(name) => eager::lookup(name),
                None => eager::functional_of(&spec.name),
            },
        };
        let mut ops = self.inner.ops.write()?;
        ops.push(Registered { spec, def, kernel: None });
        Ok(OpId(ops.len() - 1))
    }

    /// Registers an overload that the user kernel `kernel` runs (a custom op, `mylib.foo.default`
    /// for the kernel `mylib::foo`): each call passes its tensors positionally to the kernel,
    /// whose operand types are static, and its results are new contiguous tensors. Only a
    /// functional overload can be a kernel's: one that writes or aliases its arguments is
    /// [`Error::KernelNotFunctional`].
    pub fn register_kernel(&self, spec: OpSpec, kernel: Arc<Kernel>) -> Result<OpId> {
        if spec.kind != OpKind::Functional {
            return Err(Error::KernelNotFunctional { op: spec.name, kernel: kernel.name.to_string() });
        }
        if let Some(ty) = kernel.inputs.iter().chain(&kernel.results).find(|ty| !ty.shape.is_static()) {
            return Err(Error::BadKernel {
                kernel: kernel.name.to_string(),
                message: format!("the type {ty} is symbolic; kernel types are static"),
            });
        }
        if kernel.results.is_empty() {
            return Err(Error::BadKernel {
                kernel: kernel.name.to_string(),
                message: "a kernel has at least one result".into(),
            });
        }
        let mut ops = self.inner.ops.write()?;
        ops.push(Registered { spec, def: None, kernel: Some(kernel) });
        Ok(OpId(ops.len() - 1))
    }

    /// Whether the overload `id` can run: the table has it, or a kernel runs it.
    pub fn supports(&self, id: OpId) -> Result<bool> {
        Ok(self.inner.ops.read()?.get(id.0).is_some_and(|op| op.def.is_some() || op.kernel.is_some()))
    }

    /// The execution mode.
    pub fn mode(&self) -> Result<Mode> {
        Ok(*self.inner.mode.lock()?)
    }

    /// Sets the execution mode; pending work runs first.
    pub fn set_mode(&self, mode: Mode) -> Result<()> {
        let eager = match mode {
            Mode::DeferAndFuse => ttpu_eager::Mode::DeferAndFuse,
            Mode::DeferNever => ttpu_eager::Mode::DeferNever,
            Mode::DeferNeverAndLaunchBlocking => ttpu_eager::Mode::DeferNeverAndLaunchBlocking,
        };
        self.synchronize("mode change")?;
        for device in &self.inner.devices {
            device.set_mode(eager)?;
        }
        *self.inner.mode.lock()? = mode;
        Ok(())
    }

    /// Seeds the device's random numbers: the same seed gives the same draws in the same order.
    pub fn manual_seed(&self, seed: u64) -> Result<()> {
        *self.inner.rng.lock()? = Rng { seed, draws: 0 };
        Ok(())
    }

    /// The generator state: the seed and how many draws were made since.
    pub fn rng_state(&self) -> Result<(u64, u64)> {
        let rng = self.inner.rng.lock()?;
        Ok((rng.seed, rng.draws))
    }

    /// Restores a generator state from [`Backend::rng_state`].
    pub fn set_rng_state(&self, seed: u64, draws: u64) -> Result<()> {
        *self.inner.rng.lock()? = Rng { seed, draws };
        Ok(())
    }

    /// Runs the pending work of every device. `reason` is counted in the statistics.
    pub fn synchronize(&self, reason: &str) -> Result<()> {
        for device in &self.inner.devices {
            self.flush(device, reason)?;
        }
        Ok(())
    }

    /// Reads every device's index checks, after running their pending work: the first that
    /// failed since the last read is the error. A host read does this for its device; a flush
    /// alone ([`Backend::synchronize`]) does not, so that a flush inside a step (the optimizer
    /// step's) does not wait for the device.
    pub fn read_index_checks(&self) -> Result<()> {
        for (index, device) in self.inner.devices.iter().enumerate() {
            if self.inner.checks.waiting(index)? {
                self.flush(device, "index checks")?;
            }
            self.read_checks(index)?;
        }
        Ok(())
    }

    /// The runtime's index of device `index` (global in a job of several processes: the
    /// replicas of a collective program name devices this way).
    pub fn runtime_index(&self, index: usize) -> Result<usize> {
        Ok(self.device(index)?.index())
    }

    /// The backend's index of the device the runtime numbers `runtime_index`.
    fn backend_index(&self, runtime_index: usize) -> Result<usize> {
        self.inner
            .devices
            .iter()
            .position(|device| device.index() == runtime_index)
            .ok_or(Error::NoSuchDevice { index: runtime_index, count: self.inner.devices.len() })
    }

    /// The index checks of every device (`checks`).
    pub(crate) fn checks(&self) -> &Checks {
        &self.inner.checks
    }

    /// Reads device `at`'s index checks (after its pending work ran): the first that failed is
    /// the error.
    fn read_checks(&self, at: usize) -> Result<()> {
        if self.inner.checks.waiting(at)? {
            bump(&self.inner.counters.to_host, "index checks")?;
            self.inner.checks.read(at)?;
        }
        Ok(())
    }

    pub(crate) fn flush(&self, device: &ttpu_eager::Device, reason: &str) -> Result<()> {
        let pending = device.pending_ops()?;
        if pending > 0 {
            tracing::debug!(device = device.index(), pending, reason, "running the pending work");
            bump(&self.inner.counters.flushes, reason)?;
            self.inner.collectives.flushed(reason, pending)?;
            device.sync()?;
        }
        Ok(())
    }

    /// Counts a call that ran on the CPU instead of the device (the opt-in fallback).
    pub fn count_fallback(&self, op: &str) -> Result<()> {
        bump(&self.inner.counters.fallbacks, op)
    }

    /// The statistics so far.
    pub fn stats(&self) -> Result<Stats> {
        let counters = self.inner.runtime.counters();
        Ok(Stats {
            calls: self.inner.counters.calls.load(Ordering::Relaxed),
            templates: self.inner.memo.lock()?.built,
            compiles: counters.compiles,
            cache_hits: counters.cache_hits,
            executions: counters.executions,
            flushes: self.inner.counters.flushes.lock()?.clone(),
            to_host: self.inner.counters.to_host.lock()?.clone(),
            to_device: self.inner.counters.uploads.load(Ordering::Relaxed),
            bytes_to_device: counters.bytes_to_device,
            bytes_to_host: counters.bytes_to_host,
            donated: self.inner.devices.iter().map(ttpu_eager::Device::donated_buffers).sum(),
            fallbacks: self.inner.counters.fallbacks.lock()?.clone(),
        })
    }

    /// A tensor on device `device` holding `host` (a copy from the host).
    pub fn upload(&self, device: usize, host: &HostTensor) -> Result<DeviceTensor> {
        let value = self.upload_value(device, host)?;
        Ok(DeviceTensor::fresh(device, Meta::contiguous(host.dtype, &host.dims), value, self.memory(device)?))
    }

    /// Small host data (a number passed as a tensor, a random key) recorded for the program that
    /// reads it, which receives it packed with the rest.
    fn host_value(&self, device: usize, host: HostTensor) -> Result<ttpu_eager::Tensor> {
        self.inner.counters.uploads.fetch_add(1, Ordering::Relaxed);
        Ok(self.device(device)?.host(host.dtype, &host.dims, host.data)?)
    }

    fn upload_value(&self, device: usize, host: &HostTensor) -> Result<ttpu_eager::Tensor> {
        let eager = self.device(device)?;
        self.inner.counters.uploads.fetch_add(1, Ordering::Relaxed);
        Ok(ttpu_eager::Tensor::from_bytes(eager, host.dtype, &host.data, &host.dims)?)
    }

    /// The tensor's elements on the host, row-major (its logical order, whatever its strides):
    /// runs the pending work of its device first. `reason` is counted in the statistics. An
    /// index check of that work that failed is the error instead (see `checks`).
    pub fn read(&self, tensor: &DeviceTensor, reason: &str) -> Result<HostTensor> {
        let state = tensor.state()?;
        let device = self.device(state.storage.device)?;
        let value = tensor::value_of(device, &state)?;
        self.flush(device, reason)?;
        self.read_checks(state.storage.device)?;
        bump(&self.inner.counters.to_host, reason)?;
        let host = value.to_host()?;
        let data = ttpu_runtime::host_bytes(state.meta.dtype, host.data);
        Ok(HostTensor { dtype: state.meta.dtype, dims: state.meta.sizes().to_vec(), data })
    }

    /// A copy of `tensor` on device `device` (through the host when the devices differ).
    pub fn to_device(&self, tensor: &DeviceTensor, device: usize) -> Result<DeviceTensor> {
        let host = self.read(tensor, "to another device")?;
        self.upload(device, &host)
    }

    /// Makes `tensor` the same tensor as `source` from now on (same storage, view and
    /// metadata), as `.data = source` and `set_` do.
    pub fn rebind(&self, tensor: &DeviceTensor, source: &DeviceTensor) -> Result<()> {
        let state = source.state()?;
        *tensor.inner.lock()? = state;
        Ok(())
    }

    /// Runs the registered overload `op` on `args` and `kwargs`. `device` places calls that
    /// have no tensor operand (factories). Results whose alias an argument are the caller's to
    /// return: a mutating overload returns only its fresh results here.
    pub fn dispatch(
        &self,
        op: OpId,
        args: &[Value],
        kwargs: &[(String, Value)],
        device: Option<usize>,
    ) -> Result<Returned> {
        self.inner.counters.calls.fetch_add(1, Ordering::Relaxed);
        let (spec, def, kernel) = {
            let ops = self.inner.ops.read()?;
            let registered = ops
                .get(op.0)
                .ok_or_else(|| Error::Call { op: format!("op {}", op.0), message: "was never registered".into() })?;
            (registered.spec.clone(), registered.def, registered.kernel.clone())
        };
        if let Some(kernel) = kernel {
            // Registered as functional (`register_kernel` refuses any other kind).
            let flat = self.flatten(&spec.name, args, kwargs, device)?;
            let (entry, results) = self.record_kernel(&spec.name, &kernel, &flat)?;
            let template = &entry.template;
            return self.fresh(&spec.name, template, &template.output, &results, flat.device);
        }
        let def = def.ok_or_else(|| Error::Unsupported { op: spec.name.clone() })?;
        match &spec.kind {
            OpKind::Functional => {
                let flat = self.flatten(&spec.name, args, kwargs, device)?;
                let (entry, results) = self.record(def, &flat)?;
                let template = &entry.family.template;
                self.fresh(&spec.name, template, &template.output, &results, flat.device)
            }
            OpKind::View => self.view(&spec.name, def, args, kwargs, device),
            OpKind::Mutating { written, fresh } => self.mutate(&spec.name, def, args, kwargs, device, written, *fresh),
            OpKind::InplaceView => {
                let Some(Value::Tensor(tensor)) = args.first() else {
                    return Err(Error::Call { op: spec.name.clone(), message: "expects a tensor first".into() });
                };
                let moved = self.view(&spec.name, def, args, kwargs, device)?;
                let Returned::Tensor(moved) = moved else {
                    return Err(Error::Call { op: spec.name.clone(), message: "its view has several results".into() });
                };
                self.rebind(tensor, &moved)?;
                Ok(Returned::None)
            }
        }
    }

    /// The call's arguments as the table's, its tensors as operands on one device.
    fn flatten(&self, op: &str, args: &[Value], kwargs: &[(String, Value)], device: Option<usize>) -> Result<Flat> {
        let mut flat = Flat {
            args: Vec::with_capacity(args.len()),
            kwargs: Vec::with_capacity(kwargs.len()),
            operands: Vec::new(),
            values: Vec::new(),
            tensors: Vec::new(),
            device: 0,
        };
        let mut hosts = Vec::new();
        let mut found: Option<usize> = None;
        fn walk(
            value: &Value,
            flat: &mut Flat,
            hosts: &mut Vec<(usize, HostTensor)>,
            found: &mut Option<usize>,
        ) -> Result<Arg> {
            Ok(match value {
                Value::None => Arg::None,
                Value::Int(value) => Arg::Int(*value),
                Value::Float(value) => Arg::Float(*value),
                Value::Bool(value) => Arg::Bool(*value),
                Value::Str(text) => Arg::Str(text.clone()),
                Value::DType(dtype) => Arg::DType(*dtype),
                Value::Opaque(text) => Arg::Opaque(text.clone()),
                Value::List(items) => {
                    Arg::List(items.iter().map(|item| walk(item, flat, hosts, found)).collect::<Result<_>>()?)
                }
                Value::Tensor(tensor) => {
                    let state = tensor.state()?;
                    let device = state.storage.device;
                    match *found {
                        Some(other) if other != device => {
                            return Err(Error::DeviceMismatch {
                                first: format!("ttpu:{other}"),
                                second: format!("ttpu:{device}"),
                            });
                        }
                        _ => *found = Some(device),
                    }
                    let meta = &state.meta;
                    flat.operands.push(Operand {
                        ty: TensorType::new(meta.dtype, Shape::from_static(meta.sizes())),
                        strides: (!meta.strides.is_contiguous()).then(|| meta.strides.clone()),
                    });
                    flat.tensors.push(Some((tensor.clone(), state)));
                    Arg::Tensor(flat.operands.len() - 1)
                }
                Value::Host(host) => {
                    flat.operands.push(Operand {
                        ty: TensorType::new(host.dtype, Shape::from_static(&host.dims)),
                        strides: None,
                    });
                    flat.tensors.push(None);
                    hosts.push((flat.operands.len() - 1, host.clone()));
                    Arg::Tensor(flat.operands.len() - 1)
                }
            })
        }
        for value in args {
            let arg = walk(value, &mut flat, &mut hosts, &mut found)?;
            flat.args.push(arg);
        }
        for (name, value) in kwargs {
            let arg = walk(value, &mut flat, &mut hosts, &mut found)?;
            flat.kwargs.push((name.clone(), arg));
        }
        flat.device = found.or(device).unwrap_or(0);
        let eager = self.device(flat.device)?;
        // As with CUDA, only a zero-dim CPU tensor may join device tensors (as a number would).
        if hosts.iter().any(|(_, host)| !host.dims.is_empty()) {
            tracing::debug!(op, "a CPU tensor with dims among the operands");
            return Err(Error::DeviceMismatch { first: format!("ttpu:{}", flat.device), second: "cpu".into() });
        }
        let mut hosts = hosts.into_iter().peekable();
        for index in 0..flat.tensors.len() {
            let value = match &flat.tensors[index] {
                Some((_, state)) => tensor::value_of(eager, state)?,
                None => {
                    let (_, host) = hosts.next().expect("one host tensor per host operand");
                    self.host_value(flat.device, host)?
                }
            };
            flat.values.push(value);
        }
        Ok(flat)
    }

    /// Records `def` on `flat`'s operands: its template (built once per signature, after a size
    /// program when the data decides sizes), generator states and float inputs.
    fn record(&self, def: &'static OpDef, flat: &Flat) -> Result<(Arc<Entry>, Vec<ttpu_eager::Tensor>)> {
        let device = self.device(flat.device)?;
        let mut symbol_values = IndexMap::new();
        // Each round of a size program gives the sizes one level of data-dependent ops needs.
        for _ in 0..8 {
            let lookup =
                self.inner.memo.lock()?.lookup(def, &flat.args, &flat.kwargs, &flat.operands, &symbol_values)?;
            match lookup {
                Lookup::Entry(entry) => {
                    let template = &entry.family.template;
                    let mut inputs: Vec<ttpu_eager::Tensor> = flat.values.clone();
                    inputs.extend(self.rng_states(flat.device, template.rng_states)?);
                    let floats = eager::floats(&flat.args, &flat.kwargs);
                    let scalars =
                        template.scalar_inputs(&floats).map_err(|error| Error::from_table(def.name, error))?;
                    for (dtype, count, data) in scalars {
                        inputs
                            .push(self.host_value(flat.device, HostTensor { dtype, dims: vec![count as i64], data })?);
                    }
                    self.check_result_sizes(def.name, flat.device, entry.call.graph())?;
                    let operands: Vec<&ttpu_eager::Tensor> = inputs.iter().collect();
                    let results = device.call(&entry.call, &operands)?;
                    let call = (flat.args.as_slice(), flat.kwargs.as_slice());
                    self.checks().record(device, flat.device, def, call, &flat.operands, &flat.values)?;
                    return Ok((entry, results));
                }
                Lookup::Sizes(call) => {
                    let mut inputs: Vec<ttpu_eager::Tensor> = flat.values.clone();
                    let draws = call.graph().inputs.len().saturating_sub(inputs.len());
                    inputs.extend(self.rng_states(flat.device, draws)?);
                    let operands: Vec<&ttpu_eager::Tensor> = inputs.iter().collect();
                    let sizes = device.call(&call, &operands)?;
                    self.flush(device, "a size the data decides")?;
                    bump(&self.inner.counters.to_host, "a size the data decides")?;
                    symbol_values.clear();
                    for (index, size) in sizes.iter().enumerate() {
                        symbol_values.insert(format!("u{index}"), size.item::<i64>()?);
                    }
                }
            }
        }
        Err(Error::Call {
            op: def.name.to_string(),
            message: "its sizes depend on the data more than 8 levels deep".into(),
        })
    }

    /// The template of a call of `kernel` (the overload `op`), after checking that the call passes
    /// its tensors as a kernel takes them (`args` and `kwargs` as the table's, tensors numbered by
    /// operand).
    pub(crate) fn kernel_entry(
        &self,
        op: &str,
        kernel: &Arc<Kernel>,
        args: &[Arg],
        kwargs: &[(String, Arg)],
        operands: &[Operand],
    ) -> Result<Arc<KernelEntry>> {
        // Checked on every call, before the memo, which is keyed by the operands alone.
        eager::check_kernel_call(kernel, args, kwargs).map_err(|error| Error::from_table(op, error))?;
        self.inner.memo.lock()?.kernel(op, kernel, operands)
    }

    /// Records a call of `kernel` (the overload `op`) on `flat`'s operands: one step of the lazy
    /// tape, as any call.
    fn record_kernel(
        &self,
        op: &str,
        kernel: &Arc<Kernel>,
        flat: &Flat,
    ) -> Result<(Arc<KernelEntry>, Vec<ttpu_eager::Tensor>)> {
        let entry = self.kernel_entry(op, kernel, &flat.args, &flat.kwargs, &flat.operands)?;
        self.check_result_sizes(op, flat.device, entry.call.graph())?;
        let operands: Vec<&ttpu_eager::Tensor> = flat.values.iter().collect();
        let results = self.device(flat.device)?.call(&entry.call, &operands)?;
        Ok((entry, results))
    }

    /// Fresh generator states for `count` draws, uploaded.
    fn rng_states(&self, device: usize, count: usize) -> Result<Vec<ttpu_eager::Tensor>> {
        let mut states = Vec::with_capacity(count);
        for _ in 0..count {
            let state = {
                let mut rng = self.inner.rng.lock()?;
                let state = eager::rng_state(rng.seed, rng.draws);
                rng.draws += 1;
                state
            };
            let data = state.iter().flat_map(|word| word.to_le_bytes()).collect();
            states.push(self.host_value(device, HostTensor { dtype: DType::U64, dims: vec![2], data })?);
        }
        Ok(states)
    }

    /// New tensors for the results of a call of `op` built into `template`.
    fn fresh(
        &self,
        op: &str,
        template: &Template,
        output: &Output,
        results: &[ttpu_eager::Tensor],
        device: usize,
    ) -> Result<Returned> {
        Ok(match output {
            Output::Tensor(index) => {
                let value = results.get(*index).ok_or_else(|| lost(op))?;
                let strides = template.strides.get(*index).cloned().ok_or_else(|| lost(op))?;
                let meta = Meta { dtype: value.dtype(), strides };
                Returned::Tensor(DeviceTensor::fresh(device, meta, value.clone(), self.memory(device)?))
            }
            Output::Int(value) => Returned::Int(*value),
            Output::Bool(value) => Returned::Bool(*value),
            Output::None => Returned::None,
            Output::List(items) => Returned::List(
                items.iter().map(|item| self.fresh(op, template, item, results, device)).collect::<Result<_>>()?,
            ),
        })
    }

    /// A view call: results that share the viewed tensor's storage.
    fn view(
        &self,
        op: &str,
        def: &'static OpDef,
        args: &[Value],
        kwargs: &[(String, Value)],
        device: Option<usize>,
    ) -> Result<Returned> {
        if matches!(def.name, "aten.alias.default" | "aten.detach.default" | "aten.lift_fresh.default") {
            let Some(Value::Tensor(tensor)) = args.first() else {
                return Err(Error::Call { op: op.to_string(), message: "expects a tensor".into() });
            };
            let state = tensor.state()?;
            return Ok(Returned::Tensor(DeviceTensor::new(state.storage, state.chain, state.meta)));
        }
        let mut flat = self.flatten(op, args, kwargs, device)?;
        let Some(Some((_, source))) = flat.tensors.first().cloned() else {
            return Err(Error::Call { op: op.to_string(), message: "views a tensor of the device".into() });
        };
        // `as_strided` addresses the storage itself, whatever view it is called on.
        let reads_storage = def.name == "aten.as_strided.default";
        let base = if reads_storage {
            if !source.storage.meta.strides.is_contiguous() {
                return Err(Error::Call {
                    op: op.to_string(),
                    message: "as_strided over a storage that is not contiguous is not supported".into(),
                });
            }
            let meta = source.storage.meta.clone();
            flat.values[0] = source.storage.value.lock()?.clone();
            flat.operands[0] =
                Operand { ty: TensorType::new(meta.dtype, Shape::from_static(meta.sizes())), strides: None };
            TensorState { storage: Arc::clone(&source.storage), chain: Arc::from(Vec::new()), meta }
        } else {
            source
        };
        let (entry, results) = self.record(def, &flat)?;
        let template = &entry.family.template;
        let mut position = 0;
        self.views(&entry, &template.output, &results, &base, &flat.args, &mut position)
    }

    fn views(
        &self,
        entry: &Arc<Entry>,
        output: &Output,
        results: &[ttpu_eager::Tensor],
        base: &TensorState,
        args: &[Arg],
        position: &mut usize,
    ) -> Result<Returned> {
        Ok(match output {
            Output::Tensor(index) => {
                let value = results.get(*index).ok_or_else(|| lost(entry.op))?;
                let strides = entry.family.template.strides.get(*index).cloned().ok_or_else(|| lost(entry.op))?;
                let step = ViewStep {
                    entry: Arc::clone(entry),
                    args: args.to_vec(),
                    output: *index,
                    result: *position,
                    source: base.meta.clone(),
                };
                *position += 1;
                let mut chain = base.chain.to_vec();
                chain.push(step);
                let meta = Meta { dtype: value.dtype(), strides };
                Returned::Tensor(DeviceTensor::new(Arc::clone(&base.storage), Arc::from(chain), meta))
            }
            Output::List(items) => Returned::List(
                items
                    .iter()
                    .map(|item| self.views(entry, item, results, base, args, position))
                    .collect::<Result<_>>()?,
            ),
            Output::Int(value) => Returned::Int(*value),
            Output::Bool(value) => Returned::Bool(*value),
            Output::None => Returned::None,
        })
    }

    /// A mutating call: its functional form, then each written tensor takes its new value.
    #[allow(clippy::too_many_arguments)] // The call's parts, as dispatch received them.
    fn mutate(
        &self,
        op: &str,
        def: &'static OpDef,
        args: &[Value],
        kwargs: &[(String, Value)],
        device: Option<usize>,
        written: &[(usize, String)],
        fresh: usize,
    ) -> Result<Returned> {
        // The tensors an `out=` overload writes are not arguments of its functional form.
        let functional_kwargs: Vec<(String, Value)> = kwargs
            .iter()
            .filter(|(name, _)| def.has_param(name) || !written.iter().any(|(_, written)| written == name))
            .cloned()
            .collect();
        let flat = self.flatten(op, args, &functional_kwargs, device)?;
        let (entry, results) = self.record(def, &flat)?;
        let mut outputs = Vec::new();
        flatten_output(&entry.family.template.output, &mut outputs);
        let mut next = fresh;
        for (position, name) in written {
            let target =
                args.get(*position).or_else(|| kwargs.iter().find(|(key, _)| key == name).map(|(_, value)| value));
            let targets: Vec<&DeviceTensor> = match target {
                Some(Value::Tensor(tensor)) => vec![tensor],
                Some(Value::List(items)) => items
                    .iter()
                    .filter_map(|item| if let Value::Tensor(tensor) = item { Some(tensor) } else { None })
                    .collect(),
                _ => Vec::new(),
            };
            for tensor in targets {
                let index = *outputs.get(next).ok_or_else(|| Error::Call {
                    op: op.to_string(),
                    message: format!("its functional form `{}` gives fewer results than it writes", def.name),
                })?;
                next += 1;
                let value = results.get(index).ok_or_else(|| lost(entry.op))?.clone();
                self.write(op, tensor, value)?;
            }
        }
        let mut fresh_results = Vec::with_capacity(fresh);
        for &index in outputs.iter().take(fresh) {
            let value = results.get(index).ok_or_else(|| lost(entry.op))?;
            let strides = entry.family.template.strides.get(index).cloned().ok_or_else(|| lost(entry.op))?;
            let meta = Meta { dtype: value.dtype(), strides };
            fresh_results.push(Returned::Tensor(DeviceTensor::fresh(
                flat.device,
                meta,
                value.clone(),
                self.memory(flat.device)?,
            )));
        }
        Ok(match fresh_results.len() {
            0 => Returned::None,
            1 => fresh_results.pop().expect("one result"),
            _ => Returned::List(fresh_results),
        })
    }

    /// `tensor` takes `value` as its new contents, cast to its dtype as PyTorch's in-place ops
    /// cast their results, and through its view chain into its storage.
    fn write(&self, op: &str, tensor: &DeviceTensor, value: ttpu_eager::Tensor) -> Result<()> {
        let state = tensor.state()?;
        let sizes = state.meta.sizes();
        if value.dims() != sizes {
            return Err(Error::InPlace {
                message: format!(
                    "{op}: output with shape {:?} doesn't match the broadcast shape {:?}",
                    sizes,
                    value.dims()
                ),
            });
        }
        let value = if value.dtype() != state.meta.dtype {
            if !can_cast(value.dtype(), state.meta.dtype) {
                return Err(Error::InPlace {
                    message: format!(
                        "{op}: result type {} can't be cast to the desired output type {}",
                        value.dtype(),
                        state.meta.dtype
                    ),
                });
            }
            self.cast(state.storage.device, &value, state.meta.dtype)?
        } else {
            value
        };
        let device = self.device(state.storage.device)?;
        tensor::write_back(device, &state, value, &mut |step, before, new| self.inverse(step, before, new))
    }

    fn cast(&self, device: usize, value: &ttpu_eager::Tensor, dtype: DType) -> Result<ttpu_eager::Tensor> {
        let def = eager::lookup("prims.convert_element_type.default")
            .ok_or_else(|| Error::Unsupported { op: "prims.convert_element_type.default".into() })?;
        let flat = Flat {
            args: vec![Arg::Tensor(0), Arg::DType(dtype)],
            kwargs: Vec::new(),
            operands: vec![Operand { ty: TensorType::new(value.dtype(), value.shape().clone()), strides: None }],
            values: vec![value.clone()],
            tensors: vec![None],
            device,
        };
        let (_, mut results) = self.record(def, &flat)?;
        results.pop().ok_or_else(|| Error::Call { op: def.name.into(), message: "gave no result".into() })
    }

    /// The value before a view step, after writing `new` into the step's view.
    fn inverse(
        &self,
        step: &ViewStep,
        before: &ttpu_eager::Tensor,
        new: &ttpu_eager::Tensor,
    ) -> Result<ttpu_eager::Tensor> {
        match tensor::inverse_of(step)? {
            Inverse::Identity => Ok(new.clone()),
            Inverse::Call { def, args } => {
                let operand = |value: &ttpu_eager::Tensor, meta: Option<&Strides>| Operand {
                    ty: TensorType::new(value.dtype(), value.shape().clone()),
                    strides: meta.filter(|strides| !strides.is_contiguous()).cloned(),
                };
                let flat = Flat {
                    args,
                    kwargs: Vec::new(),
                    operands: vec![operand(before, None), operand(new, None)],
                    values: vec![before.clone(), new.clone()],
                    tensors: vec![None, None],
                    device: self.backend_index(before.device().index())?,
                };
                let (_, mut results) = self.record(def, &flat)?;
                results.pop().ok_or_else(|| Error::Call { op: def.name.into(), message: "gave no result".into() })
            }
        }
    }
}

fn flatten_output(output: &Output, out: &mut Vec<usize>) {
    match output {
        Output::Tensor(index) => out.push(*index),
        Output::List(items) => items.iter().for_each(|item| flatten_output(item, out)),
        Output::Int(_) | Output::Bool(_) | Output::None => {}
    }
}

fn lost(op: &str) -> Error {
    Error::Call { op: op.to_string(), message: "its template lost a result (a ttpu bug)".into() }
}

fn bump(map: &Mutex<BTreeMap<String, u64>>, key: &str) -> Result<()> {
    *map.lock()?.entry(key.to_string()).or_default() += 1;
    Ok(())
}

/// PyTorch's `canCast`: whether an in-place op may write a result of `from` into `to`.
fn can_cast(from: DType, to: DType) -> bool {
    if from.is_complex() && !to.is_complex() {
        return false;
    }
    if from.is_float() && !to.is_float() && !to.is_complex() {
        return false;
    }
    from.is_bool() || !to.is_bool()
}

/// See [`Backend::tensor_byte_limit`].
fn tensor_byte_limit(platform: &str) -> u64 {
    const OTHER: u64 = 1 << 47;
    if !platform.eq_ignore_ascii_case("cpu") {
        return OTHER;
    }
    host_memory_bytes().unwrap_or(OTHER)
}

/// The host's physical memory (`MemTotal` of `/proc/meminfo`), where the system says.
fn host_memory_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|line| line.starts_with("MemTotal:"))?;
    let kib: u64 = line.trim_start_matches("MemTotal:").trim().trim_end_matches("kB").trim().parse().ok()?;
    kib.checked_mul(1024)
}
