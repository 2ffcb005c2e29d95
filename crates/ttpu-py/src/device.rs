//! The binding of the ttpu device (`ttpu_device::Backend`): one native call per ATen call that
//! PyTorch dispatches to a ttpu tensor.
//!
//! Arguments are converted here, in one pass over the Python objects: ttpu tensors (the
//! package's tensor class, whose `_h` attribute holds a [`Handle`]) become device tensors, CPU
//! tensors become host data (through the package's converter), Python numbers, strings, lists
//! and dtypes become the table's values; devices, layouts and memory formats pass as their text.
//! A custom op whose kernel is registered (`register_kernel`, [`crate::kernel_for`]) is registered
//! with the device as that kernel's, and recorded as it in compiled graphs.
//! Results come back as `(handle, sizes, strides, offset, dtype)` tuples the package wraps as
//! tensors. The interpreter lock is released while programs compile and run (reads, flushes).

use std::sync::{Mutex, OnceLock};

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use ttpu::RuntimeOptions;
use ttpu_device::{
    Arg, Backend, DType, DeviceTensor, HostTensor, Mode, OpId, OpKind, OpSpec, Program, Recorded, Recorder, Returned,
    Strides, Value,
};

use crate::error;

/// A tensor on the device, held by the package's tensor object.
#[pyclass(frozen, module = "ttpu._ttpu")]
pub(crate) struct Handle {
    tensor: DeviceTensor,
}

struct Device {
    backend: Backend,
    /// The package's ttpu tensor class.
    tensor_class: Py<PyAny>,
    /// `torch.dtype` objects by IR name, and the converter of CPU tensors to `(buffer, dtype, shape)`.
    dtypes: Py<PyDict>,
    host_of: Py<PyAny>,
}

static DEVICE: OnceLock<Mutex<Option<Device>>> = OnceLock::new();

fn with_device<T>(run: impl FnOnce(&Device) -> PyResult<T>) -> PyResult<T> {
    let slot = DEVICE.get_or_init(|| Mutex::new(None));
    let guard = slot.lock().map_err(|_| error("the device table was poisoned by a panic"))?;
    let device = guard.as_ref().ok_or_else(|| error("the ttpu device is not initialized (import ttpu first)"))?;
    run(device)
}

pub(crate) fn backend() -> PyResult<Backend> {
    with_device(|device| Ok(device.backend.clone()))
}

/// Starts the device on the PJRT plugin `plugin` (the library's default when `None`) with
/// `devices` devices (the CPU plugin makes that many; other plugins use their first ones), and
/// remembers the package's tensor class, the dtypes by IR name and the CPU-tensor converter.
/// Returns the platform and the device count.
///
/// With `job`, the runtime takes part in the job its launcher describes (`ttpu::Launch`: ttpu's,
/// JAX's or torchrun's variables and a `file://` or `redis://` store), so that its programs may
/// run collectives across the job's processes; a process alone runs as without it.
#[pyfunction]
#[pyo3(signature = (tensor_class, dtypes, host_of, plugin=None, devices=None, job=false))]
pub(crate) fn device_init(
    py: Python<'_>,
    tensor_class: Py<PyAny>,
    dtypes: Py<PyDict>,
    host_of: Py<PyAny>,
    plugin: Option<std::path::PathBuf>,
    devices: Option<usize>,
    job: bool,
) -> PyResult<(String, usize)> {
    let slot = DEVICE.get_or_init(|| Mutex::new(None));
    let mut guard = slot.lock().map_err(|_| error("the device table was poisoned by a panic"))?;
    if let Some(device) = guard.as_ref() {
        return Ok((device.backend.runtime().platform(), device.backend.device_count()));
    }
    let path = match plugin {
        Some(path) => path,
        None => ttpu::find_plugin().map_err(error)?,
    };
    let distributed = match job {
        true => match ttpu::Launch::from_env().map_err(error)? {
            Some(launch) => Some(launch.distributed().map_err(error)?),
            None => None,
        },
        false => None,
    };
    let runtime = py
        .detach(|| ttpu::Runtime::new(&path, &RuntimeOptions { devices, distributed, ..RuntimeOptions::default() }))
        .map_err(error)?;
    // The same compile cache on disk as the CLI's and the compiled models'.
    if let Some(dir) = ttpu::default_disk_cache_dir() {
        runtime.set_disk_cache(&dir).map_err(error)?;
    }
    let backend = Backend::new(runtime).map_err(error)?;
    let answer = (backend.runtime().platform(), backend.device_count());
    *guard = Some(Device { backend, tensor_class, dtypes, host_of });
    Ok(answer)
}

