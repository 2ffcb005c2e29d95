//! The graph walk: checks, then one StableHLO op per IR node inside `func.func @main`.
//!
//! Nodes are already in topological order, so one forward pass maps every IR value to the
//! MLIR value that defines it.

use melior::Context;
use melior::dialect::func;
use melior::ir::attribute::{ArrayAttribute, DictionaryAttribute, IntegerAttribute, StringAttribute, TypeAttribute};
use melior::ir::operation::{OperationBuilder, OperationLike, OperationPrintingFlags};
use melior::ir::r#type::FunctionType;
use melior::ir::r#type::IntegerType;
use melior::ir::{
    Attribute, Block, BlockLike, Identifier, Location, Module, Operation, Region, RegionLike, Type, Value,
};
use smallvec::SmallVec;
use std::collections::HashMap;
use std::sync::Arc;

use ttpu_ir::{
    Atom, CompareDirection, DType, Dim, Graph, Literal, Loc, Mesh, Node, Op, ProgramSharding, ReduceKind, Scalar,
    Sharding, TensorType,
};

use crate::complex32;
use crate::context::Session;
use crate::ops::{self, internal};
use crate::types::{tensor_of, tensor_type};
use crate::{Error, LowerOptions};

/// Checks, builds, verifies and prints.
pub(crate) fn lower(graph: &Graph, options: &LowerOptions) -> Result<String, Error> {
    if !options.shape_polymorphic {
        check_static(graph)?;
    }
    ttpu_ir::verify(graph)?;

    let session = Session::new();
    check_aliases(graph, &options.aliases)?;
    if let Some(sharding) = &options.sharding {
        check_sharding(graph, sharding)?;
    }
    let module = build_module(session.context(), &session, graph, &options.aliases, options.sharding.as_ref())
        .map_err(|error| with_diagnostics(error, &session))?;
    verify(&module, &session)?;
    let mut flags = OperationPrintingFlags::new();
    if options.debug_locations {
        flags = flags.enable_debug_info(true, false);
    }
    if options.generic {
        flags = flags.print_generic_operation_form();
    }
    module.as_operation().to_string_with_flags(flags).map_err(|error| internal("printing the module", error))
}

/// Each alias joins an existing input and output of one type, each at most once.
fn check_aliases(graph: &Graph, aliases: &[(usize, usize)]) -> Result<(), Error> {
    for (index, &(input, output)) in aliases.iter().enumerate() {
        let fail = |message: String| Err(Error::Alias { input, output, message });
        let (Some(&input_value), Some(&output_value)) = (graph.inputs.get(input), graph.outputs.get(output)) else {
            return fail(format!("the graph has {} inputs and {} outputs", graph.inputs.len(), graph.outputs.len()));
        };
        if graph.ty(input_value) != graph.ty(output_value) {
            return fail(format!("types differ ({} and {})", graph.ty(input_value), graph.ty(output_value)));
        }
        if aliases[..index]
            .iter()
            .any(|&(earlier_input, earlier_output)| earlier_input == input || earlier_output == output)
        {
            return fail("the input or the output is aliased twice".into());
        }
    }
    Ok(())
}

/// One sharding per input and output, each fitting its value's type.
fn check_sharding(graph: &Graph, sharding: &ProgramSharding) -> Result<(), Error> {
    let fail = |message: String| Err(Error::Sharding { message });
    if sharding.inputs.len() != graph.inputs.len() || sharding.outputs.len() != graph.outputs.len() {
        return fail(format!(
            "{} input and {} output shardings for a graph of {} inputs and {} outputs",
            sharding.inputs.len(),
            sharding.outputs.len(),
            graph.inputs.len(),
            graph.outputs.len()
        ));
    }
    let values =
        graph.inputs.iter().zip(&sharding.inputs).enumerate().map(|(index, pair)| (format!("input {index}"), pair));
    let results =
        graph.outputs.iter().zip(&sharding.outputs).enumerate().map(|(index, pair)| (format!("output {index}"), pair));
    for (what, (&value, placement)) in values.chain(results) {
        if let Err(error) = placement.check(&sharding.mesh, graph.ty(value), &what) {
            return fail(error.message);
        }
    }
    Ok(())
}

/// `#sdy.mesh<["dp"=2, "tp"=4]>`.
fn sdy_mesh(mesh: &Mesh) -> String {
    let axes: Vec<String> = mesh.axes().iter().map(|(name, size)| format!("\"{name}\"={size}")).collect();
    format!("#sdy.mesh<[{}]>", axes.join(", "))
}

/// `#sdy.sharding<@mesh, [{"dp"}, {}]>`: per dim the axes it is split over, major to minor. The
/// dims are closed (`{}` without `?`): the partitioner keeps exactly this layout at the boundary.
fn sdy_sharding(sharding: &Sharding) -> String {
    let dims: Vec<String> = sharding
        .dims
        .iter()
        .map(|axes| {
            let names: Vec<String> = axes.iter().map(|axis| format!("\"{axis}\"")).collect();
            format!("{{{}}}", names.join(", "))
        })
        .collect();
    format!("#sdy.sharding<@mesh, [{}]>", dims.join(", "))
}

