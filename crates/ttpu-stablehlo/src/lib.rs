//! Lowers a [`ttpu_ir::Graph`] to StableHLO module text through MLIR (via `melior`).
//!
//! The result is one `func.func @main` whose arguments and results are the graph's inputs and
//! outputs, each IR node becoming one StableHLO op (plus the scalar init constant of a reduction).
//!
//! ```
//! use ttpu_ir::{BinaryOp, DType, GraphBuilder, TensorType};
//! let mut builder = GraphBuilder::new();
//! let x = builder.input(TensorType::from_static(DType::F32, &[2, 3]), Some("x".into()));
//! let doubled = builder.binary(BinaryOp::Add, x, x).unwrap();
//! let text = ttpu_stablehlo::lower(&builder.finish(&[doubled])).unwrap();
//! assert!(text.contains(r#""stablehlo.add"(%arg0, %arg0) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>"#));
//! ```
//!
//! melior ships no StableHLO dialect, so StableHLO ops are built in MLIR's generic form with
//! unregistered dialects allowed, and StableHLO's structured attributes (`#stablehlo.dot<...>`,
//! `#stablehlo<comparison_direction GT>`, ...) are parsed as opaque dialect attributes. The MLIR
//! printer writes unregistered ops in generic form, which every StableHLO parser (XLA's
//! included) reads. Only `func`/`builtin` are real registered dialects here, so MLIR's verifier
//! checks structure (SSA, function signature against `return`) while StableHLO's own
//! constraints are this crate's responsibility: attribute formats follow the StableHLO dialect,
//! and the IR's inference already refuses the dtypes StableHLO does not define an op on.
//!
//! No `melior` type appears in the public API: callers get text or an [`Error`].

#![warn(missing_docs)]

mod complex32;
mod context;
mod kernel;
mod lower;
mod ops;
mod types;

pub use kernel::{HOST_KERNEL_TARGET, KernelSignature, kernel_signature};
use ttpu_ir::{Graph, TensorType, ValueId, VerifyErrors};

/// Why a graph could not be lowered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A value has a symbolic dim and the options ask for static shapes.
    #[error("value {value} has the symbolic type {ty}: give the symbols values, or lower shape-polymorphic")]
    DynamicDims {
        /// The first value (inputs first, then node results in order) with a symbolic dim.
        value: ValueId,
        /// Its type.
        ty: TensorType,
    },
    /// A symbol is not the size of any input dim, so a shape-polymorphic module cannot compute it.
    #[error("symbol `{symbol}` is not the size of any input dim, so the module cannot compute it at run time")]
    UnboundSymbol {
        /// The symbol.
        symbol: String,
    },
    /// The graph breaks the IR's own invariants (`ttpu_ir::verify`).
    #[error(transparent)]
    InvalidGraph(#[from] VerifyErrors),
    /// MLIR's verifier rejected the module; `message` holds its diagnostics.
    #[error("MLIR verification failed: {message}")]
    Verify {
        /// MLIR's diagnostics, one per line, each prefixed by its location.
        message: String,
    },
    /// A [`LowerOptions::sharding`] that does not fit the graph.
    #[error("sharding: {message}")]
    Sharding {
        /// What does not fit.
        message: String,
    },
    /// An input-output alias of [`LowerOptions::aliases`] that cannot hold.
    #[error("cannot alias input {input} to output {output}: {message}")]
    Alias {
        /// The input.
        input: usize,
        /// The output.
        output: usize,
        /// Why not.
        message: String,
    },
    /// A user kernel's StableHLO module that cannot be used: it does not parse, holds more than
    /// functions, has no public `@main`, or its types are not the kernel's.
    #[error("{message}")]
    KernelModule {
        /// What is wrong, naming the kernel where one is known.
        message: String,
    },
    /// An op on `complex32` values that a program, holding them as `complex<f32>` rounded to
    /// halves, cannot compute as PyTorch does.
    #[error("`{op}` of complex32 is not supported: {reason}")]
    Complex32 {
        /// The op's mnemonic.
        op: &'static str,
        /// Why not.
        reason: &'static str,
    },
    /// A bug in this crate (an attribute that did not parse, an op MLIR refused to create).
    #[error("internal error while lowering to StableHLO: {message}")]
    Internal {
        /// What went wrong, with MLIR's diagnostics when there were any.
        message: String,
    },
}

/// Options of [`lower_with`]. `LowerOptions::default()` is what [`lower`] uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LowerOptions {
    /// Print each op's location (`loc("addmm_1"("aten.addmm.default @ model.fx:12"))`). Off by
    /// default so snapshot text stays stable and readable; the locations are attached either
    /// way.
    pub debug_locations: bool,
    /// Print `module`/`func.func`/`func.return` in generic form too. StableHLO ops are always
    /// generic (their dialect is unregistered here).
    pub generic: bool,
    /// Keep symbolic dims as `?` and compute sizes at run time (`get_dimension_size`,
    /// `dynamic_broadcast_in_dim`, `dynamic_reshape`, `dynamic_iota`, `real_dynamic_slice`): a
    /// portable module that a StableHLO consumer refines to concrete shapes. PJRT plugins compile
    /// static modules only, so execution lowers per concrete shape instead.
    pub shape_polymorphic: bool,
    /// Input-output aliases `(input, output)`: `@main`'s argument `input` carries
    /// `tf.aliasing_output = output`, so XLA may write output `output` into the argument's
    /// buffer when the caller donates it (a buffer updated in place, like a BatchNorm running
    /// mean). Each pair must join an input and an output of one type, and each input and
    /// output appears at most once; anything else is [`Error::Alias`].
    pub aliases: Vec<(usize, usize)>,
    /// Input and output shardings over a device mesh, for XLA's SPMD partitioner: the module
    /// gets an `sdy.mesh @mesh` and each `@main` argument and result an `sdy.sharding`
    /// (Shardy's form; compile it with Shardy enabled). `None`: a single-device program.
    pub sharding: Option<ttpu_ir::ProgramSharding>,
}

/// Lowers `graph` to the text of a StableHLO module with one public `func.func @main`.
///
/// The graph must have static shapes (see [`LowerOptions::shape_polymorphic`]). The module is verified by MLIR before printing, and the
/// text is deterministic: the same graph always gives the same bytes.
pub fn lower(graph: &Graph) -> Result<String, Error> {
    lower_with(graph, &LowerOptions::default())
}

/// [`lower`] with explicit [`LowerOptions`].
pub fn lower_with(graph: &Graph, options: &LowerOptions) -> Result<String, Error> {
    lower::lower(graph, options)
}
