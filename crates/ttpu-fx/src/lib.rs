//! The frontend of ttpu: `.fx` text (`str(ep)` of a `torch.export.ExportedProgram` after
//! `run_decompositions()`) to a tensor-IR [`Graph`](ttpu_ir::Graph) plus the model's [`ModelSignature`].
//!
//! Two steps: [`parse`] reads the text into a syntax tree ([`ast::Program`]) without knowing any ATen
//! op; [`import`] walks it and decomposes every ATen overload into IR primitives through
//! `ttpu-aten`'s table. This is the only crate that knows the `.fx` grammar.
//! It never panics on input: every error carries `file:line:col`.

#![warn(missing_docs)]
// Errors carry a location plus the offending and expected text: large, but built only on the cold
// path where the import stops. Boxing them would cost every match site for no measurable gain.
#![allow(clippy::result_large_err)]

pub mod ast;
mod import;
mod lexer;
mod parser;

pub use import::{ImportOptions, InputRole, ModelInput, ModelOutput, ModelSignature, Module, OutputRole, import};
pub use parser::parse;
/// `docs/ops.md`'s data: the table's coverage of PyTorch's core overloads.
pub use ttpu_aten::coverage;
pub use ttpu_aten::{DataSize, KernelError, Kernels, supported_ops};
pub use ttpu_aten::{Error, Location, Result};

/// Parses and imports in one step.
pub fn load(source: &str, path: &str, options: &ImportOptions) -> Result<Module> {
    import(&parse(source, path)?, options)
}
