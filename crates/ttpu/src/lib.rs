//! The ttpu driver: compiles PyTorch programs exported as `.fx` text to StableHLO and runs them on
//! any PJRT plugin.
//!
//! ```no_run
//! use ttpu::{Session, read_safetensors};
//! # fn main() -> ttpu::Result<()> {
//! let session = Session::from_plugin_or_default(None)?;
//! let source = std::fs::read_to_string("fixtures/mlp/model.fx").expect("fixture exists");
//! let model = session.load_model(&source, "fixtures/mlp/model.fx")?;
//! let weights = read_safetensors("fixtures/mlp/weights.safetensors".as_ref())?;
//! let inputs = read_safetensors("fixtures/mlp/inputs.safetensors".as_ref())?;
//! let outputs = session.run(&model, &weights, &inputs)?;
//! println!("{:?}", outputs["output_0"].shape);
//! # Ok(()) }
//! ```
//!
//! [`Compiler`] needs no device: it turns `.fx` text into IR and StableHLO text. [`Session`] adds a
//! [`Runtime`] (a PJRT plugin's devices and compile caches) and runs models at any size their
//! symbolic dims allow; [`Session::load`] keeps a model's weights on its devices
//! ([`LoadedModel`]), so each run uploads only its inputs and mutated buffers update in place.

#![warn(missing_docs)]

pub mod bisect;
mod compiler;
mod conv;
mod error;
mod layout;
mod loaded;
pub mod parallel;
pub mod parity;
pub mod pipeline;
mod prepare;
pub mod profile;
mod session;
pub mod train;

pub use compiler::{CompileOptions, Compiled, Compiler};
pub use error::{Error, Result};
pub use loaded::{DeviceOutputs, LoadedModel, Prepared};
pub use parallel::{Parallelism, Plan, PlanFile};
pub use profile::{TraceRecorder, Work, estimate_work};
pub use session::{Bucketing, Model, Session};
pub use train::{AdamW, Optimizer, Sgd, Trainer};
pub use ttpu_dist::Launch;
pub use ttpu_fx::{InputRole, ModelInput, ModelOutput, ModelSignature, OutputRole};
pub use ttpu_ir::DType;
pub use ttpu_ir::{Mesh, Sharding};
pub use ttpu_runtime::{
    CacheSource, CompileInfo, Counters, Distributed, FfiBuffer, FfiBufferMut, HostKernelFn, HostTensor, KvError,
    KvStore, OptionValue, Runtime, RuntimeOptions, TensorMap, default_disk_cache_dir, find_plugin, read_safetensors,
    write_safetensors,
};
