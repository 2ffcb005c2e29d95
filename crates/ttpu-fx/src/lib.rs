//! The frontend of ttpu: `.fx` text (`str(ep)` of a `torch.export.ExportedProgram` after
//! `run_decompositions()`) to a tensor-IR [`Graph`](ttpu_ir::Graph) plus the model's [`ModelSignature`].
//!
//! Two steps: [`parse`] reads the text into a syntax tree ([`ast::Program`]) without knowing any ATen
//! op; [`import`] walks it and decomposes every ATen overload into IR primitives through the table
//! in `import/ops`. This is the only crate that knows ATen names or the `.fx` grammar.
//! It never panics on input: every error carries `file:line:col`.

#![warn(missing_docs)]
// Errors carry a location plus the offending and expected text: large, but built only on the cold
// path where the import stops. Boxing them would cost every match site for no measurable gain.
#![allow(clippy::result_large_err)]

pub mod ast;
pub mod coverage;
mod error;
mod import;
mod lexer;
mod parser;

pub use error::{Error, Location, Result};
pub use import::{
    DataSize, ImportOptions, InputRole, ModelInput, ModelOutput, ModelSignature, Module, OutputRole, import,
    supported_ops,
};
pub use parser::parse;

/// Parses and imports in one step.
pub fn load(source: &str, path: &str, options: &ImportOptions) -> Result<Module> {
    import(&parse(source, path)?, options)
}