/// Runs MLIR's verifier, turning its diagnostics into [`Error::Verify`].
fn verify(module: &Module<'_>, session: &Session) -> Result<(), Error> {
    if module.as_operation().verify() { Ok(()) } else { Err(Error::Verify { message: session.take_diagnostics() }) }
}

/// Appends whatever MLIR reported to an internal error, where the real cause usually is.
fn with_diagnostics(error: Error, session: &Session) -> Error {
    let diagnostics = session.take_diagnostics();
    match error {
        Error::Internal { message } if !diagnostics.is_empty() => {
            Error::Internal { message: format!("{message}\n{diagnostics}") }
        }
        other => other,
    }
}

/// Refuses symbolic dims, naming the first value (inputs, then results in node order) that has
/// one.
fn check_static(graph: &Graph) -> Result<(), Error> {
    let results = graph.nodes().flat_map(|(_, node)| node.results.iter().copied());
    for value in graph.inputs.iter().copied().chain(results) {
        let ty = graph.ty(value);
        if !ty.shape.is_static() {
            return Err(Error::DynamicDims { value, ty: ty.clone() });
        }
    }
    Ok(())
}

/// `loc("name"("origin"))`: the FX node name wrapping its origin, so XLA messages and
/// profiles name the node.
fn location<'c>(context: &'c Context, loc: &Loc) -> Location<'c> {
    let unknown = Location::unknown(context);
    match (&loc.name, &loc.origin) {
        (Some(name), Some(origin)) => Location::name(context, name, Location::name(context, origin, unknown)),
        (Some(name), None) => Location::name(context, name, unknown),
        (None, Some(origin)) => Location::name(context, origin, unknown),
        (None, None) => unknown,
    }
}

/// The module holding `func.func @main`.
fn build_module<'c>(
    context: &'c Context,
    session: &Session,
    graph: &Graph,
    aliases: &[(usize, usize)],
    sharding: Option<&ProgramSharding>,
) -> Result<Module<'c>, Error> {
    let unknown = Location::unknown(context);
    let types = |values: &[ttpu_ir::ValueId]| -> Result<Vec<Type<'c>>, Error> {
        values.iter().map(|&value| tensor_type(context, graph.ty(value))).collect()
    };
    let input_types = types(&graph.inputs)?;
    let output_types = types(&graph.outputs)?;
    let arguments: Vec<(Type<'c>, Location<'c>)> = graph
        .inputs
        .iter()
        .zip(&input_types)
        .map(|(&input, &ty)| {
            let name = graph.value(input).name.as_deref();
            (ty, name.map_or(unknown, |name| Location::name(context, name, unknown)))
        })
        .collect();
    // Kernels' functions come first, so `@main` is the module's last function.
    let module = Module::new(unknown);
    let callees = crate::kernel::inline_kernels(context, session, &module, graph)?;
    let lowering = Lowering { callees: &callees, replicate: sharding.is_some() };
    let block = Block::new(&arguments);
    lower_body(context, &lowering, graph, &block, Terminator::Function)?;

    let region = Region::new();
    region.append_block(block);
    let signature = FunctionType::new(context, &input_types, &output_types);
    // Donation: XLA reads `tf.aliasing_output` on an entry argument as "this output may reuse the
    // argument's buffer" (the attribute JAX writes for donated arguments).
    // Sharding: Shardy reads `sdy.sharding` on entry arguments and results, naming the module's
    // `sdy.mesh`.
    let parse = |text: &str| {
        Attribute::parse(context, text).ok_or_else(|| Error::Internal { message: format!("`{text}` does not parse") })
    };
    let sharding_attribute = |placement: &Sharding| -> Result<(Identifier<'c>, Attribute<'c>), Error> {
        Ok((Identifier::new(context, "sdy.sharding"), parse(&sdy_sharding(placement))?))
    };
    let mut attributes = Vec::new();
    if !aliases.is_empty() || sharding.is_some() {
        let i32_type = IntegerType::new(context, 32).into();
        let per_argument: Vec<Attribute<'c>> = (0..graph.inputs.len())
            .map(|input| {
                let mut entries: Vec<(Identifier<'c>, Attribute<'c>)> = aliases
                    .iter()
                    .filter(|&&(aliased, _)| aliased == input)
                    .map(|&(_, output)| {
                        let output = i64::try_from(output).unwrap_or(i64::MAX);
                        (Identifier::new(context, "tf.aliasing_output"), IntegerAttribute::new(i32_type, output).into())
                    })
                    .collect();
                if let Some(sharding) = sharding {
                    entries.push(sharding_attribute(&sharding.inputs[input])?);
                }
                Ok(DictionaryAttribute::new(context, &entries).into())
            })
            .collect::<Result<_, Error>>()?;
        attributes.push((Identifier::new(context, "arg_attrs"), ArrayAttribute::new(context, &per_argument).into()));
    }
    if let Some(sharding) = sharding {
        let per_result: Vec<Attribute<'c>> = sharding
            .outputs
            .iter()
            .map(|placement| Ok(DictionaryAttribute::new(context, &[sharding_attribute(placement)?]).into()))
            .collect::<Result<_, Error>>()?;
        attributes.push((Identifier::new(context, "res_attrs"), ArrayAttribute::new(context, &per_result).into()));
    }
    let main = func::func(
        context,
        StringAttribute::new(context, "main"),
        TypeAttribute::new(signature.into()),
        region,
        &attributes,
        unknown,
    );
    if let Some(sharding) = sharding {
        let mesh = OperationBuilder::new("sdy.mesh", unknown)
            .add_attributes(&[
                (Identifier::new(context, "sym_name"), StringAttribute::new(context, "mesh").into()),
                (Identifier::new(context, "mesh"), parse(&sdy_mesh(&sharding.mesh))?),
            ])
            .build()
            .map_err(|error| internal("building sdy.mesh", error))?;
        // The mesh is defined before the functions that name it.
        match module.body().first_operation() {
            Some(first) => module.body().insert_operation_before(first, mesh),
            None => module.body().append_operation(mesh),
        };
    }
    module.body().append_operation(main);
    Ok(module)
}

