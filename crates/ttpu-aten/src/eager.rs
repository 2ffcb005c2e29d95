//! The table's entry point for frontends that hold one call rather than a program: PyTorch's
//! dispatcher on the ttpu device, and the nodes of an FX graph handed over by Dynamo.
//!
//! A call (an overload, its positional and keyword [`Arg`]s, and the types and strides of its
//! tensor operands) is built into a [`Template`]: a small graph whose inputs are the operands
//! and whose outputs are the call's tensor results, made by the same decomposition that imports
//! the overload from `.fx` text, so both frontends compute the same bits. A frontend builds a
//! template once per signature and inlines it (`GraphBuilder::inline`) wherever the call recurs.
//!
//! Three things differ from a program's import, because a template is reused across calls:
//! - **Python floats are inputs** where that is exact. Learning rates, bias corrections and
//!   `alpha`s change from step to step; baking them into the program would compile it again for
//!   every value. [`build`] builds the call twice, with the given floats and with probe values,
//!   and every constant that differs between the two builds must be exactly one float argument
//!   converted to the constant's dtype. Those constants become inputs (one vector per dtype,
//!   after the operands), filled per call with [`Template::scalar_inputs`]. A float that reaches
//!   the graph any other way (through host arithmetic, or by choosing another decomposition)
//!   stays a constant of its template, and [`Family::admits`] refuses a call with another value,
//!   so a template never computes with a value it was not built for. 0, 1 and -1 are never
//!   lifted: decompositions special-case them, and they rarely change.
//! - **Random draws read their generator state from inputs** (after the operands), so each call
//!   draws new numbers from keys the frontend supplies ([`rng_state`]).
//! - **Sizes the data decides** (`nonzero`, ...) have no annotation to name them: they are named
//!   `u0`, `u1`, ... in order, and a call that needs them first builds a size program
//!   ([`Built::Sizes`]) whose results the frontend passes back as `symbol_values`.
//!
//! Result strides follow PyTorch's rules for views and copies (`crate::storage`); a result whose
//! layout the table does not track is reported contiguous, as PyTorch allocates fresh results.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use indexmap::IndexMap;
use smallvec::SmallVec;
use ttpu_ir::{DType, Graph, GraphBuilder, Literal, NodeId, Op, Scalar, Shape, TensorType, ValueId};

use crate::args::{self, Val};
use crate::ctx::{Cx, Imported, Site};
use crate::ops::{self, OpDef};
use crate::storage::{self, Layout, View};
use crate::{Error, Result, Span};

/// An argument of an eager call, as PyTorch passes it.
#[derive(Clone, Debug)]
pub enum Arg {
    /// `None`.
    None,
    /// A Python int.
    Int(i64),
    /// A Python float.
    Float(f64),
    /// A Python bool.
    Bool(bool),
    /// A string (`reduce="sum"`, `approximate="tanh"`).
    Str(String),
    /// A `torch.dtype`.
    DType(DType),
    /// A device, layout or memory format: accepted and ignored, as by the `.fx` importer.
    Opaque(String),
    /// A list or tuple.
    List(Vec<Arg>),
    /// The tensor operand of this index.
    Tensor(usize),
}

