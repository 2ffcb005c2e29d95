//! `ttpu._ttpu`: the native module of the `ttpu` Python package, a thin binding over the
//! [`ttpu`] library.
//!
//! It converts tensors and errors and nothing else: tensors cross as `(buffer, dtype, shape)`
//! triples (a buffer of raw little-endian bytes, the dtype as the IR spells it, `"f32"`, the
//! shape as a list), so bf16 and complex tensors need no NumPy dtype of their own, and every
//! error is a `ttpu.TtpuError` carrying the Rust message (file:line:col for `.fx` errors). The
//! PyTorch side (export, the Dynamo backend, converting `torch.Tensor`s) is the package's Python
//! code under `python/ttpu/`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use pyo3::buffer::PyBuffer;
use pyo3::create_exception;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyDict, PyList};
use ttpu::{CompileOptions, Compiler, DType, HostTensor, LoadedModel, Runtime, RuntimeOptions, Session, TensorMap};

mod device;
mod distributed;

create_exception!(_ttpu, TtpuError, PyRuntimeError, "An error from ttpu: its message is the Rust error's.");

pub(crate) fn error(error: impl std::fmt::Display) -> PyErr {
    TtpuError::new_err(error.to_string())
}

/// One runtime per plugin file for the whole process: a PJRT plugin is loaded once, and every
/// model on it shares its devices and compile caches. The table is keyed by the file itself, so
/// the default plugin named by its path and left unnamed are one runtime.
fn runtime(plugin: Option<&Path>) -> PyResult<Runtime> {
    static RUNTIMES: OnceLock<Mutex<HashMap<PathBuf, Runtime>>> = OnceLock::new();
    let path = match plugin {
        Some(path) => path.to_path_buf(),
        None => ttpu::find_plugin().map_err(error)?,
    };
    // A file that does not exist keeps its name, so the error below names it.
    let key = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
    let runtimes = RUNTIMES.get_or_init(Default::default);
    let mut runtimes = runtimes.lock().map_err(|_| error("the runtime table was poisoned by a panic"))?;
    if let Some(runtime) = runtimes.get(&key) {
        return Ok(runtime.clone());
    }
    let runtime = Runtime::new(&path, &RuntimeOptions::default()).map_err(error)?;
    // The same compile cache on disk as the CLI's, so a model compiled by either is not compiled
    // again by the other.
    if let Some(dir) = ttpu::default_disk_cache_dir() {
        runtime.set_disk_cache(&dir).map_err(error)?;
    }
    runtimes.insert(key, runtime.clone());
    Ok(runtime)
}

/// The compiler of every model this process loads or lowers: it holds the user kernels
/// registered with `register_kernel`, which the device and its compiled graphs run too
/// ([`kernel_for`]).
fn kernels() -> &'static Mutex<Compiler> {
    static KERNELS: OnceLock<Mutex<Compiler>> = OnceLock::new();
    KERNELS.get_or_init(Default::default)
}

fn compiler() -> PyResult<Compiler> {
    kernels().lock().map(|compiler| compiler.clone()).map_err(|_| error("the kernel registry was poisoned by a panic"))
}

/// The registered kernel that runs the overload `name` on the device and in compiled graphs: that
/// of a custom op (outside `aten` and `prims`) the op table lacks, `mylib.foo.default` for the
/// kernel `mylib::foo` (the table comes first, as in the `.fx` import). Asked of the one registry
/// each time, so a kernel registered after the device started, or after an op was first
/// dispatched, is found.
pub(crate) fn kernel_for(name: &str) -> PyResult<Option<Arc<ttpu_device::Kernel>>> {
    if name.starts_with("aten.") || name.starts_with("prims.") || ttpu_device::table_has(name) {
        return Ok(None);
    }
    let compiler = kernels().lock().map_err(|_| error("the kernel registry was poisoned by a panic"))?;
    Ok(compiler.kernels().for_overload(name).cloned())
}

/// Registers the custom op `name` (`mylib::foo`) with a StableHLO module (MLIR text in generic op
/// form, public `@main`) as its implementation, for every model loaded or lowered from now on and
/// for its calls on the `"ttpu"` device and in graphs compiled for it.
#[pyfunction]
fn register_kernel(name: &str, module: &str) -> PyResult<()> {
    let mut compiler = kernels().lock().map_err(|_| error("the kernel registry was poisoned by a panic"))?;
    compiler.register_kernel(name, module).map_err(error)
}