/// How a lowered graph hands back its outputs.
#[derive(Clone, Copy)]
enum Terminator {
    /// `func.return`: the graph is `@main`.
    Function,
    /// `stablehlo.return`: the graph is a region of an op (a loop's condition or body).
    Region,
}

/// What every graph of one module lowers with.
struct Lowering<'k> {
    /// The inlined function of each StableHLO kernel.
    callees: &'k crate::kernel::Callees,
    /// Whether the module is sharded (over `@mesh`): kernel operands and results are then
    /// replicated.
    replicate: bool,
}

/// Fills `block` (whose arguments are the graph's inputs): every node, then the terminator.
fn lower_body<'c>(
    context: &'c Context,
    lowering: &Lowering<'_>,
    graph: &Graph,
    block: &Block<'c>,
    terminator: Terminator,
) -> Result<(), Error> {
    let mut values: Vec<Option<Value<'c, '_>>> = vec![None; graph.value_count()];
    let mut sizes = RuntimeSizes::new(graph);
    for (index, &input) in graph.inputs.iter().enumerate() {
        let argument = block.argument(index).map_err(|error| internal("reading a block argument", error))?;
        values[input.index_usize()] = Some(argument.into());
    }
    for (_, node) in graph.nodes() {
        let operands = node
            .operands
            .iter()
            .map(|&operand| lookup(&values, operand))
            .collect::<Result<SmallVec<[Value<'c, '_>; 4]>, Error>>()?;
        if let Op::Kernel(kernel) = &node.op {
            let loc = location(context, &node.loc);
            let results = node
                .results
                .iter()
                .map(|&result| tensor_type(context, graph.ty(result)))
                .collect::<Result<Vec<_>, Error>>()?;
            // Under a mesh a kernel sees whole tensors: its operands and results are replicated,
            // so the partitioner never splits what the kernel was written for.
            let mut replicated_operands = Vec::with_capacity(operands.len());
            for (&value, &operand) in operands.iter().zip(&node.operands) {
                replicated_operands.push(replicated(context, lowering, block, value, graph.ty(operand), loc)?);
            }
            let operands = replicated_operands;
            let operation = crate::kernel::call(context, lowering.callees, kernel, &operands, &results, loc)?;
            let defined = block.append_operation(operation);
            for (slot, &result) in node.results.iter().enumerate() {
                let value = defined.result(slot).map_err(|error| internal("reading a kernel result", error))?;
                let value = replicated(context, lowering, block, value.into(), graph.ty(result), loc)?;
                values[result.index_usize()] = Some(value);
            }
            continue;
        }
        if let Op::While(while_loop) = &node.op {
            let operation = lower_while(context, lowering, graph, node, while_loop, &operands)?;
            let defined = block.append_operation(operation);
            for (slot, &result) in node.results.iter().enumerate() {
                let value = defined.result(slot).map_err(|error| internal("reading a loop result", error))?;
                values[result.index_usize()] = Some(value.into());
            }
            continue;
        }
        let [result] = node.results[..] else {
            return Err(Error::Internal {
                message: format!("`{}` has {} results", node.op.mnemonic(), node.results.len()),
            });
        };
        let result_type = graph.ty(result);
        let operation = match dynamic_form(node, result_type) {
            true => lower_dynamic_node(context, graph, block, &mut sizes, node, &operands, result_type)?,
            false => lower_node(context, graph, block, node, &operands, result_type)?,
        };
        let defined = block.append_operation(operation);
        // `rng_bit_generator` returns (new state, bits); the IR node is the bits.
        // `sort` returns (keys, positions); the IR's argsort is the positions.
        let slot = if matches!(node.op, Op::RngBitGenerator { .. } | Op::ArgSort { .. }) { 1 } else { 0 };
        let mut value: Value<'c, '_> =
            defined.result(slot).map_err(|error| internal("reading an op result", error))?.into();
        if result_type.dtype == DType::C32 && complex32::computes(&node.op) {
            value = complex32::round(context, block, value, result_type, location(context, &node.loc))?;
        }
        values[result.index_usize()] = Some(value);
    }
    let outputs =
        graph.outputs.iter().map(|&output| lookup(&values, output)).collect::<Result<Vec<Value<'c, '_>>, Error>>()?;
    let unknown = Location::unknown(context);
    block.append_operation(match terminator {
        Terminator::Function => func::r#return(&outputs, unknown),
        Terminator::Region => ops::r#return(&outputs, unknown)?,
    });
    Ok(())
}