/// Registers an overload: `kind` is `functional`, `view`, `mutating` or `inplace_view`;
/// `written` the (position, name) of the arguments a mutating one writes, `fresh` how many of
/// its results are new tensors, `functional` its functional overload. Returns its id and whether
/// the device runs it (the table, or a registered kernel for a custom op; a kernel's op that is
/// not functional is an error naming it).
#[pyfunction]
#[pyo3(signature = (name, kind, written=Vec::new(), fresh=0, functional=None))]
pub(crate) fn device_register(
    name: String,
    kind: &str,
    written: Vec<(usize, String)>,
    fresh: usize,
    functional: Option<String>,
) -> PyResult<(usize, bool)> {
    let kind = match kind {
        "functional" => OpKind::Functional,
        "view" => OpKind::View,
        "mutating" => OpKind::Mutating { written, fresh },
        "inplace_view" => OpKind::InplaceView,
        other => return Err(error(format!("unknown op kind `{other}`"))),
    };
    let backend = backend()?;
    let spec = OpSpec { name, kind, functional };
    let id = match crate::kernel_for(&spec.name)? {
        Some(kernel) => backend.register_kernel(spec, kernel),
        None => backend.register(spec),
    }
    .map_err(error)?;
    let supported = backend.supports(id).map_err(error)?;
    Ok((id_index(id), supported))
}

fn id_index(id: OpId) -> usize {
    id.index()
}

/// Runs the registered overload `op` on `args` and `kwargs`; `device` places calls without a
/// tensor operand. Returns its results (see the module docs), `None` when it has none.
#[pyfunction]
#[pyo3(signature = (op, args, kwargs, device=None))]
pub(crate) fn device_dispatch<'py>(
    py: Python<'py>,
    op: usize,
    args: &Bound<'py, PyTuple>,
    kwargs: &Bound<'py, PyDict>,
    device: Option<usize>,
) -> PyResult<Bound<'py, PyAny>> {
    let (backend, args, kwargs) = with_device(|state| {
        let args = args.iter().map(|arg| value(py, state, &arg)).collect::<PyResult<Vec<_>>>()?;
        let kwargs = kwargs
            .iter()
            .map(|(key, arg)| Ok((key.extract::<String>()?, value(py, state, &arg)?)))
            .collect::<PyResult<Vec<_>>>()?;
        Ok((state.backend.clone(), args, kwargs))
    })?;
    let returned = backend.dispatch(op_id(op), &args, &kwargs, device).map_err(error)?;
    returned_to_python(py, returned)
}

fn op_id(index: usize) -> OpId {
    OpId::from_index(index)
}

fn value(py: Python<'_>, device: &Device, object: &Bound<'_, PyAny>) -> PyResult<Value> {
    if object.is_none() {
        return Ok(Value::None);
    }
    if object.is_instance(device.tensor_class.bind(py))? {
        let handle = object.getattr("_h")?;
        let handle = handle.cast::<Handle>().map_err(|_| error("a ttpu tensor without a device handle"))?;
        return Ok(Value::Tensor(handle.get().tensor.clone()));
    }
    // `bool` is a subclass of `int` in Python: test it first.
    if object.is_instance_of::<PyBool>() {
        return Ok(Value::Bool(object.extract()?));
    }
    if object.is_instance_of::<PyInt>() {
        return Ok(Value::Int(object.extract()?));
    }
    if object.is_instance_of::<PyFloat>() {
        return Ok(Value::Float(object.extract()?));
    }
    if object.is_instance_of::<PyString>() {
        return Ok(Value::Str(object.extract()?));
    }
    if object.is_instance_of::<PyList>() || object.is_instance_of::<PyTuple>() {
        return Ok(Value::List(object.try_iter()?.map(|item| value(py, device, &item?)).collect::<PyResult<_>>()?));
    }
    let dtypes = device.dtypes.bind(py);
    for (name, dtype) in dtypes.iter() {
        if object.is(&dtype) {
            let name: String = name.extract()?;
            return Ok(Value::DType(name.parse().map_err(|_| error(format!("unknown dtype `{name}`")))?));
        }
    }
    let type_name = object.get_type().name()?.to_string();
    if type_name == "dtype" {
        // A `torch.dtype` the IR has no type for (the float8, float4, bits and sub-byte types).
        return Err(pyo3::exceptions::PyNotImplementedError::new_err(format!(
            "ttpu: {} is not supported on the ttpu device (docs/ops.md lists the dtypes the op table has)",
            object.str()?
        )));
    }
    if type_name == "Tensor" || type_name == "Parameter" || object.hasattr("__torch_function__")? {
        let (buffer, dtype, shape): (PyBuffer<u8>, String, Vec<i64>) =
            device.host_of.bind(py).call1((object,))?.extract()?;
        let dtype: DType = dtype.parse().map_err(|_| error(format!("unknown dtype `{dtype}`")))?;
        return Ok(Value::Host(HostTensor { dtype, dims: shape, data: buffer.to_vec(py)? }));
    }
    Ok(Value::Opaque(object.str()?.to_string()))
}

