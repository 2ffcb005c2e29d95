//! The ATen op table of ttpu: every supported PyTorch overload, how a call's arguments bind to its
//! parameters, and the decomposition that builds its IR, with PyTorch's semantics.
//!
//! One table serves every way a PyTorch program reaches ttpu: `.fx` text (`ttpu-fx` parses it
//! and walks its nodes), FX graphs handed over by Dynamo and AOTAutograd, and ops dispatched by
//! PyTorch on the ttpu device. Each of those frontends is a thin adapter that resolves its own
//! syntax to [`Val`]s, binds them with [`args::bind`] and runs the overload's [`ops::OpDef`] in a
//! decomposition context ([`Cx`]). So an op supported in one frontend is supported in all of them, with the
//! same numerics, and `docs/ops.md` ([`coverage`]) is the one list.
//!
//! Decompositions build IR through `ttpu_ir::GraphBuilder`; type promotion, opmath and the
//! decompositions shared with `ttpu-eager`'s own tensors come from `ttpu-torch`.
//! Nothing here panics on input: every error is located (`path:line:col`) at the call.

#![warn(missing_docs)]
// Errors carry a location plus the offending and expected text: large, but built only on the cold
// path where an import stops. Boxing them would cost every match site for no measurable gain.
#![allow(clippy::result_large_err)]

pub mod args;
pub mod bounds;
pub mod coverage;
pub mod ctx;
pub mod eager;
mod error;
pub mod kernels;
pub mod ops;
pub mod storage;
pub mod sym;

pub use args::Val;
pub use ctx::{Cx, Imported, Site};
pub use error::{Error, Location, Result, Span};
pub use kernels::{KernelError, Kernels};
pub use sym::SymExpr;
/// PyTorch's type promotion, shared with every frontend.
pub use ttpu_torch::promote;

/// A size the data decides: a symbol (PyTorch's unbacked `u0`) defined by a node such as
/// `nonzero`, `masked_select`, `unique` or `.item()` (`_local_scalar_dense`).
#[derive(Clone, Debug, PartialEq)]
pub struct DataSize {
    /// The symbol (`u0`).
    pub symbol: String,
    /// The node that defines it.
    pub node: String,
    /// That node's op.
    pub op: String,
    /// What the size is, in words ("the number of nonzero elements").
    pub what: String,
    /// Where the node is.
    pub at: Location,
}

impl std::fmt::Display for DataSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` ({}) at node `{}` ({}, {})", self.symbol, self.what, self.node, self.op, self.at)
    }
}

/// Every ATen overload that has a decomposition, sorted.
pub fn supported_ops() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = ops::TABLE.iter().map(|def| def.name).collect();
    names.sort_unstable();
    names
}