/// `value` constrained to be whole on every device when the module is sharded (as it is).
fn replicated<'c, 'a>(
    context: &'c Context,
    lowering: &Lowering<'_>,
    block: &'a Block<'c>,
    value: Value<'c, 'a>,
    ty: &TensorType,
    loc: Location<'c>,
) -> Result<Value<'c, 'a>, Error> {
    if !lowering.replicate {
        return Ok(value);
    }
    let whole = Sharding::replicated(ty.shape.rank());
    append(block, ops::sharding_constraint(context, value, &sdy_sharding(&whole), loc)?)
}

/// `stablehlo.while`: each of the loop's graphs becomes a region whose block arguments are the
/// loop state.
fn lower_while<'c>(
    context: &'c Context,
    lowering: &Lowering<'_>,
    graph: &Graph,
    node: &Node,
    while_loop: &ttpu_ir::WhileLoop,
    operands: &[Value<'c, '_>],
) -> Result<Operation<'c>, Error> {
    let loc = location(context, &node.loc);
    let state =
        node.results.iter().map(|&result| tensor_type(context, graph.ty(result))).collect::<Result<Vec<_>, Error>>()?;
    let region = |part: &Graph| -> Result<Region<'c>, Error> {
        let arguments: Vec<(Type<'c>, Location<'c>)> = state.iter().map(|&ty| (ty, loc)).collect();
        let block = Block::new(&arguments);
        lower_body(context, lowering, part, &block, Terminator::Region)?;
        let region = Region::new();
        region.append_block(block);
        Ok(region)
    };
    ops::while_loop(operands, &state, region(&while_loop.cond)?, region(&while_loop.body)?, loc)
}

/// Whether `node` needs a shape-polymorphic op: its result shape (or a slice bound) is only
/// known at run time and the static op would spell it as an attribute.
fn dynamic_form(node: &Node, result_type: &TensorType) -> bool {
    match &node.op {
        Op::Reshape(_) | Op::BroadcastInDim { .. } | Op::Iota { .. } | Op::ArgSort { .. } => {
            !result_type.shape.is_static()
        }
        Op::Slice { limit, .. } => limit.iter().any(|end| end.as_static().is_none()),
        _ => false,
    }
}

/// The shape-polymorphic op of a node whose sizes are computed at run time.
fn lower_dynamic_node<'c, 'a>(
    context: &'c Context,
    graph: &Graph,
    block: &'a Block<'c>,
    sizes: &mut RuntimeSizes<'c, 'a>,
    node: &Node,
    operands: &[Value<'c, 'a>],
    result_type: &TensorType,
) -> Result<Operation<'c>, Error> {
    let loc = location(context, &node.loc);
    let result = tensor_type(context, result_type)?;
    let shape = result_type.shape.dims();
    match &node.op {
        Op::Reshape(_) => {
            let shape = sizes.shape(context, block, shape, loc)?;
            ops::dynamic_reshape(operands[0], shape, result, loc)
        }
        Op::BroadcastInDim { dims, .. } => {
            let shape = sizes.shape(context, block, shape, loc)?;
            ops::dynamic_broadcast_in_dim(context, operands[0], shape, dims, result, loc)
        }
        Op::Iota { dimension, .. } => {
            let shape = sizes.shape(context, block, shape, loc)?;
            ops::dynamic_iota(context, shape, *dimension, result, loc)
        }
        Op::ArgSort { dimension, descending } => {
            let shape = sizes.shape(context, block, shape, loc)?;
            let positions = append(block, ops::dynamic_iota(context, shape, *dimension, result, loc)?)?;
            let operand = graph.ty(node.operands[0]);
            let keys = tensor_type(context, operand)?;
            ops::sort(context, operands[0], positions, *dimension, *descending, operand.dtype, [keys, result], loc)
        }
        Op::Slice { start, limit, strides } => {
            let as_dims = |values: &[i64]| values.iter().map(|&value| Dim::Static(value)).collect::<Vec<Dim>>();
            let start = sizes.shape(context, block, &as_dims(start), loc)?;
            let limit = sizes.shape(context, block, limit, loc)?;
            let strides = sizes.shape(context, block, &as_dims(strides), loc)?;
            ops::real_dynamic_slice(operands[0], start, limit, strides, result, loc)
        }
        other => Err(Error::Internal { message: format!("`{}` has no shape-polymorphic form", other.mnemonic()) }),
    }
}

