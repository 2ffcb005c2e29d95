//! The accuracy mode: the first node of a model whose value departs from a reference.
//!
//! Every `.fx` node's value (the last IR value its decomposition defines) becomes an output of
//! the graph, so the optimizer keeps each one, and the graph runs twice on the plugin:
//! - the program under test: the optimizer's graph at the model's own precision (plus a
//!   [`BisectOptions::transform`], such as a pass under study or a planted fault);
//! - the reference: the same graph before the optimizer, every floating-point value carried in
//!   `f64` (constants and inputs converted exactly, `convert`s to narrower floats dropped), so it
//!   needs no PyTorch and rounds far less than the model's own dtype.
//!
//! Nodes are compared in program order with `allclose` (`|a - r| <= atol + rtol * |r|`, NaN equal
//! to NaN, integers and bools exactly), and the first that departs is reported with its `.fx`
//! source line. Given PyTorch's own intermediate values (keyed by node name), the program under
//! test is compared with those too. A node downstream of a fault departs as well; the first one
//! in program order is where the fault is.

use std::sync::Arc;

use indexmap::IndexMap;
use ttpu_fx::{InputRole, Module};
use ttpu_ir::{DType, Graph, GraphBuilder, Op, ValueId};
use ttpu_runtime::{CompileSpec, HostTensor, TensorMap};

use crate::parity::{OutputParity, compare_within};
use crate::session::bind_symbols;
use crate::{CompileOptions, Error, Result, Session};

/// A rewrite of the program under test, after the optimizer.
pub type Transform = Arc<dyn Fn(&Graph) -> Result<Graph> + Send + Sync>;

/// How [`bisect`] compares.
#[derive(Clone)]
pub struct BisectOptions {
    /// Relative tolerance of floating-point values.
    pub rtol: f64,
    /// Absolute tolerance of floating-point values.
    pub atol: f64,
    /// The optimizer's options for the program under test (`None`: the unfused graph) and the
    /// seed of random ops.
    pub compile: CompileOptions,
    /// PyTorch's values of the nodes, by node name (as `ttpu.capture_intermediates` writes them),
    /// compared with the program under test as a second reference.
    pub intermediates: Option<TensorMap>,
    /// A rewrite applied to the program under test after the optimizer: a pass under study, or
    /// a planted fault that a test expects to find.
    pub transform: Option<Transform>,
}

impl Default for BisectOptions {
    /// `f32` tolerances looser than `ttpu parity`'s: a value deep in a model carries the rounding
    /// of every node before it, where the reference carries almost none.
    fn default() -> BisectOptions {
        BisectOptions {
            rtol: 1e-3,
            atol: 1e-4,
            compile: CompileOptions::default(),
            intermediates: None,
            transform: None,
        }
    }
}

/// A node whose value departs from a reference.
#[derive(Clone, Debug, PartialEq)]
pub struct Departure {
    /// The `.fx` node.
    pub node: String,
    /// Its op and place, `aten.gelu.default @ model.fx:12`.
    pub origin: String,
    /// The 1-based line of the node in the `.fx` text, when known.
    pub line: Option<u32>,
    /// How far its value is from the reference.
    pub parity: OutputParity,
}

/// What [`bisect`] found.
#[derive(Clone, Debug, PartialEq)]
pub struct Bisection {
    /// Nodes compared with the `f64` reference.
    pub compared: usize,
    /// The first node that departs from the `f64` reference, if any.
    pub first: Option<Departure>,
    /// Nodes compared with PyTorch's values (those the intermediates file holds).
    pub compared_with_pytorch: usize,
    /// The first node that departs from PyTorch's values, if any.
    pub first_from_pytorch: Option<Departure>,
}

/// One tapped node: its name, origin and value.
struct Tap {
    node: String,
    origin: String,
    value: ValueId,
}

