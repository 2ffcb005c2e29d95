//! PyTorch's semantics over the ttpu IR, in one place for every frontend.
//!
//! `ttpu-fx` (the `.fx` importer) and `ttpu-eager` (lazy tensors) both turn PyTorch ops into IR
//! through [`ttpu_ir::GraphBuilder`]. What PyTorch decides independently of how an op was written
//! lives here, so a numerics fix is made once and both frontends build the same nodes:
//! - [`promote`]: `torch.result_type` and `torch.promote_types`, and the dtype PyTorch's kernels
//!   compute in ([`promote::opmath`]);
//! - [`graph`]: the small builder steps every decomposition uses (convert, broadcast, splat,
//!   reductions that keep dims, element counts of symbolic dims);
//! - [`decomp`]: the decompositions both frontends need (softmax and log-softmax, layer norm,
//!   GELU, variance and standard deviation with their mean, Python's remainder).
//!
//! Frontend-specific concerns stay in the frontends: argument schemas, names and error locations
//! in `ttpu-fx`, the tape in `ttpu-eager`. Functions here return [`ttpu_ir::InferError`] when the
//! builder refuses an operand; each frontend wraps it with its own location.

#![warn(missing_docs)]

pub mod decomp;
pub mod graph;
pub mod promote;

/// What every builder step here returns.
pub type Built<T = ttpu_ir::ValueId> = Result<T, ttpu_ir::InferError>;