/// Sizes computed in the module at run time: a symbol is the size of an input dim that carries it
/// (`get_dimension_size`), a compound dim is arithmetic on those. Each dim is computed once.
struct RuntimeSizes<'c, 'a> {
    /// For each symbol, the first input (argument index) and dim that has exactly that size.
    sources: HashMap<Arc<str>, (usize, i64)>,
    /// For a symbol no input dim has alone: an input dim linear in it (`2*s6`), as the argument,
    /// dim, coefficient and the rest of its size (`size == a * symbol + rest`).
    solved: HashMap<Arc<str>, (usize, i64, i64, ttpu_ir::DimExpr)>,
    /// Each dim as a `tensor<i64>`.
    computed: HashMap<Dim, Value<'c, 'a>>,
    /// Each dim as a `tensor<1xi64>`, the pieces of shape tensors.
    pieces: HashMap<Dim, Value<'c, 'a>>,
}

impl<'c, 'a> RuntimeSizes<'c, 'a> {
    fn new(graph: &Graph) -> RuntimeSizes<'c, 'a> {
        let mut sources = HashMap::new();
        for (argument, &input) in graph.inputs.iter().enumerate() {
            for (index, dim) in graph.ty(input).shape.dims().iter().enumerate() {
                if let Dim::Sym(name) = dim {
                    sources.entry(name.clone()).or_insert((argument, index as i64));
                }
            }
        }
        let mut solved = HashMap::new();
        for (argument, &input) in graph.inputs.iter().enumerate() {
            for (index, dim) in graph.ty(input).shape.dims().iter().enumerate() {
                let Dim::Expr(expr) = dim else { continue };
                for symbol in expr.symbols() {
                    if sources.contains_key(&symbol) || solved.contains_key(&symbol) {
                        continue;
                    }
                    // The rest must be computable from symbols that inputs give directly.
                    if let Some((coefficient, rest)) = expr.linear_in(&symbol)
                        && rest.symbols().iter().all(|name| sources.contains_key(name))
                    {
                        solved.insert(symbol, (argument, index as i64, coefficient, rest));
                    }
                }
            }
        }
        RuntimeSizes { sources, solved, computed: HashMap::new(), pieces: HashMap::new() }
    }

    /// `dims` as a `tensor<Nxi64>`: one constant when every dim is static.
    fn shape(
        &mut self,
        context: &'c Context,
        block: &'a Block<'c>,
        dims: &[Dim],
        location: Location<'c>,
    ) -> Result<Value<'c, 'a>, Error> {
        if let Some(values) = dims.iter().map(Dim::as_static).collect::<Option<Vec<i64>>>() {
            let scalars: Vec<Scalar> = values.iter().map(|&value| Scalar::Int(value)).collect();
            let literal = Literal::from_scalars(DType::I64, &[values.len() as i64], &scalars)
                .map_err(|error| internal("a shape constant", format!("{error:?}")))?;
            return append(block, ops::constant(context, &literal, location)?);
        }
        let one = tensor_of(context, DType::I64, &[1])?;
        let mut pieces = Vec::with_capacity(dims.len());
        for dim in dims {
            let piece = match self.pieces.get(dim) {
                Some(piece) => *piece,
                None => {
                    let scalar = self.scalar(context, block, dim, location)?;
                    let piece = append(block, ops::reshape(scalar, one, location)?)?;
                    self.pieces.insert(dim.clone(), piece);
                    piece
                }
            };
            pieces.push(piece);
        }
        if let [piece] = pieces[..] {
            return Ok(piece);
        }
        let result = tensor_of(context, DType::I64, &[dims.len() as i64])?;
        append(block, ops::concatenate(context, &pieces, 0, result, location)?)
    }

