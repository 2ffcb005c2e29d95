//! Errors of the fuse stage. An invalid input is the caller's problem; everything else is a bug.

use ttpu_ir::{InferError, VerifyErrors};

/// What can go wrong in [`crate::fuse`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The input graph does not verify.
    #[error("cannot fuse an invalid graph: {0}")]
    InvalidInput(VerifyErrors),
    /// A node has more than one result; the e-graph models single-result ops only.
    #[error("cannot fuse `{op}`: it has {results} results and fuse handles single-result ops only")]
    MultiResult {
        /// The op mnemonic.
        op: &'static str,
        /// How many results it has.
        results: usize,
    },
    /// An extracted node did not type-check when rebuilt.
    #[error("fuse rebuilt an ill-typed `{op}` (this is a ttpu bug)")]
    Rebuild {
        /// The op mnemonic.
        op: &'static str,
        /// Why inference refused it.
        #[source]
        source: InferError,
    },
    /// The rebuilt graph does not verify.
    #[error("fuse produced an invalid graph (this is a ttpu bug): {0}")]
    Internal(VerifyErrors),
}

/// A `Result` whose error is this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