/// The names of the registered kernels, in registration order.
#[pyfunction]
fn registered_kernels() -> PyResult<Vec<String>> {
    Ok(compiler()?.kernels().iter().map(|kernel| kernel.name.to_string()).collect())
}

/// Starts recording ttpu's spans for a Chrome trace (see `ttpu.profile`).
#[pyfunction]
fn trace_start() -> PyResult<()> {
    ttpu::profile::start_global().map(|_| ()).map_err(error)
}

/// Stops the recording and writes it to `path`; returns the number of spans.
#[pyfunction]
fn trace_stop(py: Python<'_>, path: PathBuf) -> PyResult<usize> {
    let recorder = ttpu::profile::stop_global().ok_or_else(|| error("no ttpu profile is recording"))?;
    py.detach(|| recorder.write(&path)).map_err(|io| error(format!("{}: {io}", path.display())))?;
    Ok(recorder.event_count())
}

/// A tensor from Python: raw bytes (any object with the buffer protocol, read as bytes), the
/// dtype's IR name and the shape.
type TensorArg = (PyBuffer<u8>, String, Vec<i64>);

fn host_tensor(py: Python<'_>, key: &str, (buffer, dtype, shape): TensorArg) -> PyResult<HostTensor> {
    let dtype: DType = dtype.parse().map_err(|_| error(format!("tensor `{key}`: unknown dtype `{dtype}`")))?;
    let data = buffer.to_vec(py)?;
    HostTensor::new(dtype, shape, data).map_err(|message| error(format!("tensor `{key}`: {message}")))
}

fn tensor_map(py: Python<'_>, tensors: HashMap<String, TensorArg>) -> PyResult<TensorMap> {
    let mut map = TensorMap::new();
    // Sorted, so errors about several tensors name the same one first on every run.
    let mut tensors: Vec<_> = tensors.into_iter().collect();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    for (key, tensor) in tensors {
        let tensor = host_tensor(py, &key, tensor)?;
        map.insert(key, tensor);
    }
    Ok(map)
}

fn to_python<'py>(py: Python<'py>, tensors: TensorMap) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (key, tensor) in tensors {
        dict.set_item(key, wire(py, &tensor)?)?;
    }
    Ok(dict)
}

/// `tensor` as `(bytearray, dtype, shape)`. A bytearray, not bytes: `torch.frombuffer` then wraps
/// it without a copy or a warning.
fn wire<'py>(py: Python<'py>, tensor: &HostTensor) -> PyResult<Bound<'py, PyAny>> {
    let data = PyByteArray::new(py, &tensor.data);
    Ok((data, tensor.dtype.name(), PyList::new(py, &tensor.shape)?).into_pyobject(py)?.into_any())
}

/// How a model is compiled: the CLI's `--no-fuse`, `--fast-math` and `--no-weight-prep`.
fn compile_options(fuse: bool, fast_math: bool, prepare_weights: bool) -> PyResult<CompileOptions> {
    if fast_math && !fuse {
        return Err(error("fast_math needs the optimizer: it cannot be combined with fuse=False"));
    }
    let mut options = CompileOptions { prepare_weights, ..CompileOptions::default() };
    if !fuse {
        options.fuse = None;
    }
    if let Some(fuse) = options.fuse.as_mut() {
        fuse.fast_math = fast_math;
    }
    Ok(options)
}

/// A model whose weights stay on the device: `run` uploads only the inputs.
#[pyclass(frozen, module = "ttpu._ttpu")]
struct Model {
    loaded: LoadedModel,
    platform: String,
}