    /// `dim` as a `tensor<i64>`.
    fn scalar(
        &mut self,
        context: &'c Context,
        block: &'a Block<'c>,
        dim: &Dim,
        location: Location<'c>,
    ) -> Result<Value<'c, 'a>, Error> {
        if let Some(value) = self.computed.get(dim) {
            return Ok(*value);
        }
        let i64_type = tensor_of(context, DType::I64, &[])?;
        let constant = |value: i64| ops::constant(context, &Literal::scalar(DType::I64, Scalar::Int(value)), location);
        let value = match dim {
            Dim::Static(value) => append(block, constant(*value)?)?,
            Dim::Sym(name) if !self.sources.contains_key(name) => {
                // `size == a * symbol + rest`, so `symbol == (size - rest) / a`, exactly.
                let (argument, index, coefficient, rest) =
                    self.solved.get(name).cloned().ok_or_else(|| Error::UnboundSymbol { symbol: name.to_string() })?;
                let argument = block.argument(argument).map_err(|error| internal("reading an argument", error))?;
                let size = append(block, ops::get_dimension_size(context, argument.into(), index, location)?)?;
                let size = append(block, ops::convert(size, i64_type, location)?)?;
                let rest = self.scalar(context, block, &rest.into_dim(), location)?;
                let difference = append(block, ops::subtract(size, rest, i64_type, location)?)?;
                let coefficient = append(block, constant(coefficient)?)?;
                append(block, ops::divide(difference, coefficient, i64_type, location)?)?
            }
            Dim::Sym(name) => {
                let &(argument, index) =
                    self.sources.get(name).ok_or_else(|| Error::UnboundSymbol { symbol: name.to_string() })?;
                let argument = block.argument(argument).map_err(|error| internal("reading an argument", error))?;
                let size = append(block, ops::get_dimension_size(context, argument.into(), index, location)?)?;
                append(block, ops::convert(size, i64_type, location)?)?
            }
            Dim::Expr(expr) => {
                let mut sum: Option<Value<'c, 'a>> = None;
                for (coefficient, atoms) in expr.terms() {
                    // A unit coefficient needs no multiplication.
                    let mut term = (coefficient != 1 || atoms.is_empty())
                        .then(|| constant(coefficient).and_then(|op| append(block, op)))
                        .transpose()?;
                    for (atom, exponent) in atoms {
                        let factor = self.atom(context, block, atom, location)?;
                        for _ in 0..*exponent {
                            term = Some(match term {
                                Some(term) => append(block, ops::multiply(term, factor, i64_type, location)?)?,
                                None => factor,
                            });
                        }
                    }
                    let term = term.ok_or_else(|| internal("an empty term", "no factors"))?;
                    sum = Some(match sum {
                        Some(sum) => append(block, ops::add(sum, term, i64_type, location)?)?,
                        None => term,
                    });
                }
                match sum {
                    Some(sum) => sum,
                    None => append(block, constant(0)?)?,
                }
            }
        };
        self.computed.insert(dim.clone(), value);
        Ok(value)
    }

    /// One factor of a compound dim. Floor division and modulo round as Python does (toward
    /// negative infinity), which StableHLO's truncating `divide`/`remainder` need fixing up for.
    fn atom(
        &mut self,
        context: &'c Context,
        block: &'a Block<'c>,
        atom: &Atom,
        location: Location<'c>,
    ) -> Result<Value<'c, 'a>, Error> {
        let (inner, divisor, floor) = match atom {
            Atom::Sym(name) => return self.scalar(context, block, &Dim::Sym(name.clone()), location),
            Atom::Min(a, b) | Atom::Max(a, b) => {
                let i64_type = tensor_of(context, DType::I64, &[])?;
                let a = self.scalar(context, block, &(**a).clone().into_dim(), location)?;
                let b = self.scalar(context, block, &(**b).clone().into_dim(), location)?;
                let build = if matches!(atom, Atom::Min(..)) { ops::minimum } else { ops::maximum };
                return append(block, build(a, b, i64_type, location)?);
            }
            Atom::FloorDiv(inner, divisor) => (inner, *divisor, true),
            Atom::Mod(inner, divisor) => (inner, *divisor, false),
        };
        let i64_type = tensor_of(context, DType::I64, &[])?;
        let bool_type = tensor_of(context, DType::Bool, &[])?;
        let constant = |value: i64| ops::constant(context, &Literal::scalar(DType::I64, Scalar::Int(value)), location);
        let numerator = self.scalar(context, block, &(**inner).clone().into_dim(), location)?;
        let divisor_value = append(block, constant(divisor)?)?;
        let zero = append(block, constant(0)?)?;
        let remainder = append(block, ops::remainder(numerator, divisor_value, i64_type, location)?)?;
        // The divisor is positive, so truncation differs from flooring exactly when the
        // remainder is negative.
        let negative = append(
            block,
            ops::compare(context, remainder, zero, CompareDirection::Lt, DType::I64, bool_type, location)?,
        )?;
        let (truncated, fixed) = if floor {
            let quotient = append(block, ops::divide(numerator, divisor_value, i64_type, location)?)?;
            let one = append(block, constant(1)?)?;
            (quotient, append(block, ops::subtract(quotient, one, i64_type, location)?)?)
        } else {
            (remainder, append(block, ops::add(remainder, divisor_value, i64_type, location)?)?)
        };
        append(block, ops::select(negative, fixed, truncated, i64_type, location)?)
    }
}