/// Finds the first node of the model `source` whose value departs from the references (see the
/// module docs), on `session`'s first device, with `weights` (by target) and `inputs` (by
/// placeholder name) as [`Session::run`] takes them.
pub fn bisect(
    session: &Session,
    source: &str,
    path: &str,
    weights: &TensorMap,
    inputs: &TensorMap,
    options: &BisectOptions,
) -> Result<Bisection> {
    let compiler = session.compiler();
    let program = ttpu_fx::parse(source, path)?;
    let unfused = CompileOptions { fuse: None, prepare_weights: false, ..options.compile.clone() };
    let mut module = compiler.import_program(&program, &unfused)?;
    if !module.graph.symbols.is_empty() {
        let shapes: Vec<Option<&[i64]>> = module
            .signature
            .inputs
            .iter()
            .map(|input| tensor_of(&input.role, &input.key, weights, inputs).map(|tensor| tensor.shape.as_slice()))
            .collect();
        let symbol_values = bind_symbols(&module, &shapes)?;
        module = compiler.import_program(&program, &CompileOptions { symbol_values, ..unfused.clone() })?;
    }
    if let Some(size) = module.pending.first() {
        return Err(Error::Bisect { message: format!("the data decides sizes of the model ({size})") });
    }
    let taps = taps(&module.graph);
    let tapped = with_outputs(&module.graph, &taps);
    let reference = in_f64(&tapped)?;
    let mut under_test = match &options.compile.fuse {
        Some(fuse_options) => ttpu_fuse::fuse(&tapped, fuse_options)?.0,
        None => tapped.clone(),
    };
    if let Some(transform) = &options.transform {
        under_test = transform(&under_test)?;
        if under_test.outputs.len() != taps.len() {
            return Err(Error::Bisect {
                message: format!("the transform left {} of the {} outputs", under_test.outputs.len(), taps.len()),
            });
        }
    }
    ttpu_ir::verify(&under_test).map_err(|errors| Error::Internal { pass: "bisect", errors })?;
    let actual = run(session, &module, &under_test, weights, inputs)?;
    let expected = run(session, &module, &reference, weights, inputs)?;
    let tolerances = |dtype: DType| match dtype {
        dtype if !dtype.is_float() => (0.0, 0.0),
        DType::F64 => (options.rtol.min(crate::parity::F64_RTOL), options.atol.min(crate::parity::F64_ATOL)),
        _ => (options.rtol, options.atol),
    };
    let departure = |tap: &Tap, got: &HostTensor, want: &HostTensor| -> Option<Departure> {
        let (rtol, atol) = tolerances(got.dtype);
        let parity = compare_within(&tap.node, got, want, rtol, atol);
        (!parity.ok()).then(|| Departure {
            node: tap.node.clone(),
            origin: tap.origin.clone(),
            line: tap.origin.rsplit(':').next().and_then(|line| line.parse().ok()),
            parity,
        })
    };
    let mut res = Bisection { compared: 0, first: None, compared_with_pytorch: 0, first_from_pytorch: None };
    for ((tap, got), want) in taps.iter().zip(&actual).zip(&expected) {
        if got.dtype.is_complex() || got.shape != want.shape {
            continue;
        }
        res.compared += 1;
        if res.first.is_none() {
            res.first = departure(tap, got, want);
        }
        let Some(pytorch) = options.intermediates.as_ref().and_then(|values| values.get(&tap.node)) else { continue };
        if pytorch.shape != got.shape || pytorch.dtype.is_complex() {
            return Err(Error::Bisect {
                message: format!(
                    "PyTorch's value of `{}` is {}, the node is {}",
                    tap.node,
                    pytorch.describe(),
                    got.describe()
                ),
            });
        }
        res.compared_with_pytorch += 1;
        if res.first_from_pytorch.is_none() {
            res.first_from_pytorch = departure(tap, got, pytorch);
        }
    }
    Ok(res)
}

/// The tensor of a signature input: a weight by target, or a user input by name.
fn tensor_of<'a>(role: &InputRole, key: &str, weights: &'a TensorMap, inputs: &'a TensorMap) -> Option<&'a HostTensor> {
    match role {
        InputRole::UserInput => inputs.get(key),
        _ => weights.get(key),
    }
}

/// Per `.fx` node, in program order: the last value its decomposition defines (one-result nodes
/// only), which is what later nodes read.
fn taps(graph: &Graph) -> Vec<Tap> {
    let mut last: IndexMap<String, (String, ValueId, usize)> = IndexMap::new();
    for (position, (_, node)) in graph.nodes().enumerate() {
        let (Some(name), [value]) = (&node.loc.name, node.results.as_slice()) else { continue };
        let origin = node.loc.origin.clone().unwrap_or_default();
        last.insert(name.clone(), (origin, *value, position));
    }
    let mut taps: Vec<(usize, Tap)> =
        last.into_iter().map(|(node, (origin, value, position))| (position, Tap { node, origin, value })).collect();
    taps.sort_by_key(|(position, _)| *position);
    taps.into_iter().map(|(_, tap)| tap).collect()
}

/// `graph` with the taps' values as its outputs.
fn with_outputs(graph: &Graph, taps: &[Tap]) -> Graph {
    let mut res = graph.clone();
    res.outputs = taps.iter().map(|tap| tap.value).collect();
    res
}

/// The dtype a value is carried in by the reference.
fn wide(dtype: DType) -> DType {
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 => DType::F64,
        DType::C64 => DType::C128,
        other => other,
    }
}

