//! Import: walks a parsed [`Program`] and builds the IR graph, decomposing each ATen overload.
//!
//! The walk is in `walk.rs`: placeholders become graph inputs, each node is decomposed through the
//! table in `ops/` (one entry per overload, the only list of supported ops) and its result checked
//! against the printed annotation, and the signature maps inputs and outputs to weights, user
//! inputs and outputs (`signature.rs`). Type promotion lives in `promote.rs`, shared helpers in
//! `ctx.rs`, argument binding in `args.rs` and symbolic sizes in `sym.rs`.

mod signature;
mod syntax_args;
mod walk;

use indexmap::IndexMap;
use ttpu_ir::{Graph, TensorType};

use crate::ast::Program;
use crate::{DataSize, Result};

/// Options of [`import`].
#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    /// Concrete sizes for symbols (`s77 -> 4`). A symbol given here becomes a static dim everywhere
    /// (shape refinement); a symbol not given stays symbolic in the IR.
    pub symbol_values: IndexMap<String, i64>,
    /// The seed of random ops (`rand`, `randn`, `randint`, `randperm`, dropout in training, ...),
    /// 0 by default. Random numbers are part of the compiled program: the `k`-th random draw of a
    /// graph runs ThreeFry with the `k`-th output of SplitMix64 seeded with this as its key, so
    /// the same seed gives the same numbers on every run, and another seed gives other numbers.
    pub seed: u64,
    /// User kernels: a call of `mylib.foo.default`, an op outside the ATen table, runs the kernel
    /// `mylib::foo` when this holds one (see [`ttpu_aten::kernels`]).
    pub kernels: ttpu_aten::Kernels,
}

/// What a graph input is, from the graph signature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InputRole {
    /// A trained parameter, loaded from weights.
    Parameter,
    /// A buffer, loaded from weights.
    Buffer {
        /// Whether it is part of the state dict.
        persistent: bool,
    },
    /// A lifted constant tensor, loaded from weights.
    ConstantTensor,
    /// A user input.
    UserInput,
}

/// One graph input, in graph-input order.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelInput {
    /// The placeholder name in the graph (`p_fc1_weight`, `x`).
    pub name: String,
    /// The key in the weights or inputs file: the signature target for parameters, buffers and
    /// constants, the placeholder name for user inputs.
    pub key: String,
    /// Its role.
    pub role: InputRole,
    /// Its type (symbolic dims stay symbolic unless [`ImportOptions::symbol_values`] fixes them).
    pub ty: TensorType,
}

/// What a graph output is, from the graph signature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutputRole {
    /// The `n`-th user output (pytree order), written as `output_n`.
    User(usize),
    /// The new value of a mutated buffer, written under the buffer's target.
    BufferMutation,
    /// The new value of a mutated user input, written under the input's name.
    UserInputMutation,
    /// The scalar loss of a joint forward-backward graph, written as `loss`.
    Loss,
    /// The gradient of the loss with respect to a parameter, written as `grad.<target>`.
    GradientToParameter {
        /// The parameter's target (`fc1.weight`).
        target: String,
    },
    /// The gradient of the loss with respect to a user input, written as
    /// `grad_input.<placeholder>`.
    GradientToUserInput {
        /// The input's placeholder name.
        input: String,
    },
}

/// One graph output, in graph-output order (mutations first, as PyTorch returns them).
#[derive(Clone, Debug, PartialEq)]
pub struct ModelOutput {
    /// The key it is written under: `output_0`, ..., or the mutated target.
    pub key: String,
    /// Its role.
    pub role: OutputRole,
    /// Its type.
    pub ty: TensorType,
}

/// How the graph's inputs and outputs map to the model's weights, inputs and outputs.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ModelSignature {
    /// One entry per graph input, in order.
    pub inputs: Vec<ModelInput>,
    /// One entry per graph output, in order.
    pub outputs: Vec<ModelOutput>,
}

/// An imported model: the IR graph and its signature.
#[derive(Clone, Debug, PartialEq)]
pub struct Module {
    /// The decomposed graph; inputs are the placeholders, outputs the returned values (or, for a
    /// size program, the sizes in [`Module::pending`]).
    pub graph: Graph,
    /// Roles and keys of the graph's inputs and outputs. A size program's signature is still the
    /// model's (its output types as annotated); only its graph outputs differ.
    pub signature: ModelSignature,
    /// Empty for a whole program. Otherwise the graph is a *size program*: the model needs sizes
    /// the data decides (`nonzero`, `.item()`, ...) that [`ImportOptions::symbol_values`] does not
    /// give, and its outputs are those sizes (`i64` scalars, in this order), computed from the same
    /// inputs. Importing again with them given continues the program past those nodes.
    pub pending: Vec<DataSize>,
}

/// Builds the IR graph of `program`, decomposing every node; see the module docs.
pub fn import(program: &Program, options: &ImportOptions) -> Result<Module> {
    walk::import(program, options)
}