#[pymethods]
impl Model {
    /// Runs the model on `inputs` (by placeholder name) and returns its outputs: `output_0`, ...
    /// in pytree order, and the new values of mutated buffers and inputs under their targets.
    /// The interpreter lock is released while the device works.
    fn run<'py>(&self, py: Python<'py>, inputs: HashMap<String, TensorArg>) -> PyResult<Bound<'py, PyDict>> {
        let inputs = tensor_map(py, inputs)?;
        let outputs = py.detach(|| self.loaded.run(&inputs)).map_err(error)?;
        to_python(py, outputs)
    }

    /// The user inputs in graph order, as `(placeholder name, type)` with the type as the IR
    /// prints it (`f32[s0, 8]`).
    #[getter]
    fn inputs(&self) -> Vec<(String, String)> {
        let signature = self.loaded.model().signature();
        signature
            .inputs
            .iter()
            .filter(|input| matches!(input.role, ttpu::InputRole::UserInput))
            .map(|input| (input.key.clone(), input.ty.to_string()))
            .collect()
    }

    /// The weights the model holds (parameters, buffers and constants), by signature target.
    #[getter]
    fn weights(&self) -> Vec<String> {
        let signature = self.loaded.model().signature();
        signature
            .inputs
            .iter()
            .filter(|input| !matches!(input.role, ttpu::InputRole::UserInput))
            .map(|input| input.key.clone())
            .collect()
    }

    /// The output keys in graph order (mutations first, then `output_0`, ...).
    #[getter]
    fn outputs(&self) -> Vec<String> {
        self.loaded.model().signature().outputs.iter().map(|output| output.key.clone()).collect()
    }

    /// The plugin's platform, like `cpu (PJRT C API 0.115)`.
    #[getter]
    fn platform(&self) -> &str {
        &self.platform
    }

    /// How many executables this model has compiled (one per size its symbolic dims took).
    #[getter]
    fn compile_count(&self) -> usize {
        self.loaded.model().compile_count()
    }

    /// The value of a buffer the model keeps on the device (mutated buffers change with runs).
    fn state<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Bound<'py, PyAny>> {
        let tensor = py.detach(|| self.loaded.state(key, 0)).map_err(error)?;
        wire(py, &tensor)
    }
}

/// Parses and imports the `.fx` program `source` (`path` names it in errors), uploads its weights
/// (by signature target: `weights`, or the safetensors file `weights_file`) to the plugin's first
/// device and returns the resident [`Model`].
#[pyfunction]
#[pyo3(signature = (source, path, weights=None, weights_file=None, plugin=None, fuse=true, fast_math=false, prepare_weights=true))]
#[allow(clippy::too_many_arguments)] // Python keyword arguments, each with its default.
fn load(
    py: Python<'_>,
    source: &str,
    path: &str,
    weights: Option<HashMap<String, TensorArg>>,
    weights_file: Option<PathBuf>,
    plugin: Option<PathBuf>,
    fuse: bool,
    fast_math: bool,
    prepare_weights: bool,
) -> PyResult<Model> {
    let weights = match (weights, weights_file) {
        (Some(_), Some(_)) => return Err(error("give weights or weights_file, not both")),
        (Some(weights), None) => tensor_map(py, weights)?,
        (None, Some(file)) => py.detach(|| ttpu::read_safetensors(&file)).map_err(error)?,
        (None, None) => TensorMap::new(),
    };
    let options = compile_options(fuse, fast_math, prepare_weights)?;
    let runtime = runtime(plugin.as_deref())?;
    let platform = runtime.platform();
    let compiler = compiler()?;
    let loaded = py
        .detach(|| {
            let mut session = Session::with_runtime(runtime);
            *session.compiler_mut() = compiler;
            session.set_compile_options(options);
            session.load(source, path, &weights)
        })
        .map_err(error)?;
    Ok(Model { loaded, platform })
}

/// The StableHLO text of the `.fx` program `source`, as `ttpu lower` prints it (symbolic dims
/// stay symbolic).
#[pyfunction]
#[pyo3(signature = (source, path, fuse=true, fast_math=false))]
fn lower(py: Python<'_>, source: &str, path: &str, fuse: bool, fast_math: bool) -> PyResult<String> {
    let options = compile_options(fuse, fast_math, true)?;
    let compiler = compiler()?;
    py.detach(|| compiler.compile(source, path, &options)).map(|compiled| compiled.stablehlo).map_err(error)
}