fn returned_to_python<'py>(py: Python<'py>, returned: Returned) -> PyResult<Bound<'py, PyAny>> {
    Ok(match returned {
        Returned::Tensor(tensor) => tensor_tuple(py, tensor)?,
        Returned::Int(value) => value.into_pyobject(py)?.into_any(),
        Returned::Bool(value) => PyBool::new(py, value).to_owned().into_any(),
        Returned::None => py.None().into_bound(py),
        Returned::List(items) => {
            let items = items.into_iter().map(|item| returned_to_python(py, item)).collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, items)?.into_any()
        }
    })
}

/// `(handle, sizes, strides, offset, dtype name, device index)` of a device tensor.
pub(crate) fn tensor_tuple(py: Python<'_>, tensor: DeviceTensor) -> PyResult<Bound<'_, PyAny>> {
    let meta = tensor.meta().map_err(error)?;
    let device = tensor.device().map_err(error)?;
    let handle = Py::new(py, Handle { tensor })?;
    let strides = &meta.strides;
    Ok((handle, strides.sizes.clone(), strides.strides.clone(), strides.offset, meta.dtype.name(), device)
        .into_pyobject(py)?
        .into_any())
}

pub(crate) fn handle_of<'py>(object: &Bound<'py, PyAny>) -> PyResult<DeviceTensor> {
    let handle = object.cast::<Handle>().map_err(|_| error("expected a ttpu device handle"))?;
    Ok(handle.get().tensor.clone())
}

/// A device tensor holding the CPU data `(buffer, dtype, shape)` on device `device`.
#[pyfunction]
pub(crate) fn device_upload<'py>(
    py: Python<'py>,
    device: usize,
    buffer: PyBuffer<u8>,
    dtype: String,
    shape: Vec<i64>,
) -> PyResult<Bound<'py, PyAny>> {
    let dtype: DType = dtype.parse().map_err(|_| error(format!("unknown dtype `{dtype}`")))?;
    let host = HostTensor { dtype, dims: shape, data: buffer.to_vec(py)? };
    let backend = backend()?;
    let tensor = py.detach(|| backend.upload(device, &host)).map_err(error)?;
    tensor_tuple(py, tensor)
}

/// `ttpu.TtpuIndexError`, made once: an `IndexError` (what PyTorch's CPU kernels raise for most
/// index checks) that is also a `TtpuError`, so a `RuntimeError` (what `gather` and the scatters
/// raise).
static INDEX_ERROR: OnceLock<Py<PyAny>> = OnceLock::new();

pub(crate) fn index_error_class(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    if let Some(class) = INDEX_ERROR.get() {
        return Ok(class.bind(py).clone());
    }
    let bases = PyTuple::new(
        py,
        [py.get_type::<pyo3::exceptions::PyIndexError>().into_any(), py.get_type::<crate::TtpuError>().into_any()],
    )?;
    let namespace = PyDict::new(py);
    namespace.set_item("__module__", "ttpu")?;
    namespace.set_item("__doc__", "An index out of range, found by the device's check at a host read.")?;
    let class = py.import("builtins")?.getattr("type")?.call1(("TtpuIndexError", bases, namespace))?;
    Ok(INDEX_ERROR.get_or_init(|| class.unbind()).bind(py).clone())
}

