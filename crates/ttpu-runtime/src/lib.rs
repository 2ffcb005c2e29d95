//! The runtime of ttpu: PJRT devices, compile caches, device buffers and host tensors.
//!
//! A [`Runtime`] owns one PJRT client and the devices it uses (N CPU devices through the CPU
//! plugin's `cpu_device_count`, or a plugin's addressable devices), an in-memory compile cache
//! keyed through [`ProgramKey`] (the driver keys by IR graph, the eager frontend by its tape),
//! an optional on-disk cache shared across processes (keyed by the exact StableHLO bytes, the
//! compile options and the plugin's identity), and counters. Frontends that share a `Runtime`
//! share its compiles and counters.
//!
//! [`Executable`]s run on one device or replicated on several, and donate the inputs they alias
//! to outputs, so state updated in place (a BatchNorm running mean, a KV cache) is never copied.
//! [`HostTensor`] and the safetensors readers are the data at the edges; this crate also holds
//! the one mapping between IR dtypes, PJRT element types and safetensors dtypes.
//!
//! ```no_run
//! use ttpu_runtime::{CompileSpec, HostTensor, Runtime};
//! # fn main() -> ttpu_runtime::Result<()> {
//! let runtime = Runtime::cpu()?;
//! # let graph: ttpu_ir::Graph = unimplemented!();
//! let executable = runtime.graph_executable(&graph, &CompileSpec::default())?;
//! let x = runtime.upload(&HostTensor::new(ttpu_ir::DType::F32, vec![2], vec![0; 8])?, 0)?;
//! let outputs = executable.run(&[&x])?;
//! println!("{:?}", runtime.download(&outputs[0])?);
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

mod cache;
mod disk;
mod distributed;
mod error;
mod host;
mod runtime;
pub mod shard;

pub use cache::{FxHasher, ProgramKey, graph_hash, same_structure};
pub use disk::DEFAULT_DISK_CACHE_BYTES;
pub use distributed::{DEFAULT_PEER_TIMEOUT, Distributed, GlobalDevice, KEY_PREFIX, devices_key};
pub use error::{Error, Result};
pub use host::{
    HostTensor, TensorMap, byte_size, device_bytes, dtype_from_safetensors, dtype_of_element, element_type, host_bytes,
    read_safetensors, safetensors_dtype, safetensors_from_bytes, write_safetensors, write_safetensors_with_metadata,
};
pub use runtime::{
    CACHE_DIR_ENV_VAR, CacheSource, CompileInfo, CompileSpec, Counters, DEFAULT_CACHE_CAPACITY, Executable,
    NOT_SERIALIZABLE_WITH, Runtime, RuntimeOptions, default_disk_cache_dir,
};
pub use ttpu_pjrt::{
    Buffer, ElementType, FfiBuffer, FfiBufferMut, HostBuffer, HostKernelFn, KvError, KvStore, NamedValue, OptionValue,
    find_plugin, register_host_kernel,
};

/// StableHLO text of a static `graph`, as the runtime lowers programs it compiles.
pub fn lower(graph: &ttpu_ir::Graph) -> Result<String> {
    Ok(ttpu_stablehlo::lower(graph)?)
}