/// Writes `tensors` to the safetensors file `path`, as the CLI reads weights and inputs.
#[pyfunction]
fn write_safetensors(py: Python<'_>, path: PathBuf, tensors: HashMap<String, TensorArg>) -> PyResult<()> {
    let tensors = tensor_map(py, tensors)?;
    py.detach(|| ttpu::write_safetensors(&path, &tensors)).map_err(error)
}

/// The tensors of the safetensors file `path`, by key.
#[pyfunction]
fn read_safetensors<'py>(py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyDict>> {
    let tensors = py.detach(|| ttpu::read_safetensors(&path)).map_err(error)?;
    to_python(py, tensors)
}

/// The plugin the library uses when given none, as the CLI finds it (`$TTPU_PJRT_PLUGIN`, else the
/// one `cargo xtask setup` installed), or `None` when neither is there.
#[pyfunction]
fn configured_plugin() -> Option<String> {
    ttpu::find_plugin().ok().map(|path| path.display().to_string())
}

#[pymodule]
fn _ttpu(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add("TtpuError", module.py().get_type::<TtpuError>())?;
    module.add("TtpuIndexError", device::index_error_class(module.py())?)?;
    module.add_class::<Model>()?;
    module.add_function(wrap_pyfunction!(load, module)?)?;
    module.add_function(wrap_pyfunction!(lower, module)?)?;
    module.add_function(wrap_pyfunction!(configured_plugin, module)?)?;
    module.add_function(wrap_pyfunction!(write_safetensors, module)?)?;
    module.add_function(wrap_pyfunction!(read_safetensors, module)?)?;
    module.add_function(wrap_pyfunction!(register_kernel, module)?)?;
    module.add_function(wrap_pyfunction!(registered_kernels, module)?)?;
    module.add_function(wrap_pyfunction!(trace_start, module)?)?;
    module.add_function(wrap_pyfunction!(trace_stop, module)?)?;
    module.add_class::<device::Handle>()?;
    module.add_class::<device::Ref>()?;
    module.add_class::<device::GraphRecorder>()?;
    module.add_class::<device::GraphProgram>()?;
    for function in [
        wrap_pyfunction!(device::device_init, module)?,
        wrap_pyfunction!(device::device_register, module)?,
        wrap_pyfunction!(device::device_dispatch, module)?,
        wrap_pyfunction!(device::device_upload, module)?,
        wrap_pyfunction!(device::device_read, module)?,
        wrap_pyfunction!(device::device_to, module)?,
        wrap_pyfunction!(device::device_rebind, module)?,
        wrap_pyfunction!(device::device_storage, module)?,
        wrap_pyfunction!(device::device_synchronize, module)?,
        wrap_pyfunction!(device::device_set_mode, module)?,
        wrap_pyfunction!(device::device_mode, module)?,
        wrap_pyfunction!(device::device_manual_seed, module)?,
        wrap_pyfunction!(device::device_rng_state, module)?,
        wrap_pyfunction!(device::device_set_rng_state, module)?,
        wrap_pyfunction!(device::device_count_fallback, module)?,
        wrap_pyfunction!(device::device_stats, module)?,
        wrap_pyfunction!(device::device_memory, module)?,
        wrap_pyfunction!(device::device_reset_peak, module)?,
        wrap_pyfunction!(device::table_has, module)?,
        wrap_pyfunction!(distributed::device_count_collective, module)?,
        wrap_pyfunction!(distributed::device_collective, module)?,
        wrap_pyfunction!(distributed::device_runtime_index, module)?,
        wrap_pyfunction!(distributed::device_count_backend_call, module)?,
        wrap_pyfunction!(distributed::device_collective_stats, module)?,
        wrap_pyfunction!(distributed::device_set_flush_log, module)?,
        wrap_pyfunction!(distributed::device_take_flush_log, module)?,
        wrap_pyfunction!(distributed::device_storage_resize, module)?,
        wrap_pyfunction!(distributed::device_set_mesh, module)?,
        wrap_pyfunction!(distributed::device_mark_sharding, module)?,
        wrap_pyfunction!(distributed::device_sharding, module)?,
        wrap_pyfunction!(distributed::device_resident_bytes, module)?,
        wrap_pyfunction!(distributed::plan_placement, module)?,
    ] {
        module.add_function(function)?;
    }
    Ok(())
}