impl PartialEq for Arg {
    fn eq(&self, other: &Arg) -> bool {
        match (self, other) {
            (Arg::None, Arg::None) => true,
            (Arg::Int(a), Arg::Int(b)) => a == b,
            // By bits: -0.0 and 0.0, or two NaN payloads, are different calls.
            (Arg::Float(a), Arg::Float(b)) => a.to_bits() == b.to_bits(),
            (Arg::Bool(a), Arg::Bool(b)) => a == b,
            (Arg::Str(a), Arg::Str(b)) | (Arg::Opaque(a), Arg::Opaque(b)) => a == b,
            (Arg::DType(a), Arg::DType(b)) => a == b,
            (Arg::List(a), Arg::List(b)) => a == b,
            (Arg::Tensor(a), Arg::Tensor(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Arg {}

impl Hash for Arg {
    fn hash<H: Hasher>(&self, state: &mut H) {
        std::mem::discriminant(self).hash(state);
        match self {
            Arg::None => {}
            Arg::Int(value) => value.hash(state),
            Arg::Float(value) => value.to_bits().hash(state),
            Arg::Bool(value) => value.hash(state),
            Arg::Str(text) | Arg::Opaque(text) => text.hash(state),
            Arg::DType(dtype) => dtype.hash(state),
            Arg::List(items) => items.hash(state),
            Arg::Tensor(index) => index.hash(state),
        }
    }
}

/// Where a tensor's elements sit in its storage, in elements (PyTorch's sizes, strides and
/// storage offset).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Strides {
    /// Sizes of the dims.
    pub sizes: Vec<i64>,
    /// Strides of the dims.
    pub strides: Vec<i64>,
    /// The first element's position in the storage.
    pub offset: i64,
}

impl Strides {
    /// Row-major strides of `sizes` from offset 0.
    pub fn contiguous(sizes: &[i64]) -> Strides {
        Strides { sizes: sizes.to_vec(), strides: storage::contiguous_strides(sizes), offset: 0 }
    }

    /// Whether these are row-major strides from offset 0 (size-1 dims may have any stride).
    pub fn is_contiguous(&self) -> bool {
        let mut expected = 1i64;
        for (&size, &stride) in self.sizes.iter().zip(&self.strides).rev() {
            if size == 0 {
                return self.offset == 0;
            }
            if size != 1 && stride != expected {
                return false;
            }
            expected = expected.saturating_mul(size);
        }
        self.offset == 0
    }

    fn view(&self, base: ValueId) -> View {
        View { base, storage_len: 0, sizes: self.sizes.clone(), strides: self.strides.clone(), offset: self.offset }
    }
}

/// A tensor operand of a call: its type and where it sits in memory.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Operand {
    /// Its type (static dims).
    pub ty: TensorType,
    /// Its strides; `None` for a contiguous tensor from offset 0.
    pub strides: Option<Strides>,
}

/// How a call's results map to a template's outputs.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// The template output of this index.
    Tensor(usize),
    /// An int known when the call was built (`sym_size`).
    Int(i64),
    /// A bool known when the call was built.
    Bool(bool),
    /// Nothing (a check).
    None,
    /// Several results (a tuple or a list of tensors).
    List(Vec<Output>),
}

/// A packed input of float arguments of one dtype: element `k` is the argument of float ordinal
/// `floats[k]` (its position among the call's float arguments, positional then keyword),
/// converted to `dtype` as a constant of that dtype would be.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ScalarInput {
    /// The dtype of the constants it stands for.
    pub dtype: DType,
    /// The float ordinal of each element.
    pub floats: Vec<usize>,
}

/// A call built into a graph, reusable for every call its [`Family`] admits.
#[derive(Clone, Debug, PartialEq)]
pub struct Template {
    /// Inputs: the tensor operands in order, then one `u64[2]` generator state per random draw,
    /// then the [`ScalarInput`]s. Outputs: the call's tensor results.
    pub graph: Graph,
    /// The call's results.
    pub output: Output,
    /// Per graph output: its sizes and strides, as PyTorch would lay the result out.
    pub strides: Vec<Strides>,
    /// Per graph output: the index of the operand it is a view of (sharing its storage), if any.
    pub view_of: Vec<Option<usize>>,
    /// How many tensor operands it takes.
    pub operands: usize,
    /// How many generator states it reads.
    pub rng_states: usize,
    /// The float arguments it takes as inputs.
    pub scalars: Vec<ScalarInput>,
}

impl Template {
    /// The host data of each [`ScalarInput`] for a call with these float arguments (in ordinal
    /// order, [`floats`]): `(dtype, element count, little-endian bytes)`.
    pub fn scalar_inputs(&self, floats: &[f64]) -> Result<Vec<(DType, usize, Vec<u8>)>> {
        self.scalars
            .iter()
            .map(|input| {
                let mut bytes = Vec::with_capacity(input.floats.len() * input.dtype.byte_size());
                for &ordinal in &input.floats {
                    let value = floats.get(ordinal).copied().ok_or_else(|| Error::BadArguments {
                        at: eager_location(),
                        op: "eager call".into(),
                        node: String::new(),
                        message: format!("float argument {ordinal} is missing"),
                    })?;
                    bytes.extend_from_slice(Literal::scalar(input.dtype, Scalar::Float(value)).bytes());
                }
                Ok((input.dtype, input.floats.len(), bytes))
            })
            .collect()
    }
}

/// A template and what it was built from: the graph with its lifted constants still in place,
/// and where they are, so that another call can be checked against it.
#[derive(Clone, Debug)]
pub struct Family {
    /// The template every admitted call runs.
    pub template: Arc<Template>,
    /// The call's own build, constants and all.
    base: Graph,
    /// The lifted constants: node, float ordinal, dtype.
    lifted: Vec<(NodeId, usize, DType)>,
}

impl Family {
    /// Whether a call of the same overload, operands and non-float arguments, with the floats of
    /// `args` and `kwargs`, builds exactly the template's graph with its floats as inputs: then
    /// the template computes that call exactly. Builds the call once.
    pub fn admits(&self, def: &'static OpDef, args: &[Arg], kwargs: &[(String, Arg)], operands: &[Operand]) -> bool {
        if self.lifted.is_empty() {
            return false;
        }
        let floats = floats(args, kwargs);
        let Ok(Build::Done(built)) = build_once(def, args, kwargs, operands, &IndexMap::new(), &mut |_, value| value)
        else {
            return false;
        };
        if !same_except_constants(&self.base, &built.graph) {
            return false;
        }
        let mut lifted = self.lifted.iter().peekable();
        for ((id, base_node), (_, node)) in self.base.nodes().zip(built.graph.nodes()) {
            match lifted.peek() {
                Some(&&(lifted_id, ordinal, dtype)) if lifted_id == id => {
                    lifted.next();
                    let expected = Literal::scalar(dtype, Scalar::Float(floats[ordinal]));
                    if node.op != Op::Constant(expected) {
                        return false;
                    }
                }
                _ => {
                    if node.op != base_node.op {
                        return false;
                    }
                }
            }
        }
        true
    }
}

/// What [`build`] made of a call.
#[derive(Clone, Debug)]
pub enum Built {
    /// The call's template.
    Template(Family),
    /// The call needs sizes the data decides: this graph (inputs as a template's: operands, then
    /// generator states) computes them as `i64` scalars, `u0`, `u1`, ... in order. Build the
    /// call again with their values in `symbol_values`.
    Sizes(Graph),
}

/// The overload `name` (`aten.add.Tensor`), if the table has it.
pub fn lookup(name: &str) -> Option<&'static OpDef> {
    ops::lookup(name)
}