/// `graph` with every floating-point value carried in `f64` (complex in `c128`): inputs and
/// constants converted exactly where they enter, ops rebuilt on wide operands, and ops whose
/// meaning depends on the dtype (bit casts, loops, kernels, or any op that refuses wide
/// operands) run at their own dtypes between exact conversions. Outputs stay wide.
fn in_f64(graph: &Graph) -> Result<Graph> {
    let fail = |error: ttpu_ir::InferError| Error::Bisect { message: format!("building the f64 reference: {error}") };
    let mut b = GraphBuilder::new();
    b.graph_mut().symbols = graph.symbols.clone();
    let mut wide_of: Vec<Option<ValueId>> = vec![None; graph.value_count()];
    for &input in &graph.inputs {
        let data = graph.value(input);
        let value = b.input(data.ty.clone(), data.name.clone());
        let value = if wide(data.ty.dtype) != data.ty.dtype {
            b.convert(value, wide(data.ty.dtype)).map_err(fail)?
        } else {
            value
        };
        wide_of[input.index_usize()] = Some(value);
    }
    for (_, node) in graph.nodes() {
        b.set_loc(node.loc.clone());
        let operands: Vec<ValueId> = node
            .operands
            .iter()
            .map(|&operand| wide_of[operand.index_usize()].expect("a verified graph defines operands first"))
            .collect();
        let widened = match &node.op {
            Op::Constant(literal) if wide(literal.dtype()) != literal.dtype() => {
                let narrow = b.constant(literal.clone());
                Some(vec![b.convert(narrow, wide(literal.dtype())).map_err(fail)?])
            }
            Op::Convert(dtype) if wide(*dtype) != *dtype => {
                Some(vec![b.convert(operands[0], wide(*dtype)).map_err(fail)?])
            }
            Op::Iota { dtype, .. } if wide(*dtype) != *dtype => {
                let narrow = b.op(node.op.clone(), &[]).map_err(fail)?;
                Some(vec![b.convert(narrow, wide(*dtype)).map_err(fail)?])
            }
            Op::BitcastConvert(_) | Op::While(_) | Op::Kernel(_) | Op::RngBitGenerator { .. } => None,
            op => b.op_results(op.clone(), &operands).ok().map(|results| results.to_vec()),
        };
        let results = match widened {
            Some(results) => results,
            None => {
                // At the op's own dtypes: operands back to theirs, results up to wide.
                let mut narrow_operands = Vec::with_capacity(operands.len());
                for (&operand, &original) in operands.iter().zip(&node.operands) {
                    let dtype = graph.ty(original).dtype;
                    let value =
                        if b.ty(operand).dtype != dtype { b.convert(operand, dtype).map_err(fail)? } else { operand };
                    narrow_operands.push(value);
                }
                let results = b.op_results(node.op.clone(), &narrow_operands).map_err(fail)?;
                let mut wide_results = Vec::with_capacity(results.len());
                for value in results {
                    let dtype = b.ty(value).dtype;
                    wide_results.push(if wide(dtype) != dtype {
                        b.convert(value, wide(dtype)).map_err(fail)?
                    } else {
                        value
                    });
                }
                wide_results
            }
        };
        for (&old, new) in node.results.iter().zip(results) {
            wide_of[old.index_usize()] = Some(new);
        }
    }
    let outputs: Vec<ValueId> =
        graph.outputs.iter().map(|&output| wide_of[output.index_usize()].expect("outputs are defined")).collect();
    Ok(b.finish(&outputs))
}

/// Runs `graph` (inputs as `module`'s signature) on device 0 and reads every output back.
fn run(
    session: &Session,
    module: &Module,
    graph: &Graph,
    weights: &TensorMap,
    inputs: &TensorMap,
) -> Result<Vec<HostTensor>> {
    let runtime = session.runtime();
    let executable = runtime.graph_executable(graph, &CompileSpec::on(0)).map_err(Error::from)?;
    let mut buffers = Vec::with_capacity(module.signature.inputs.len());
    for (input, &value) in module.signature.inputs.iter().zip(&graph.inputs) {
        let what = if input.role == InputRole::UserInput { "input" } else { "weight" };
        let ty = graph.ty(value);
        let tensor = tensor_of(&input.role, &input.key, weights, inputs).ok_or_else(|| Error::MissingTensor {
            what,
            key: input.key.clone(),
            expected: ty.to_string(),
        })?;
        if !tensor.fits(ty) {
            return Err(Error::TensorMismatch {
                what,
                key: input.key.clone(),
                expected: ty.to_string(),
                found: tensor.describe(),
            });
        }
        buffers.push(runtime.upload(tensor, 0).map_err(Error::from)?);
    }
    let refs: Vec<&ttpu_runtime::Buffer> = buffers.iter().collect();
    let outputs = executable.run(&refs).map_err(Error::from)?;
    outputs.iter().map(|buffer| runtime.download(buffer).map_err(Error::from)).collect()
}