/// A host read's error: an index check that failed is [`index_error_class`]'s.
fn read_error(failure: ttpu_device::Error) -> PyErr {
    match failure {
        ttpu_device::Error::IndexOutOfRange { .. } => {
            Python::attach(|py| match index_error_class(py).and_then(|class| class.call1((failure.to_string(),))) {
                Ok(raised) => PyErr::from_value(raised),
                Err(error) => error,
            })
        }
        other => error(other),
    }
}

/// The tensor's elements on the host as `(bytearray, dtype, shape)`, running pending work
/// first; `reason` is counted in the statistics.
#[pyfunction]
pub(crate) fn device_read<'py>(
    py: Python<'py>,
    handle: &Bound<'py, PyAny>,
    reason: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let tensor = handle_of(handle)?;
    let backend = backend()?;
    let host = py.detach(|| backend.read(&tensor, reason)).map_err(read_error)?;
    let data = PyByteArray::new(py, &host.data);
    Ok((data, host.dtype.name(), host.dims).into_pyobject(py)?.into_any())
}

/// A copy of the tensor on device `device`.
#[pyfunction]
pub(crate) fn device_to<'py>(
    py: Python<'py>,
    handle: &Bound<'py, PyAny>,
    device: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let tensor = handle_of(handle)?;
    let backend = backend()?;
    let moved = py.detach(|| backend.to_device(&tensor, device)).map_err(error)?;
    tensor_tuple(py, moved)
}

/// Makes `handle` the same tensor as `source` (`.data =`, `set_`).
#[pyfunction]
pub(crate) fn device_rebind(handle: &Bound<'_, PyAny>, source: &Bound<'_, PyAny>) -> PyResult<()> {
    backend()?.rebind(&handle_of(handle)?, &handle_of(source)?).map_err(error)
}

/// `(storage id, storage element count)` of the tensor: equal ids share memory.
#[pyfunction]
pub(crate) fn device_storage(handle: &Bound<'_, PyAny>) -> PyResult<(u64, i64)> {
    let tensor = handle_of(handle)?;
    Ok((tensor.storage_id().map_err(error)?, tensor.storage_numel().map_err(error)?))
}

/// Runs all pending work; `reason` is counted in the statistics. With `check` (a user's
/// synchronizing call, not a flush of the device's own), an index check that failed is raised.
#[pyfunction]
#[pyo3(signature = (reason, check = false))]
pub(crate) fn device_synchronize(py: Python<'_>, reason: &str, check: bool) -> PyResult<()> {
    let backend = backend()?;
    py.detach(|| {
        backend.synchronize(reason)?;
        if check { backend.read_index_checks() } else { Ok(()) }
    })
    .map_err(read_error)
}

/// Sets the execution mode: `defer_and_fuse`, `defer_never` or `defer_never_blocking`.
#[pyfunction]
pub(crate) fn device_set_mode(py: Python<'_>, mode: &str) -> PyResult<()> {
    let mode = match mode {
        "defer_and_fuse" => Mode::DeferAndFuse,
        "defer_never" => Mode::DeferNever,
        "defer_never_blocking" => Mode::DeferNeverAndLaunchBlocking,
        other => return Err(error(format!("unknown execution mode `{other}`"))),
    };
    let backend = backend()?;
    py.detach(|| backend.set_mode(mode)).map_err(error)
}

/// The execution mode's name.
#[pyfunction]
pub(crate) fn device_mode() -> PyResult<&'static str> {
    Ok(match backend()?.mode().map_err(error)? {
        Mode::DeferAndFuse => "defer_and_fuse",
        Mode::DeferNever => "defer_never",
        Mode::DeferNeverAndLaunchBlocking => "defer_never_blocking",
    })
}

/// Seeds the device's random numbers.
#[pyfunction]
pub(crate) fn device_manual_seed(seed: u64) -> PyResult<()> {
    backend()?.manual_seed(seed).map_err(error)
}

/// The generator state `(seed, draws)`.
#[pyfunction]
pub(crate) fn device_rng_state() -> PyResult<(u64, u64)> {
    backend()?.rng_state().map_err(error)
}

