//! Errors of the driver: each stage's own error, plus the checks on weights and inputs.

/// What went wrong while compiling or running a model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Reading or importing the `.fx` text failed. Boxed: frontend errors carry a location and
    /// texts, and every other result of the driver should not pay for their size.
    #[error(transparent)]
    Frontend(Box<ttpu_fx::Error>),
    /// The e-graph optimizer failed (a ttpu bug: rewrites must keep graphs valid).
    #[error(transparent)]
    Fuse(#[from] ttpu_fuse::Error),
    /// Lowering to StableHLO failed.
    #[error(transparent)]
    Lower(#[from] ttpu_stablehlo::Error),
    /// The runtime failed: the PJRT plugin (its message is passed through), a transfer, a file,
    /// the compile caches.
    #[error(transparent)]
    Runtime(Box<ttpu_runtime::Error>),
    /// A user kernel cannot be registered: its module does not parse or has no usable `@main`,
    /// its name is malformed or taken, or a file of `--kernels` cannot be read.
    #[error("kernel `{name}`: {message}")]
    Kernel {
        /// The kernel (`mylib::foo`), or the file it came from.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// The accuracy mode cannot compare this model (see [`crate::bisect`]).
    #[error("bisect: {message}")]
    Bisect {
        /// Why not.
        message: String,
    },
    /// A pass produced an invalid graph: a bug in ttpu, not in the model.
    #[error("internal error (a ttpu bug) after pass `{pass}`: {errors}")]
    Internal {
        /// The pass.
        pass: &'static str,
        /// What the verifier found.
        errors: ttpu_ir::VerifyErrors,
    },
    /// A tensor the model needs is not in the given file.
    #[error("missing {what} `{key}`: the model expects {expected}")]
    MissingTensor {
        /// `weight` or `input`.
        what: &'static str,
        /// The key.
        key: String,
        /// The type the model expects.
        expected: String,
    },
    /// A file has a tensor the model does not take.
    #[error("unexpected {what} `{key}` ({found}): the model takes {known}")]
    UnexpectedTensor {
        /// `weight` or `input`.
        what: &'static str,
        /// The key.
        key: String,
        /// Its type.
        found: String,
        /// The keys the model takes.
        known: String,
    },
    /// A tensor has the wrong shape or dtype.
    #[error("{what} `{key}`: expected {expected}, found {found}")]
    TensorMismatch {
        /// `weight` or `input`.
        what: &'static str,
        /// The key.
        key: String,
        /// The type the model expects.
        expected: String,
        /// The type given.
        found: String,
    },
    /// An input dim computed from symbols (`2*s0`) does not have the size they give it.
    #[error("`{key}` dim {axis} has size {size}, but `{dim}` is {expected} with {bindings}")]
    ComputedSize {
        /// The input's key.
        key: String,
        /// The dim.
        axis: usize,
        /// Its size in the given tensor.
        size: i64,
        /// The size expression, like `2*s0`.
        dim: String,
        /// What the bound symbols make it.
        expected: i64,
        /// The bindings, like `s0 = 3`.
        bindings: String,
    },
    /// A symbolic dim got a size outside its range, or two inputs disagree on it.
    #[error("symbol `{symbol}` (range {range}): {message}")]
    SymbolSize {
        /// The symbol.
        symbol: String,
        /// Its range, printed like `[2, 1024]`.
        range: String,
        /// What is wrong and which inputs say so.
        message: String,
    },
    /// A weight or buffer key the model does not have.
    #[error("the model has no weight or buffer `{key}`; it has {known}")]
    UnknownState {
        /// The key asked for.
        key: String,
        /// The keys it has.
        known: String,
    },
    /// A replicated run given another number of input sets than the model has replicas.
    #[error("{given} input sets for a model loaded on {replicas} devices: give one per device")]
    ReplicaInputs {
        /// Input sets given.
        given: usize,
        /// Devices the model is on.
        replicas: usize,
    },
    /// Replicas whose input sets give symbolic dims different sizes.
    #[error(
        "replica {replica}'s inputs give sizes {here}, but replica 0's give {first}; one program runs on every device"
    )]
    ReplicaSizes {
        /// The replica that differs.
        replica: usize,
        /// Replica 0's sizes.
        first: String,
        /// This replica's sizes.
        here: String,
    },
    /// A mesh, placement or parallel plan that does not fit the model or the devices.
    #[error("sharding: {message}")]
    Sharding {
        /// What does not fit, naming the tensor.
        message: String,
    },
    /// A joint graph, optimizer or checkpoint that cannot train.
    #[error("training: {message}")]
    Training {
        /// What is wrong.
        message: String,
    },
    /// A module built in Rust (a training step, say) with a symbolic dim: such a module has no
    /// program to import at concrete sizes.
    #[error("input `{key}` has the symbolic type {ty}; a module built in Rust needs static shapes")]
    NotStatic {
        /// The input's key.
        key: String,
        /// Its type.
        ty: String,
    },
    /// A bug in ttpu: something that cannot happen did.
    #[error("internal error (a ttpu bug): {message}")]
    Bug {
        /// What went wrong.
        message: String,
    },
    /// Outputs and expected outputs do not have the same keys, shapes or dtypes.
    #[error("output `{key}`: {message}")]
    Parity {
        /// The key.
        key: String,
        /// What does not match.
        message: String,
    },
}

impl From<ttpu_fx::Error> for Error {
    fn from(error: ttpu_fx::Error) -> Error {
        Error::Frontend(Box::new(error))
    }
}

/// Result of the driver.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<ttpu_runtime::Error> for Error {
    /// Keeps lowering errors in their own variant whichever path met them.
    fn from(error: ttpu_runtime::Error) -> Error {
        match error {
            ttpu_runtime::Error::Lower(error) => Error::Lower(error),
            other => Error::Runtime(Box::new(other)),
        }
    }
}