/// Appends `operation` and returns its first result.
pub(crate) fn append<'c, 'a>(block: &'a Block<'c>, operation: Operation<'c>) -> Result<Value<'c, 'a>, Error> {
    let defined = block.append_operation(operation);
    defined.result(0).map(Into::into).map_err(|error| internal("reading an op result", error))
}

/// The MLIR value defining `value`.
fn lookup<'c, 'a>(values: &[Option<Value<'c, 'a>>], value: ttpu_ir::ValueId) -> Result<Value<'c, 'a>, Error> {
    values[value.index_usize()].ok_or_else(|| Error::Internal { message: format!("{value} used before it is defined") })
}

/// The init value of a reduction of `dtype` with `kind`, as a 0-d constant appended to `block`.
fn init_value<'c, 'a>(
    context: &'c Context,
    block: &'a Block<'c>,
    kind: ReduceKind,
    dtype: DType,
    location: Location<'c>,
) -> Result<Value<'c, 'a>, Error> {
    let constant = ops::constant(context, &Literal::scalar(dtype, kind.identity(dtype)), location)?;
    let defined = block.append_operation(constant);
    defined.result(0).map(Into::into).map_err(|error| internal("reading an op result", error))
}

/// The StableHLO op of one node (appending a reduction's init constant to `block` first).
fn lower_node<'c>(
    context: &'c Context,
    graph: &Graph,
    block: &Block<'c>,
    node: &Node,
    operands: &[Value<'c, '_>],
    result_type: &TensorType,
) -> Result<Operation<'c>, Error> {
    let loc = location(context, &node.loc);
    let result = tensor_type(context, result_type)?;
    let operand_dtype = || graph.ty(node.operands[0]).dtype;
    let operand_c32 = node.operands.first().is_some_and(|&operand| graph.ty(operand).dtype == DType::C32);
    complex32::check(
        &node.op,
        node.operands.iter().map(|&operand| graph.ty(operand).dtype).chain([result_type.dtype]),
    )?;
    match &node.op {
        Op::Constant(literal) if literal.dtype() == DType::Bool && literal.splat_value().is_none() => {
            // MLIR packs `i1` data eight elements a byte when it prints large constants in hex,
            // and XLA's parser reads one byte per element: spell the data as `ui8` and convert.
            let bytes: Vec<u8> = literal.bytes().iter().map(|&byte| u8::from(byte != 0)).collect();
            let as_bytes = Literal::from_bytes(DType::U8, literal.dims(), bytes).map_err(|error| Error::Internal {
                message: format!("bool constant of {} bytes: {error:?}", error.actual),
            })?;
            let defined = block.append_operation(ops::constant(context, &as_bytes, loc)?);
            let value = defined.result(0).map_err(|error| internal("reading an op result", error))?;
            ops::convert(value.into(), result, loc)
        }
        Op::Constant(literal) => ops::constant(context, literal, loc),
        Op::Iota { dimension, .. } => ops::iota(context, *dimension, result, loc),
        // `abs` of a complex32 is computed in f32 and rounded to the IR's f16.
        Op::Unary(ttpu_ir::UnaryOp::Abs) if operand_c32 => {
            let wide = tensor_type(context, &TensorType::new(DType::F32, result_type.shape.clone()))?;
            let magnitude = append(block, ops::abs(operands[0], wide, loc)?)?;
            ops::convert(magnitude, result, loc)
        }
        Op::Unary(op) => ops::unary_builder(*op)(operands[0], result, loc),
        Op::Binary(op) => ops::binary_builder(*op)(operands[0], operands[1], result, loc),
        Op::Compare(direction) => {
            ops::compare(context, operands[0], operands[1], *direction, operand_dtype(), result, loc)
        }
        Op::Select => ops::select(operands[0], operands[1], operands[2], result, loc),
        Op::Clamp => ops::clamp(operands[0], operands[1], operands[2], result, loc),
        Op::Convert(_) => ops::convert(operands[0], result, loc),
        Op::BitcastConvert(_) => ops::bitcast_convert(operands[0], result, loc),
        Op::Real if operand_c32 => complex32::part(context, block, "stablehlo.real", operands[0], result_type, loc),
        Op::Imag if operand_c32 => complex32::part(context, block, "stablehlo.imag", operands[0], result_type, loc),
        Op::Complex if result_type.dtype == DType::C32 => {
            let parts = complex32::widen(context, block, &operands[..2], result_type, loc)?;
            ops::complex_part("stablehlo.complex", &parts, result, loc)
        }
        Op::Real => ops::complex_part("stablehlo.real", &operands[..1], result, loc),
        Op::Imag => ops::complex_part("stablehlo.imag", &operands[..1], result, loc),
        Op::Complex => ops::complex_part("stablehlo.complex", &operands[..2], result, loc),
        Op::Fft { kind, length } => ops::fft(context, operands[0], *kind, length, result, loc),
        Op::Reshape(_) => ops::reshape(operands[0], result, loc),
        Op::Transpose(permutation) => ops::transpose(context, operands[0], permutation, result, loc),
        Op::BroadcastInDim { dims, .. } => ops::broadcast_in_dim(context, operands[0], dims, result, loc),
        Op::Slice { start, limit, strides } => {
            let limit: SmallVec<[i64; 4]> =
                limit.iter().map(Dim::as_static).collect::<Option<_>>().ok_or_else(|| Error::Internal {
                    message: "a symbolic slice limit reached the static form".into(),
                })?;
            ops::slice(context, operands[0], start, &limit, strides, result, loc)
        }
        Op::Concatenate(dimension) => ops::concatenate(context, operands, *dimension, result, loc),
        Op::Pad { low, high, interior } => {
            ops::pad(context, operands[0], operands[1], low, high, interior, result, loc)
        }
        Op::DotGeneral(dims) => ops::dot_general(context, operands[0], operands[1], dims, result, loc),
        Op::Reduce { kind, dimensions } => {
            let dtype = operand_dtype();
            let init = init_value(context, block, *kind, dtype, loc)?;
            let scalar = tensor_of(context, dtype, &[])?;
            ops::reduce(context, operands[0], init, dimensions, kind.combiner(), scalar, result, loc)
        }
        Op::ReduceWindow { kind, window } => {
            let dtype = operand_dtype();
            let init = init_value(context, block, *kind, dtype, loc)?;
            let scalar = tensor_of(context, dtype, &[])?;
            ops::reduce_window(context, operands[0], init, window, kind.combiner(), scalar, result, loc)
        }
        Op::Convolution(dims) => ops::convolution(context, operands[0], operands[1], dims, result, loc),
        Op::Collective(collective) => {
            let scalar = tensor_of(context, operand_dtype(), &[])?;
            ops::collective(context, collective, operands[0], scalar, result, loc)
        }
        Op::Gather(dims) => ops::gather(context, operands[0], operands[1], dims, result, loc),
        Op::Scatter(dims) => {
            let scalar = tensor_of(context, operand_dtype(), &[])?;
            ops::scatter(context, operands[0], operands[1], operands[2], dims, scalar, result, loc)
        }
        Op::RngBitGenerator { algorithm, .. } => {
            let state = tensor_type(context, graph.ty(node.operands[0]))?;
            ops::rng_bit_generator(context, operands[0], *algorithm, state, result, loc)
        }
        Op::ArgSort { dimension, descending } => {
            let positions = block.append_operation(ops::iota(context, *dimension, result, loc)?);
            let positions = positions.result(0).map_err(|error| internal("reading an op result", error))?;
            let keys = tensor_type(context, graph.ty(node.operands[0]))?;
            let dtype = operand_dtype();
            ops::sort(context, operands[0], positions.into(), *dimension, *descending, dtype, [keys, result], loc)
        }
        Op::While(_) | Op::Kernel(_) => {
            Err(Error::Internal { message: format!("`{}` reached the one-result lowering", node.op.mnemonic()) })
        }
        Op::DimSize(dimension) => {
            // `get_dimension_size` answers in i32; the IR's sizes are i64.
            let size = block.append_operation(ops::get_dimension_size(context, operands[0], *dimension, loc)?);
            let size = size.result(0).map_err(|error| internal("reading an op result", error))?;
            ops::convert(size.into(), result, loc)
        }
    }
}