/// Restores a generator state from [`device_rng_state`].
#[pyfunction]
pub(crate) fn device_set_rng_state(seed: u64, draws: u64) -> PyResult<()> {
    backend()?.set_rng_state(seed, draws).map_err(error)
}

/// `(bytes the tensors on device `index` hold, the most they held since the last reset)`.
#[pyfunction]
pub(crate) fn device_memory(index: usize) -> PyResult<(u64, u64)> {
    backend()?.memory_allocated(index).map_err(error)
}

/// Starts the peak of device `index` over.
#[pyfunction]
pub(crate) fn device_reset_peak(index: usize) -> PyResult<()> {
    backend()?.reset_peak_memory(index).map_err(error)
}

/// Counts a call the CPU ran instead of the device.
#[pyfunction]
pub(crate) fn device_count_fallback(op: &str) -> PyResult<()> {
    backend()?.count_fallback(op).map_err(error)
}

/// The device's statistics as a dict.
#[pyfunction]
pub(crate) fn device_stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let stats = backend()?.stats().map_err(error)?;
    let dict = PyDict::new(py);
    dict.set_item("calls", stats.calls)?;
    dict.set_item("templates", stats.templates)?;
    dict.set_item("compiles", stats.compiles)?;
    dict.set_item("cache_hits", stats.cache_hits)?;
    dict.set_item("executions", stats.executions)?;
    dict.set_item("flushes", stats.flushes.into_iter().collect::<Vec<_>>().into_pyobject(py)?)?;
    dict.set_item("to_host", stats.to_host.into_iter().collect::<Vec<_>>().into_pyobject(py)?)?;
    dict.set_item("to_device", stats.to_device)?;
    dict.set_item("bytes_to_device", stats.bytes_to_device)?;
    dict.set_item("bytes_to_host", stats.bytes_to_host)?;
    dict.set_item("donated", stats.donated)?;
    dict.set_item("fallbacks", stats.fallbacks.into_iter().collect::<Vec<_>>().into_pyobject(py)?)?;
    Ok(dict)
}

/// Whether the device can run the overload `name` (in a compiled graph too): the op table has it,
/// or it is a custom op whose kernel is registered.
#[pyfunction]
pub(crate) fn table_has(name: &str) -> PyResult<bool> {
    Ok(ttpu_device::table_has(name) || crate::kernel_for(name)?.is_some())
}

/// A reference to a value of a [`GraphRecorder`]: how a graph's nodes name each other's results.
#[pyclass(frozen, module = "ttpu._ttpu")]
pub(crate) struct Ref {
    index: u32,
}

#[pymethods]
impl Ref {
    #[new]
    fn new(index: u32) -> Ref {
        Ref { index }
    }

    /// The value's index.
    #[getter]
    fn index(&self) -> u32 {
        self.index
    }
}

/// An ATen graph recorded node by node through the op table (`torch.compile`'s graphs).
#[pyclass(module = "ttpu._ttpu")]
pub(crate) struct GraphRecorder {
    recorder: Option<Recorder>,
}

/// A recorded graph: `run(tensors)` records it as one step on the device.
#[pyclass(frozen, module = "ttpu._ttpu")]
pub(crate) struct GraphProgram {
    program: Program,
}

fn recorder_arg(py: Python<'_>, device: &Device, object: &Bound<'_, PyAny>) -> PyResult<Arg> {
    if object.is_none() {
        return Ok(Arg::None);
    }
    if let Ok(reference) = object.cast::<Ref>() {
        return Ok(Arg::Tensor(reference.get().index as usize));
    }
    if object.is_instance_of::<PyBool>() {
        return Ok(Arg::Bool(object.extract()?));
    }
    if object.is_instance_of::<PyInt>() {
        return Ok(Arg::Int(object.extract()?));
    }
    if object.is_instance_of::<PyFloat>() {
        return Ok(Arg::Float(object.extract()?));
    }
    if object.is_instance_of::<PyString>() {
        return Ok(Arg::Str(object.extract()?));
    }
    if object.is_instance_of::<PyList>() || object.is_instance_of::<PyTuple>() {
        return Ok(Arg::List(
            object.try_iter()?.map(|item| recorder_arg(py, device, &item?)).collect::<PyResult<_>>()?,
        ));
    }
    for (name, dtype) in device.dtypes.bind(py).iter() {
        if object.is(&dtype) {
            let name: String = name.extract()?;
            return Ok(Arg::DType(name.parse().map_err(|_| error(format!("unknown dtype `{name}`")))?));
        }
    }
    Ok(Arg::Opaque(object.str()?.to_string()))
}

