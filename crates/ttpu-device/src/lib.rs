//! The ttpu device for PyTorch: what `model.to("ttpu")` runs on, below PyTorch's autograd.
//!
//! PyTorch dispatches each ATen call on a ttpu tensor to the [`Backend`] (through the Python
//! package's `__torch_dispatch__`), after autograd, so `loss.backward()` and `torch.optim` arrive
//! as ordinary ATen calls. Each call is built by the op table's eager entry point
//! (`ttpu_aten::eager`), the table `.fx` programs are imported with, so a call computes the same
//! bits on the device as in an exported program. Calls are recorded on the lazy tape of their
//! device (`ttpu_eager`) and run as one fused program at a host read or a flush (DeferAndFuse),
//! or one by one ([`Mode::DeferNever`]).
//!
//! PyTorch's aliasing is kept in [`DeviceTensor`]s: a storage shared by views, views as chains of
//! view calls, and mutations written back through the chain (`tensor`), so an in-place op on a
//! view reaches its base and an older view sees a later write. Python floats and random keys
//! are inputs of the programs, not constants, so a training loop compiles a few programs, not
//! one per step; a buffer no tensor holds any more is donated to the program that replaces it.
//!
//! This crate knows ATen overloads only through the table's eager entry point and what PyTorch
//! says of an overload ([`OpKind`]); it holds no op semantics of its own.
//!
//! A custom op (`mylib.foo.default`) runs the user kernel its caller registers for it
//! ([`Backend::register_kernel`], [`Recorder::call_kernel`]): the table's eager entry point builds
//! the call into one `kernel` node (`ttpu_aten::eager::build_kernel`), which is recorded and fused
//! like any other call.
//!
//! An index PyTorch would refuse (`embedding`, `gather`, `x[idx]`, scatters) is checked beside
//! its call and raised at the next host read (`checks`), as CUDA raises a device-side assert.

#![warn(missing_docs)]

mod backend;
mod checks;
mod collective;
mod error;
mod graph;
mod memo;
mod spmd;
mod tensor;

pub use backend::{Backend, HostTensor, Mode, OpId, OpKind, OpSpec, Returned, Stats, Value};
pub use collective::{CollectiveStats, FlushRecord};
pub use error::{Error, Result};
pub use graph::{Program, Recorded, Recorder};
pub use tensor::{DeviceTensor, Meta};
pub use ttpu_aten::eager::{Arg, Strides};

/// Whether the op table has the overload `name` (`aten.add.Tensor`).
pub fn table_has(name: &str) -> bool {
    ttpu_aten::eager::lookup(name).is_some()
}
pub use ttpu_ir::{Collective, DType, Kernel, KernelBody, Mesh, ReduceKind, Shape, Sharding, TensorType};
pub use ttpu_runtime::Runtime;