/// The float arguments of a call in ordinal order: positional arguments, then keywords, lists
/// depth first.
pub fn floats(args: &[Arg], kwargs: &[(String, Arg)]) -> Vec<f64> {
    fn walk(arg: &Arg, out: &mut Vec<f64>) {
        match arg {
            Arg::Float(value) => out.push(*value),
            Arg::List(items) => items.iter().for_each(|item| walk(item, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    args.iter().chain(kwargs.iter().map(|(_, arg)| arg)).for_each(|arg| walk(arg, &mut out));
    out
}

/// Whether a float argument may become an input: finite and none of the values decompositions
/// special-case.
pub fn liftable(value: f64) -> bool {
    value.is_finite() && value != 0.0 && value != 1.0 && value != -1.0
}

/// The generator state of the `draw`-th random draw from `seed`: the `draw`-th output of
/// SplitMix64 as the ThreeFry key, counter 0, as the `.fx` importer seeds its draws.
pub fn rng_state(seed: u64, draw: u64) -> [u64; 2] {
    [ops::random_key(seed, draw), 0]
}

/// Builds the call `def(*args, **kwargs)` on `operands` into a template, lifting its float
/// arguments to inputs where that is exact (see the module docs). `symbol_values` gives the
/// sizes the data decides, once a size program has computed them.
pub fn build(
    def: &'static OpDef,
    args: &[Arg],
    kwargs: &[(String, Arg)],
    operands: &[Operand],
    symbol_values: &IndexMap<String, i64>,
) -> Result<Built> {
    let built = match build_once(def, args, kwargs, operands, symbol_values, &mut |_, value| value)? {
        Build::Done(built) => built,
        Build::Sizes(graph) => return Ok(Built::Sizes(graph)),
    };
    let actual = floats(args, kwargs);
    let lifted = if actual.iter().any(|&value| liftable(value)) {
        // Distinct values that no decomposition special-cases, away from the usual ranges' edges.
        let probe = |ordinal: usize, value: f64| {
            if liftable(value) { 0.372_104_5 + 0.012_345_678_9 * ordinal as f64 } else { value }
        };
        let probed =
            build_once(def, args, kwargs, operands, symbol_values, &mut |ordinal, value| probe(ordinal, value));
        match probed {
            Ok(Build::Done(probed)) => lifted_constants(&built.graph, &probed.graph, &actual, &probe),
            _ => Vec::new(),
        }
    } else {
        Vec::new()
    };
    let template = lift(&built, &lifted)?;
    Ok(Built::Template(Family { template: Arc::new(template), base: built.graph, lifted }))
}

/// A refusal of a call of the user kernel `kernel`, as the overload `NS.OP.default` it runs.
fn kernel_error(kernel: &ttpu_ir::Kernel, message: String) -> Error {
    Error::BadArguments {
        at: eager_location(),
        op: format!("{}.default", kernel.name.replace("::", ".")),
        node: kernel.name.rsplit("::").next().unwrap_or_default().to_owned(),
        message,
    }
}

/// Checks that a call of the user kernel `kernel` passes what a kernel takes: tensors only,
/// positionally, each argument one operand in order (`args[i]` is `Arg::Tensor(i)`), the rule the
/// `.fx` import applies to a kernel's node. A number or a list among the arguments would otherwise
/// be dropped without a word, since a kernel's template reads its operands only; their types are
/// [`build_kernel`]'s to check.
pub fn check_kernel_call(kernel: &ttpu_ir::Kernel, args: &[Arg], kwargs: &[(String, Arg)]) -> Result<()> {
    if let Some((name, _)) = kwargs.first() {
        return Err(kernel_error(
            kernel,
            format!("kernel `{}` takes tensors positionally, not `{name}=`", kernel.name),
        ));
    }
    for (index, arg) in args.iter().enumerate() {
        if *arg != Arg::Tensor(index) {
            return Err(kernel_error(kernel, format!("argument {index} of kernel `{}` is not a tensor", kernel.name)));
        }
    }
    Ok(())
}

/// Builds a call of the user kernel `kernel` (see [`crate::Kernels::for_overload`]) on
/// `operands` into a template: one `kernel` node, its results contiguous and fresh. Operands of
/// other types than the kernel's are refused, naming the kernel and the argument.
pub fn build_kernel(kernel: &Arc<ttpu_ir::Kernel>, operands: &[Operand]) -> Result<Built> {
    let bad = |message: String| kernel_error(kernel, message);
    if operands.len() != kernel.inputs.len() {
        return Err(bad(format!(
            "kernel `{}` takes {} tensors, the call passes {}",
            kernel.name,
            kernel.inputs.len(),
            operands.len()
        )));
    }
    let mut b = GraphBuilder::new();
    let mut values = Vec::with_capacity(operands.len());
    for (index, (operand, expected)) in operands.iter().zip(&kernel.inputs).enumerate() {
        if &operand.ty != expected {
            return Err(bad(format!(
                "argument {index} is {}, but kernel `{}` takes {expected}",
                operand.ty, kernel.name
            )));
        }
        values.push(b.input(operand.ty.clone(), None));
    }
    let results = b.kernel(kernel.clone(), &values).map_err(|error| bad(error.to_string()))?;
    // Registries only take kernels of static types; one built by hand may not be.
    let strides = kernel
        .results
        .iter()
        .map(|ty| {
            let dims = ty.shape.as_static().ok_or_else(|| {
                bad(format!("kernel `{}` has the result type {ty}; kernel types are static", kernel.name))
            })?;
            Ok(Strides::contiguous(&dims))
        })
        .collect::<Result<Vec<_>>>()?;
    let output = match results.len() {
        1 => Output::Tensor(0),
        count => Output::List((0..count).map(Output::Tensor).collect()),
    };
    let graph = b.finish(&results);
    let template = Template {
        graph: graph.clone(),
        output,
        strides,
        view_of: vec![None; results.len()],
        operands: operands.len(),
        rng_states: 0,
        scalars: Vec::new(),
    };
    Ok(Built::Template(Family { template: Arc::new(template), base: graph, lifted: Vec::new() }))
}

/// One build of a call, floats mapped by `float` (ordinal, value) first.
struct Single {
    graph: Graph,
    output: Output,
    strides: Vec<Strides>,
    view_of: Vec<Option<usize>>,
    rng_states: usize,
}

enum Build {
    Done(Single),
    Sizes(Graph),
}

fn eager_location() -> crate::Location {
    crate::Location::new(&Arc::from("<eager>"), "", Span::default())
}

fn build_once(
    def: &'static OpDef,
    args: &[Arg],
    kwargs: &[(String, Arg)],
    operands: &[Operand],
    symbol_values: &IndexMap<String, i64>,
    float: &mut dyn FnMut(usize, f64) -> f64,
) -> Result<Build> {
    let mut cx = Cx {
        b: GraphBuilder::new(),
        site: Site {
            path: Arc::from("<eager>"),
            source: Arc::from(""),
            op: def.name.to_string(),
            node: def.name.rsplit('.').nth(1).unwrap_or(def.name).to_string(),
            span: Span::default(),
        },
        symbol_values,
        seed: 0,
        rng_draws: 0,
        annotated: None,
        input_layouts: Vec::new(),
        annotated_elements: Vec::new(),
        // Every result of an eager call is returned to the caller, which may read it.
        every_result_read: true,
        annotated_sym: None,
        input_symbols: HashSet::new(),
        pending: Vec::new(),
        rng_inputs: Some(Vec::new()),
        data_symbols: Some(0),
    };
    for (index, operand) in operands.iter().enumerate() {
        if operand.ty.shape.as_static().is_none() {
            return Err(cx.bad(format!("operand {index} has symbolic dims ({})", operand.ty)));
        }
    }
    let values: Vec<ValueId> = operands.iter().map(|operand| cx.b.input(operand.ty.clone(), None)).collect();
    let mut ordinal = 0;
    let mut convert = |arg: &Arg| to_val(arg, &values, &mut ordinal, float, &cx.site);
    let positional = args.iter().map(&mut convert).collect::<Result<Vec<_>>>()?;
    let keywords = kwargs.iter().map(|(name, arg)| Ok((name.clone(), convert(arg)?))).collect::<Result<Vec<_>>>()?;
    let bound = args::bind(cx.site.clone(), def.params, positional, keywords)?;
    // The strides of strided operands, for the ops that read them (`as_strided`) and for the
    // strides of views of them.
    for (param, value) in bound.tensor_params() {
        let index = values.iter().position(|&input| input == value).expect("tensor params are operands");
        if let Some(strides) = &operands[index].strides
            && !strides.is_contiguous()
        {
            let storage_len = storage_extent(strides);
            cx.input_layouts.push((param, Layout::View(View { storage_len, ..strides.view(value) })));
        }
    }
    if def.name.starts_with("aten.as_strided") && !cx.input_layouts.is_empty() {
        return Err(cx.bad("reads memory: give it the storage itself as a contiguous operand"));
    }
    let imported = (def.run)(&mut cx, &bound)?;
    if !cx.pending.is_empty() {
        let sizes: Vec<ValueId> = cx.pending.iter().map(|(_, value)| *value).collect();
        return Ok(Build::Sizes(cx.b.finish(&sizes)));
    }
    let layout = storage::propagate(&mut cx, def.name, &bound, &imported);
    let mut results = Vec::new();
    let output = output_of(&imported, &mut results, &cx.site)?;
    let layouts = flatten_layouts(&imported, layout);
    let mut strides = Vec::with_capacity(results.len());
    let mut view_of = Vec::with_capacity(results.len());
    for (&result, layout) in results.iter().zip(layouts) {
        let sizes = cx.static_dims(result, "a result")?.to_vec();
        match layout {
            Layout::View(view) if view.sizes == sizes => {
                view_of.push(values.iter().position(|&input| input == view.base));
                strides.push(Strides { sizes, strides: view.strides, offset: view.offset });
            }
            _ => {
                view_of.push(None);
                strides.push(Strides::contiguous(&sizes));
            }
        }
    }
    let rng_states = cx.rng_inputs.as_ref().map_or(0, Vec::len);
    Ok(Build::Done(Single { graph: cx.b.finish(&results), output, strides, view_of, rng_states }))
}

/// How many storage elements strided sizes reach (at least one past the last).
fn storage_extent(strides: &Strides) -> i64 {
    if strides.sizes.contains(&0) {
        return strides.offset;
    }
    strides.sizes.iter().zip(&strides.strides).fold(strides.offset.saturating_add(1), |acc, (&size, &stride)| {
        acc.saturating_add((size - 1).saturating_mul(stride.max(0)))
    })
}

fn to_val(
    arg: &Arg,
    operands: &[ValueId],
    ordinal: &mut usize,
    float: &mut dyn FnMut(usize, f64) -> f64,
    site: &Site,
) -> Result<Val> {
    Ok(match arg {
        Arg::None => Val::None,
        Arg::Int(value) => Val::Int(*value),
        Arg::Float(value) => {
            let mapped = float(*ordinal, *value);
            *ordinal += 1;
            Val::Float(mapped)
        }
        Arg::Bool(value) => Val::Bool(*value),
        Arg::Str(text) => Val::Str(text.clone()),
        Arg::DType(dtype) => Val::DType(*dtype),
        Arg::Opaque(text) => Val::Opaque(text.clone()),
        Arg::List(items) => {
            Val::List(items.iter().map(|item| to_val(item, operands, ordinal, float, site)).collect::<Result<_>>()?)
        }
        Arg::Tensor(index) => Val::Tensor(
            *operands
                .get(*index)
                .ok_or_else(|| site.bad(format!("tensor operand {index} of {} is missing", operands.len())))?,
        ),
    })
}

fn output_of(imported: &Imported, results: &mut Vec<ValueId>, site: &Site) -> Result<Output> {
    Ok(match imported {
        Imported::Tensor(value) => {
            results.push(*value);
            Output::Tensor(results.len() - 1)
        }
        Imported::Tuple(items) => {
            Output::List(items.iter().map(|item| output_of(item, results, site)).collect::<Result<_>>()?)
        }
        Imported::SymInt(crate::SymExpr::Int(value)) => Output::Int(*value),
        Imported::SymBool(Some(value)) => Output::Bool(*value),
        Imported::None => Output::None,
        other => return Err(site.bad(format!("a result of this kind has no eager value: {other:?}"))),
    })
}

fn flatten_layouts(imported: &Imported, layout: Layout) -> Vec<Layout> {
    match (imported, layout) {
        (Imported::Tensor(_), layout) => vec![layout],
        (Imported::Tuple(items), Layout::Tuple(layouts)) if layouts.len() == items.len() => {
            items.iter().zip(layouts).flat_map(|(item, layout)| flatten_layouts(item, layout)).collect()
        }
        (Imported::Tuple(items), _) => {
            items.iter().flat_map(|item| flatten_layouts(item, Layout::Contiguous)).collect()
        }
        _ => Vec::new(),
    }
}

/// Whether two builds of one call have the same structure: inputs, outputs, and every node's op
/// and operands, except that constants may hold other literals.
fn same_except_constants(a: &Graph, b: &Graph) -> bool {
    a.inputs == b.inputs
        && a.outputs == b.outputs
        && a.node_count() == b.node_count()
        && a.inputs.iter().all(|&input| a.ty(input) == b.ty(input))
        && a.nodes().zip(b.nodes()).all(|((_, x), (_, y))| {
            x.operands == y.operands
                && (x.op == y.op || matches!((&x.op, &y.op), (Op::Constant(_), Op::Constant(_))))
                && x.results.iter().zip(&y.results).all(|(&r, &s)| a.ty(r) == b.ty(s))
        })
}

/// The constants of `actual` that differ in `probed` and are each exactly one float argument:
/// `(node, ordinal, dtype)`. Empty when any difference is something else (then nothing is lifted).
fn lifted_constants(
    actual: &Graph,
    probed: &Graph,
    floats: &[f64],
    probe: &dyn Fn(usize, f64) -> f64,
) -> Vec<(NodeId, usize, DType)> {
    if !same_except_constants(actual, probed) {
        return Vec::new();
    }
    let mut lifted = Vec::new();
    for ((id, a), (_, b)) in actual.nodes().zip(probed.nodes()) {
        if a.op == b.op {
            continue;
        }
        let (Op::Constant(real), Op::Constant(other)) = (&a.op, &b.op) else { return Vec::new() };
        if !real.dims().is_empty() || real.dtype() != other.dtype() {
            return Vec::new();
        }
        let dtype = real.dtype();
        let found = floats.iter().enumerate().find(|&(ordinal, &value)| {
            liftable(value)
                && Literal::scalar(dtype, Scalar::Float(value)) == *real
                && Literal::scalar(dtype, Scalar::Float(probe(ordinal, value))) == *other
        });
        match found {
            Some((ordinal, _)) => lifted.push((id, ordinal, dtype)),
            None => return Vec::new(),
        }
    }
    lifted
}

/// The template of a build: `lifted` constants replaced by elements of packed scalar inputs.
fn lift(built: &Single, lifted: &[(NodeId, usize, DType)]) -> Result<Template> {
    let graph = &built.graph;
    let mut scalars: Vec<ScalarInput> = Vec::new();
    let mut element_of: Vec<(NodeId, usize, usize)> = Vec::new();
    for &(node, ordinal, dtype) in lifted {
        let input = match scalars.iter().position(|input| input.dtype == dtype) {
            Some(index) => index,
            None => {
                scalars.push(ScalarInput { dtype, floats: Vec::new() });
                scalars.len() - 1
            }
        };
        scalars[input].floats.push(ordinal);
        element_of.push((node, input, scalars[input].floats.len() - 1));
    }
    let internal = |error: ttpu_ir::InferError| Error::BadArguments {
        at: eager_location(),
        op: "eager template".into(),
        node: String::new(),
        message: format!("ttpu bug while lifting scalars: {error}"),
    };
    let mut b = GraphBuilder::new();
    let mut values: Vec<Option<ValueId>> = vec![None; graph.value_count()];
    for &input in &graph.inputs {
        values[input.index_usize()] = Some(b.input(graph.ty(input).clone(), None));
    }
    let packed: Vec<ValueId> = scalars
        .iter()
        .map(|input| {
            let len = i64::try_from(input.floats.len()).unwrap_or(i64::MAX);
            b.input(TensorType::new(input.dtype, Shape::from_static(&[len])), None)
        })
        .collect();
    let value = |values: &[Option<ValueId>], id: ValueId| values[id.index_usize()].expect("topological order");
    for (id, node) in graph.nodes() {
        if let Some(&(_, input, element)) = element_of.iter().find(|(node, _, _)| *node == id) {
            let index = element as i64;
            let slice = b.slice(packed[input], &[index], &[index + 1], &[1]).map_err(internal)?;
            let scalar = b.reshape(slice, Shape::scalar()).map_err(internal)?;
            values[node.results[0].index_usize()] = Some(scalar);
            continue;
        }
        let operands: SmallVec<[ValueId; 4]> = node.operands.iter().map(|&operand| value(&values, operand)).collect();
        b.set_loc(node.loc.clone());
        let results = b.op_results(node.op.clone(), &operands).map_err(internal)?;
        for (&old, new) in node.results.iter().zip(results) {
            values[old.index_usize()] = Some(new);
        }
    }
    let outputs: Vec<ValueId> = graph.outputs.iter().map(|&output| value(&values, output)).collect();
    Ok(Template {
        graph: b.finish(&outputs),
        output: built.output.clone(),
        strides: built.strides.clone(),
        view_of: built.view_of.clone(),
        operands: graph.inputs.len() - built.rng_states,
        rng_states: built.rng_states,
        scalars,
    })
}

/// In-place overloads whose functional form is not the name without the underscore (as
/// PyTorch's functionalization pairs them).
const IRREGULAR_FUNCTIONAL: &[(&str, &str)] = &[
    ("aten.normal_.default", "aten.normal_functional.default"),
    ("aten.bernoulli_.float", "aten.bernoulli.p"),
    ("aten.native_batch_norm.default", "aten._native_batch_norm_legit_functional.default"),
    ("aten._native_batch_norm_legit.default", "aten._native_batch_norm_legit_functional.default"),
];

/// The functional overload computing what the mutating overload `name` writes: `aten.add_.Tensor`
/// gives `aten.add.Tensor`, `aten._foreach_mul_.List` gives `aten._foreach_mul.List`. Its results
/// are the mutating overload's own results that alias no argument, then the new value of each
/// argument it writes, in argument order (PyTorch's functionalization convention).
pub fn functional_of(name: &str) -> Option<&'static OpDef> {
    if let Some((_, functional)) = IRREGULAR_FUNCTIONAL.iter().find(|(mutating, _)| *mutating == name) {
        return lookup(functional);
    }
    let (namespace, rest) = name.split_once('.')?;
    let (op, overload) = rest.rsplit_once('.')?;
    lookup(&format!("{namespace}.{}.{overload}", op.strip_suffix('_')?))
}

/// How a view's new value is written back into the tensor it was taken from.
#[derive(Clone, Debug, PartialEq)]
pub enum Inverse {
    /// The view is its source (`alias`, `detach`): the new value is the source's.
    Identity,
    /// This call (operand 0: the source's current value, operand 1: the view's new value) gives
    /// the source's new value.
    Call {
        /// The overload.
        def: &'static OpDef,
        /// Its arguments.
        args: Vec<Arg>,
    },
}

/// How to write the `result`-th result of the view call `def(source, *args)` back into `source`
/// (of dims `source_dims`), or `None` when the table has no inverse for it (a view whose
/// elements overlap, like `expand` or `unfold`, has none: PyTorch refuses writes into those).
pub fn view_inverse(def: &OpDef, args: &[Arg], result: usize, source_dims: &[i64]) -> Option<Inverse> {
    let rank = source_dims.len();
    let int = |index: usize| match args.get(index) {
        Some(Arg::Int(value)) => Some(*value),
        _ => None,
    };
    let dim = |value: i64| -> Option<usize> {
        let wrap = rank.max(1) as i64;
        let index = if value < 0 { value + wrap } else { value };
        usize::try_from(index).ok().filter(|&index| index < rank.max(1))
    };
    let call = |name: &str, args: Vec<Arg>| Some(Inverse::Call { def: lookup(name)?, args });
    let sizes = || Arg::List(source_dims.iter().map(|&size| Arg::Int(size)).collect());
    let slice = |dim: usize, start: i64, end: i64| {
        call(
            "aten.slice_scatter.default",
            vec![Arg::Tensor(0), Arg::Tensor(1), Arg::Int(dim as i64), Arg::Int(start), Arg::Int(end), Arg::Int(1)],
        )
    };
    match def.name {
        "aten.alias.default" | "aten.detach.default" | "aten.lift_fresh.default" => Some(Inverse::Identity),
        "aten.view.default"
        | "aten._unsafe_view.default"
        | "aten._reshape_alias.default"
        | "aten.reshape.default"
        | "aten.unsqueeze.default"
        | "aten.squeeze.default"
        | "aten.squeeze.dim"
        | "aten.squeeze.dims"
        | "aten.flatten.using_ints"
        | "aten.unflatten.int" => call("aten.view.default", vec![Arg::Tensor(1), sizes()]),
        "aten.t.default" => call("aten.t.default", vec![Arg::Tensor(1)]),
        "aten.transpose.int" => {
            call("aten.transpose.int", vec![Arg::Tensor(1), args.get(1)?.clone(), args.get(2)?.clone()])
        }
        "aten.permute.default" => {
            let Some(Arg::List(dims)) = args.get(1) else { return None };
            let mut inverse = vec![0i64; dims.len()];
            for (position, item) in dims.iter().enumerate() {
                let Arg::Int(value) = item else { return None };
                *inverse.get_mut(dim(*value)?)? = position as i64;
            }
            call("aten.permute.default", vec![Arg::Tensor(1), Arg::List(inverse.into_iter().map(Arg::Int).collect())])
        }
        "aten.select.int" => call(
            "aten.select_scatter.default",
            vec![Arg::Tensor(0), Arg::Tensor(1), args.get(1)?.clone(), args.get(2)?.clone()],
        ),
        "aten.slice.Tensor" => {
            let mut scatter = vec![Arg::Tensor(0), Arg::Tensor(1)];
            scatter.extend(args.iter().skip(1).cloned());
            call("aten.slice_scatter.default", scatter)
        }
        "aten.unbind.int" => {
            let axis = dim(int(1).unwrap_or(0))?;
            call(
                "aten.select_scatter.default",
                vec![Arg::Tensor(0), Arg::Tensor(1), Arg::Int(axis as i64), Arg::Int(result as i64)],
            )
        }
        "aten.split.Tensor" => {
            let (size, axis) = (int(1)?, dim(int(2).unwrap_or(0))?);
            let start = size.checked_mul(result as i64)?;
            slice(axis, start, start.checked_add(size)?.min(source_dims[axis]))
        }
        "aten.split_with_sizes.default" => {
            let Some(Arg::List(sizes)) = args.get(1) else { return None };
            let axis = dim(int(2).unwrap_or(0))?;
            let mut start = 0i64;
            for item in sizes.iter().take(result) {
                let Arg::Int(size) = item else { return None };
                start = start.checked_add(*size)?;
            }
            let Some(Arg::Int(size)) = sizes.get(result) else { return None };
            slice(axis, start, start.checked_add(*size)?)
        }
        "aten.diagonal.default" => {
            let mut scatter = vec![Arg::Tensor(0), Arg::Tensor(1)];
            scatter.extend(args.iter().skip(1).cloned());
            call("aten.diagonal_scatter.default", scatter)
        }
        "aten.as_strided.default" => {
            let mut scatter = vec![Arg::Tensor(0), Arg::Tensor(1)];
            scatter.extend(args.iter().skip(1).cloned());
            call("aten.as_strided_scatter.default", scatter)
        }
        "aten.view_as_real.default" => call("aten.view_as_complex.default", vec![Arg::Tensor(1)]),
        "aten.view_as_complex.default" => call("aten.view_as_real.default", vec![Arg::Tensor(1)]),
        _ => None,
    }
}