fn recorded_to_python<'py>(py: Python<'py>, recorded: Recorded) -> PyResult<Bound<'py, PyAny>> {
    Ok(match recorded {
        Recorded::Value(index, dtype, strides) => {
            (Ref { index }, dtype.name(), strides.sizes, strides.strides, strides.offset).into_pyobject(py)?.into_any()
        }
        Recorded::Int(value) => value.into_pyobject(py)?.into_any(),
        Recorded::Bool(value) => PyBool::new(py, value).to_owned().into_any(),
        Recorded::None => py.None().into_bound(py),
        Recorded::List(items) => {
            let items = items.into_iter().map(|item| recorded_to_python(py, item)).collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, items)?.into_any()
        }
    })
}

#[pymethods]
impl GraphRecorder {
    #[new]
    fn new() -> PyResult<GraphRecorder> {
        Ok(GraphRecorder { recorder: Some(backend()?.recorder()) })
    }

    /// Adds a tensor input; returns its reference.
    fn input(&mut self, dtype: &str, sizes: Vec<i64>, strides: Vec<i64>, offset: i64) -> PyResult<Ref> {
        let dtype: DType = dtype.parse().map_err(|_| error(format!("unknown dtype `{dtype}`")))?;
        let recorder = self.recorder.as_mut().ok_or_else(|| error("the graph is already finished"))?;
        let index = recorder.input(dtype, Strides { sizes, strides, offset }).map_err(error)?;
        Ok(Ref { index })
    }

    /// Records the overload `op` on `args` and `kwargs` (tensors as `Ref`s); returns its results:
    /// `(Ref, dtype, sizes, strides, offset)` per tensor, Python values for the rest.
    fn call<'py>(
        &mut self,
        py: Python<'py>,
        op: &str,
        args: &Bound<'py, PyTuple>,
        kwargs: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (args, kwargs) = with_device(|device| {
            let args = args.iter().map(|arg| recorder_arg(py, device, &arg)).collect::<PyResult<Vec<_>>>()?;
            let kwargs = kwargs
                .iter()
                .map(|(key, arg)| Ok((key.extract::<String>()?, recorder_arg(py, device, &arg)?)))
                .collect::<PyResult<Vec<_>>>()?;
            Ok((args, kwargs))
        })?;
        let kernel = crate::kernel_for(op)?;
        let recorder = self.recorder.as_mut().ok_or_else(|| error("the graph is already finished"))?;
        let recorded = match kernel {
            Some(kernel) => recorder.call_kernel(op, &kernel, &args, &kwargs),
            None => recorder.call(op, &args, &kwargs),
        }
        .map_err(error)?;
        recorded_to_python(py, recorded)
    }

    /// The program returning `outputs`.
    fn finish(&mut self, outputs: Vec<Bound<'_, PyAny>>) -> PyResult<GraphProgram> {
        let indices = outputs
            .iter()
            .map(|output| {
                output.cast::<Ref>().map(|reference| reference.get().index).map_err(|_| error("outputs are Refs"))
            })
            .collect::<PyResult<Vec<_>>>()?;
        let recorder = self.recorder.take().ok_or_else(|| error("the graph is already finished"))?;
        Ok(GraphProgram { program: recorder.finish(&indices).map_err(error)? })
    }
}

#[pymethods]
impl GraphProgram {
    /// Records the program on `tensors` (ttpu tensors, in its input order); returns its results
    /// as `(handle, sizes, strides, offset, dtype, device)` tuples.
    fn run<'py>(&self, py: Python<'py>, tensors: Vec<Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyList>> {
        let handles = tensors.iter().map(|tensor| handle_of(&tensor.getattr("_h")?)).collect::<PyResult<Vec<_>>>()?;
        let results = backend()?.run_program(&self.program, &handles).map_err(error)?;
        let items = results.into_iter().map(|tensor| tensor_tuple(py, tensor)).collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, items)
    }

    /// How many tensor inputs it takes.
    #[getter]
    fn input_count(&self) -> usize {
        self.program.inputs().len()
    }
}
