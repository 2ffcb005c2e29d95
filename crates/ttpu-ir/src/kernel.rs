//! User kernels: ops outside the closed set, implemented by the user and opaque to every pass.
//!
//! A [`Kernel`] is one user op (`mylib::foo`, as `torch.library` names it) with fixed operand and
//! result types and a body the IR never looks into: a StableHLO module that lowering inlines as
//! private functions, or a host function that the runtime registers with the plugin as an XLA FFI
//! handler. The node holding it ([`crate::Op::Kernel`]) has one result per kernel result; no
//! rewrite reads through it, and it hashes and compares by name, types and body bytes, so two
//! programs that differ only in a kernel's text never share a compile.

use std::fmt;
use std::sync::Arc;

use crate::TensorType;

/// A user op: its name, its types and how it computes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Kernel {
    /// `namespace::name`, as `torch.library` spells the op (`mylib::foo`).
    pub name: Arc<str>,
    /// The operand types, in order (static shapes).
    pub inputs: Vec<TensorType>,
    /// The result types, in order (static shapes, at least one).
    pub results: Vec<TensorType>,
    /// How the kernel computes.
    pub body: KernelBody,
}

/// The implementation of a [`Kernel`].
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum KernelBody {
    /// A StableHLO module (MLIR text) whose public function `@main` takes the inputs and returns
    /// the results; its functions are inlined into the program as private functions.
    StableHlo(Arc<str>),
    /// A host function that the runtime registers as an XLA FFI handler, called through
    /// `stablehlo.custom_call` with the typed FFI API (the kernel's name is an attribute of the
    /// call, so one handler serves every host kernel).
    Host,
}

impl fmt::Debug for KernelBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // A module can be long; its size says enough in a debug print.
            KernelBody::StableHlo(text) => write!(f, "StableHlo({} bytes)", text.len()),
            KernelBody::Host => f.write_str("Host"),
        }
    }
}

impl Kernel {
    /// The mnemonic-like spelling of the body kind in IR text and messages.
    pub fn kind(&self) -> &'static str {
        match self.body {
            KernelBody::StableHlo(_) => "stablehlo",
            KernelBody::Host => "host",
        }
    }
}
