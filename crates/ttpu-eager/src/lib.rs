//! Lazy tensors for ttpu, in PyTorch's vocabulary, run through PJRT.
//!
//! Ops on a [`Tensor`] are recorded onto its [`Device`]'s pending tape instead of running
//! ([`Mode::DeferAndFuse`], the default): one compact step per op, no IR yet. When data is
//! needed (`to_vec`, `item`, `to_host`, `materialize`, [`Device::sync`], or the tape passing its
//! op limit), the work of every live pending tensor is taken as one program and looked up in the
//! [`Runtime`]'s LRU compile cache keyed by its structure (optionally backed by disk). Only a miss builds it
//! into IR, fuses it (`ttpu_fuse`, exact rules only), lowers and compiles it. The program runs
//! once and its results stay on the device until read. [`Mode::DeferNever`] launches each op at once instead, for comparison and
//! debugging.
//!
//! ```
//! use ttpu_eager::{Device, Tensor};
//! let device = Device::cpu()?;
//! let x = Tensor::from_slice(&device, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
//! let y = x.mul_scalar(2.0f32)?.add(&x)?.sum(&[1])?;
//! assert!(y.is_pending());
//! assert_eq!(y.to_vec::<f32>()?, vec![18.0, 45.0]);
//! assert_eq!(device.counters().compiles, 1);
//! # Ok::<(), ttpu_eager::Error>(())
//! ```
//!
//! Shape and dtype errors are returned when an op is recorded. Broadcasting and PyTorch type
//! promotion become explicit IR nodes when a program is built. This crate holds no `unsafe` code
//! and knows no ATen or `.fx` name: it builds IR through `ttpu_ir::GraphBuilder` like any
//! frontend.

#![warn(missing_docs)]

mod collective;
mod device;
mod element;
mod error;
mod mesh;
mod promote;
mod tape;
mod tensor;

pub use device::{DEFAULT_PENDING_LIMIT, Device, Mode};
pub use element::Element;
pub use error::{Error, Result};
pub use tape::CallGraph;
pub use tensor::Tensor;
pub use ttpu_ir::{DType, Shape};
pub use ttpu_runtime::{Counters, DEFAULT_CACHE_CAPACITY, HostBuffer, Runtime};
