//! The syntax tree of a `.fx` file: `str(ep)` of a `torch.export.ExportedProgram`.
//!
//! The parser produces it without interpreting ATen names; the importer (`import/`) gives it
//! meaning. Every item keeps its [`Span`] so errors found later still point into the source.

use std::sync::Arc;

pub use ttpu_aten::{Span, SymExpr};
use ttpu_ir::DType;

/// The whole file.
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    /// The path the source was read from, for messages.
    pub path: Arc<str>,
    /// The source text.
    pub source: Arc<str>,
    /// `forward`'s parameters, in order.
    pub placeholders: Vec<Placeholder>,
    /// Assignments in `forward`, in order.
    pub nodes: Vec<Node>,
    /// The `return (...)` tuple.
    pub outputs: Vec<Arg>,
    /// Span of the `return` statement.
    pub return_span: Span,
    /// `Graph signature:`.
    pub signature: Signature,
    /// `Range constraints:`, in printed order.
    pub range_constraints: Vec<RangeConstraint>,
    /// Submodule classes printed after `forward` (the branches of `torch.cond`), each with its
    /// own nested submodules.
    pub submodules: Vec<Submodule>,
}

impl Program {
    /// The symbols of the placeholders' dims. Any other symbol of the program is a size the data
    /// decides (PyTorch's unbacked `u0`), defined by a node while the program runs.
    pub fn input_symbols(&self) -> std::collections::HashSet<String> {
        self.placeholders
            .iter()
            .filter_map(|placeholder| match &placeholder.ty {
                FxType::Tensor { dims, .. } => Some(dims),
                _ => None,
            })
            .flat_map(|dims| dims.iter().flat_map(SymExpr::symbols))
            .collect()
    }

    /// Whether the graph-signature name `spec_name` names the placeholder `placeholder`: its own
    /// name, or the name of an alias statement of it (`input_1 = input`, printed when the Python
    /// parameter shadows a builtin; the signature then uses the node name `input_1`).
    pub fn names_placeholder(&self, spec_name: &str, placeholder: &str) -> bool {
        spec_name == placeholder
            || self.nodes.iter().any(|node| {
                node.name == spec_name && matches!(&node.expr, Expr::Alias { source } if source == placeholder)
            })
    }
}

/// `class NAME(torch.nn.Module):` with its `forward`: a graph that a higher-order op of the
/// enclosing graph calls (`true_graph_0 = self.true_graph_0`). Names are scoped per graph.
#[derive(Clone, Debug, PartialEq)]
pub struct Submodule {
    /// The class name, which the enclosing graph reads as `self.NAME`.
    pub name: String,
    /// `forward`'s parameters, in order.
    pub placeholders: Vec<Placeholder>,
    /// Assignments in `forward`, in order.
    pub nodes: Vec<Node>,
    /// The `return (...)` tuple.
    pub outputs: Vec<Arg>,
    /// Span of the `return` statement.
    pub return_span: Span,
    /// Submodules printed inside this one.
    pub submodules: Vec<Submodule>,
    /// Span of the class name.
    pub span: Span,
}

/// An annotation like `"f32[s77, 8]"`, `"Sym(s77)"` or `"i64[]"`.
#[derive(Clone, Debug, PartialEq)]
pub enum FxType {
    /// A tensor type.
    Tensor {
        /// Element type.
        dtype: DType,
        /// Dims, outermost first.
        dims: Vec<SymExpr>,
    },
    /// A symbolic integer (`Sym(s77)`, `Sym(2*s77)`).
    SymInt(SymExpr),
    /// A symbolic float or bool (`Sym(...)` of another kind) kept as text.
    Other(String),
}

/// One parameter of `forward`: `x: "f32[4, 16]"`.
#[derive(Clone, Debug, PartialEq)]
pub struct Placeholder {
    /// Its name in the graph.
    pub name: String,
    /// Its annotation.
    pub ty: FxType,
    /// Where it is written.
    pub span: Span,
}

/// `name: "type" = expr` (the annotation is absent for multi-output ops).
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// The assigned name.
    pub name: String,
    /// The annotation, if printed.
    pub ty: Option<FxType>,
    /// The right-hand side.
    pub expr: Expr,
    /// The whole statement.
    pub span: Span,
    /// 1-based source line of the statement, for locations in the IR.
    pub line: u32,
}

