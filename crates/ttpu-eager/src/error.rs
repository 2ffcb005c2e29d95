//! Errors of the eager API.
//!
//! Shape and dtype problems are found when an op is recorded, so they surface at the call that
//! caused them, not later when data is read. Errors from the layers below (inference, lowering,
//! the PJRT plugin) are kept whole as sources.

use ttpu_ir::{DType, Shape};

/// Result with this crate's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong when recording or running eager tensor ops.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The runtime failed: the PJRT plugin (or a missing one, whose message says to run
    /// `cargo xtask setup`), lowering, or a transfer.
    #[error(transparent)]
    Runtime(#[from] ttpu_runtime::Error),
    /// The IR builder refused an op (a bug of this crate's own checks when it happens).
    #[error(transparent)]
    Infer(#[from] ttpu_ir::InferError),
    /// Two shapes do not broadcast.
    #[error("shapes {lhs} and {rhs} cannot be broadcast: size {lhs_size} does not match size {rhs_size}")]
    Broadcast {
        /// First shape.
        lhs: Box<Shape>,
        /// Second shape.
        rhs: Box<Shape>,
        /// The size of `lhs` at the first dim that does not match, counted from the right.
        lhs_size: i64,
        /// The size of `rhs` at that dim.
        rhs_size: i64,
    },
    /// A dim index outside `[-rank, rank)`.
    #[error("dim {dim} is out of range for a tensor of rank {rank}")]
    DimOutOfRange {
        /// The dim given.
        dim: i64,
        /// Rank of the tensor.
        rank: usize,
    },
    /// A dim listed twice.
    #[error("dim {dim} appears more than once")]
    RepeatedDim {
        /// The repeated dim, normalised.
        dim: i64,
    },
    /// The data does not have as many elements as the shape needs.
    #[error("shape {shape} needs {expected} elements, found {actual}")]
    DataLength {
        /// The requested shape.
        shape: Box<Shape>,
        /// Elements the shape needs.
        expected: usize,
        /// Elements given.
        actual: usize,
    },
    /// A shape with a negative size, or one too large to address.
    #[error("invalid shape {dims:?}")]
    InvalidShape {
        /// The dims given.
        dims: Vec<i64>,
    },
    /// `reshape` to a shape with another number of elements.
    #[error("cannot reshape {from} into {to:?}")]
    Reshape {
        /// The tensor's shape.
        from: Box<Shape>,
        /// The requested dims.
        to: Vec<i64>,
    },
    /// `permute` with something that is not a permutation of the dims.
    #[error("{permutation:?} is not a permutation of the dims of a tensor of rank {rank}")]
    Permutation {
        /// The order given.
        permutation: Vec<i64>,
        /// Rank of the tensor.
        rank: usize,
    },
    /// `matmul` operands whose contracted sizes differ, or that are scalars.
    #[error("matmul: shapes {lhs} and {rhs} cannot be multiplied")]
    Matmul {
        /// Left shape.
        lhs: Box<Shape>,
        /// Right shape.
        rhs: Box<Shape>,
    },
    /// `layer_norm` whose normalized shape is not the input's trailing dims, or whose weight or
    /// bias has another shape.
    #[error("layer_norm: normalized shape {normalized_shape:?} does not fit shape {shape}")]
    NormalizedShape {
        /// The normalized shape given.
        normalized_shape: Vec<i64>,
        /// The shape that does not fit.
        shape: Box<Shape>,
    },
    /// `slice` with a step below 1.
    #[error("slice step must be positive, found {step}")]
    SliceStep {
        /// The step given.
        step: i64,
    },
    /// `cat` of tensors whose other dims differ, or of no tensor at all.
    #[error("cat: {message}")]
    Cat {
        /// What is wrong.
        message: String,
    },
    /// `stack` of tensors whose shapes differ, or of no tensor at all.
    #[error("stack: {message}")]
    Stack {
        /// What is wrong.
        message: String,
    },
    /// `expand` (or `broadcast_to`) to sizes the tensor cannot stretch to: fewer dims than it
    /// has, a size other than 1 that differs, or `-1` for a new dim.
    #[error("cannot expand shape {from} to {to:?}")]
    Expand {
        /// The tensor's shape.
        from: Box<Shape>,
        /// The requested sizes.
        to: Vec<i64>,
    },
    /// `flatten` whose start dim comes after its end dim.
    #[error("flatten: start dim {start_dim} comes after end dim {end_dim}")]
    Flatten {
        /// The start dim given.
        start_dim: i64,
        /// The end dim given.
        end_dim: i64,
    },
    /// `clamp` with neither bound.
    #[error("clamp: at least one of `min` and `max` must be given")]
    ClampWithoutBounds,
    /// `argmax`/`argmin` over a dim (or a whole tensor) without elements: there is no index
    /// to return.
    #[error("{op}: cannot reduce an empty dim of shape {shape}")]
    EmptyReduction {
        /// The op, in PyTorch's spelling.
        op: &'static str,
        /// The tensor's shape.
        shape: Box<Shape>,
    },
    /// `linear` whose input's last dim is not the weight's last dim, or whose weight is not a
    /// matrix or vector.
    #[error("linear: input of shape {input} does not fit weight of shape {weight}")]
    Linear {
        /// The input's shape.
        input: Box<Shape>,
        /// The weight's shape.
        weight: Box<Shape>,
    },
    /// `linear` with a bias that does not broadcast to the output.
    #[error("linear: bias of shape {bias} does not broadcast to the output shape {output}")]
    LinearBias {
        /// The bias's shape.
        bias: Box<Shape>,
        /// The shape of `input @ weight^T`.
        output: Box<Shape>,
    },
    /// An index tensor of the wrong dtype or rank, or an input it cannot index
    /// (`index_select`, `gather`, `embedding`).
    #[error("{op}: {message}")]
    Index {
        /// The op, in PyTorch's spelling.
        op: &'static str,
        /// What is wrong.
        message: String,
    },
    /// `arange` bounds and step that describe no sequence.
    #[error("arange: {message}")]
    Arange {
        /// What is wrong.
        message: String,
    },
    /// An op not defined for a dtype (`neg` of bool, `sum` of ...).
    #[error("`{op}` is not defined for {dtype}")]
    UnsupportedDType {
        /// The op, in PyTorch's spelling.
        op: &'static str,
        /// The offending dtype.
        dtype: DType,
    },
    /// Reading a tensor as another element type than it holds.
    #[error("tensor holds {actual}, not {requested}")]
    DTypeMismatch {
        /// The tensor's dtype.
        actual: DType,
        /// The dtype asked for.
        requested: DType,
    },
    /// `item` on a tensor that does not hold exactly one element.
    #[error("item: tensor of shape {shape} does not hold exactly one element")]
    NotOneElement {
        /// The tensor's shape.
        shape: Box<Shape>,
    },
    /// A mesh that does not fit its devices, or a sharding that does not fit the mesh.
    #[error("mesh: {message}")]
    Mesh {
        /// What is wrong.
        message: String,
    },
    /// Safetensors bytes that do not parse, or hold a dtype ttpu has no tensor for.
    #[error("safetensors: {message}")]
    Safetensors {
        /// What is wrong.
        message: String,
    },
    /// A graph called on operands that do not fit its inputs.
    #[error("call: {message}")]
    CallOperands {
        /// Which operand, and what was expected.
        message: String,
    },
    /// Tensors of two devices in one op.
    #[error("tensors live on different devices")]
    DeviceMismatch,
    /// Another thread panicked while holding the device's state.
    #[error("device state is poisoned: another thread panicked while using it")]
    Poisoned,
    /// A bug in this crate: something that cannot happen did.
    #[error("internal error in ttpu-eager (this is a bug): {message}")]
    Internal {
        /// What went wrong.
        message: String,
    },
}

impl Error {
    pub(crate) fn internal(message: impl Into<String>) -> Error {
        Error::Internal { message: message.into() }
    }
}

impl<T> From<std::sync::PoisonError<T>> for Error {
    fn from(_: std::sync::PoisonError<T>) -> Error {
        Error::Poisoned
    }
}