#[cfg(test)]
mod tests {
    use melior::ir::r#type::RankedTensorType;

    use super::*;

    /// Valid graphs never fail MLIR verification, so this builds a broken module by hand: the
    /// function promises `tensor<3xf32>` and returns a `tensor<2xf32>`.
    #[test]
    fn verifier_diagnostics_become_the_error_message() {
        let session = Session::new();
        let context = session.context();
        let f32_type = Type::float32(context);
        let two: Type = RankedTensorType::new(&[2], f32_type, None).into();
        let three: Type = RankedTensorType::new(&[3], f32_type, None).into();
        let location = Location::name(context, "broken", Location::unknown(context));
        let block = Block::new(&[(two, location)]);
        let argument = block.argument(0).unwrap().into();
        block.append_operation(func::r#return(&[argument], location));
        let region = Region::new();
        region.append_block(block);
        let signature = FunctionType::new(context, &[two], &[three]);
        let main = func::func(
            context,
            StringAttribute::new(context, "main"),
            TypeAttribute::new(signature.into()),
            region,
            &[],
            location,
        );
        let module = Module::new(location);
        module.body().append_operation(main);
        let error = verify(&module, &session).unwrap_err();
        assert_eq!(
            error.to_string(),
            "MLIR verification failed: loc(\"broken\"): type of return operand 0 ('tensor<2xf32>') doesn't match \
             function result type ('tensor<3xf32>') in function @main\n  note: see current operation: \
             \"func.return\"(%arg0) : (tensor<2xf32>) -> ()"
        );
    }
}