/// The right-hand side of an assignment.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// `torch.ops.aten.addmm.default(a, b, c, alpha=1)`; `target` is `aten.addmm.default`.
    /// `operator.getitem(x, 0)` and other Python callables keep their dotted name
    /// (`operator.getitem`, `torch.sym_float`, `torch._check`).
    Call {
        /// Dotted callee without the `torch.ops.` prefix.
        target: String,
        /// Positional arguments.
        args: Vec<Arg>,
        /// Keyword arguments, in order.
        kwargs: Vec<(String, Arg)>,
        /// Span of the callee name.
        target_span: Span,
    },
    /// `self.NAME`: a submodule of the graph, as an argument of a higher-order op.
    Attr {
        /// The submodule's name.
        name: String,
    },
    /// `base[index]`: an element of a multi-output node.
    Index {
        /// The multi-output node's name.
        base: String,
        /// The element.
        index: i64,
    },
    /// `input_1 = input`: another name for an earlier value. FX prints this for a placeholder whose
    /// Python name shadows a builtin (`input`, `len`, `type`): the graph node is `input_1` (the
    /// name the graph signature and later nodes use) while `forward`'s parameter keeps `input`.
    Alias {
        /// The name aliased.
        source: String,
    },
    /// A binary operator on symbolic ints (`mul: "Sym(2*s77)" = sym_size_int * 2`).
    SymBinary {
        /// `+`, `-`, `*`, `//`, `%`.
        op: String,
        /// Left operand.
        lhs: Arg,
        /// Right operand.
        rhs: Arg,
    },
}

/// An argument value.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    /// A reference to a placeholder or node.
    Name(String, Span),
    /// An integer literal.
    Int(i64),
    /// A float literal, including `inf`, `-inf` and `nan`.
    Float(f64),
    /// `True` / `False`.
    Bool(bool),
    /// `None`.
    None,
    /// A string literal.
    Str(String),
    /// `[a, b]`.
    List(Vec<Arg>),
    /// `(a, b)`.
    Tuple(Vec<Arg>),
    /// `torch.float32` and friends.
    DType(DType),
    /// `device(type='cpu')`, kept as the device type text.
    Device(String),
    /// `torch.contiguous_format`, `torch.strided`, `torch.preserve_format`: the attribute name.
    Enum(String),
    /// `torch.ops.aten._linalg_check_errors.default`: an op passed to a higher-order op
    /// (`with_effects`), by its target without `torch.ops.` (`aten._linalg_check_errors.default`).
    Op(String),
}

/// What a `forward` input is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InputKind {
    /// `PARAMETER target='fc.weight'`.
    Parameter,
    /// `BUFFER target='bn.running_mean' persistent=True`.
    Buffer {
        /// Whether it is saved in the state dict.
        persistent: bool,
    },
    /// `CONSTANT_TENSOR target='c'`.
    ConstantTensor,
    /// `USER_INPUT`.
    UserInput,
    /// Anything else PyTorch prints (`CUSTOM_OBJ`, `TOKEN`), kept by name.
    Other(String),
}

/// One line of the signature's `# inputs` section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputSpec {
    /// Placeholder name.
    pub name: String,
    /// Its kind.
    pub kind: InputKind,
    /// `target='...'`, where printed.
    pub target: Option<String>,
    /// The line.
    pub span: Span,
}

/// What a `forward` output is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutputKind {
    /// `USER_OUTPUT`.
    UserOutput,
    /// `BUFFER_MUTATION target='running'`.
    BufferMutation,
    /// `USER_INPUT_MUTATION target='x'`.
    UserInputMutation,
    /// `LOSS_OUTPUT`: the scalar loss of a joint forward-backward graph.
    LossOutput,
    /// `GRADIENT_TO_PARAMETER target='fc1.weight'`.
    GradientToParameter,
    /// `GRADIENT_TO_USER_INPUT target='arg9_1'` (the target names the flat input position).
    GradientToUserInput,
    /// Anything else, kept by name.
    Other(String),
}

/// One line of the signature's `# outputs` section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputSpec {
    /// The returned name (or the printed literal, for constant outputs).
    pub name: String,
    /// Its kind.
    pub kind: OutputKind,
    /// `target='...'`, where printed.
    pub target: Option<String>,
    /// The line.
    pub span: Span,
}

/// `Graph signature:`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Signature {
    /// Inputs, in `forward` order.
    pub inputs: Vec<InputSpec>,
    /// Outputs, in return order (mutations first).
    pub outputs: Vec<OutputSpec>,
}

/// `s77: VR[2, 1024]`; `max` is `None` for `int_oo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeConstraint {
    /// The symbol; for a derived constraint, the expression as printed.
    pub symbol: String,
    /// For a key that is an expression of symbols (`2*s85: VR[4, int_oo]`, printed for a `Dim`
    /// defined as `2*k`), that expression; `None` for a plain symbol.
    pub derived: Option<SymExpr>,
    /// Lower bound.
    pub min: i64,
    /// Upper bound, `None` if unbounded.
    pub max: Option<i64>,
    /// Where it is written.
    pub span: Span,
}
