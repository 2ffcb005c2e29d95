//! One typed builder per StableHLO op, each creating the op in generic form with melior's
//! `OperationBuilder`.
//!
//! Attribute names and formats follow the current StableHLO dialect (`StablehloOps.td`,
//! `StablehloAttrs.td`): index lists are `array<i64: ...>` (`DenseI64ArrayAttr`), paddings
//! are `dense<[[lo, hi], ...]> : tensor<Nx2xi64>`, scalars are `i64` integer attributes and
//! flags are `BoolAttr`s. StableHLO's own structured attributes (`#stablehlo.dot<...>`,
//! `#stablehlo.conv<...>`, `#stablehlo.gather<...>`, `#stablehlo.scatter<...>`,
//! `#stablehlo<comparison_direction ...>`) have no builder without the dialect, so each is
//! spelled once, in the builder of the op that needs it, and parsed as an opaque dialect
//! attribute that MLIR prints back verbatim. Their struct fields mirror StableHLO's printer:
//! empty lists are omitted, which also keeps the text readable by parsers that predate the
//! batching-dims fields.

use melior::Context;
use melior::ir::attribute::{
    BoolAttribute, DenseElementsAttribute, DenseI64ArrayAttribute, DictionaryAttribute, IntegerAttribute,
    StringAttribute,
};
use melior::ir::operation::OperationBuilder;
use melior::ir::r#type::{IntegerType, RankedTensorType};
use melior::ir::{
    Attribute, Block, BlockLike, Identifier, Location, Operation, OperationRef, Region, RegionLike, Type, Value,
};
use ttpu_ir::{
    BinaryOp, CompareDirection, ConvDims, DType, DotDims, FftType, GatherDims, Literal, RngAlgorithm, ScatterDims,
    UnaryOp, Window,
};

use crate::Error;
use crate::types::dense_literal;

/// The signature shared by the builders of one-operand elementwise ops.
pub(crate) type UnaryBuilder = for<'c, 'a> fn(Value<'c, 'a>, Type<'c>, Location<'c>) -> Result<Operation<'c>, Error>;

/// The signature shared by the builders of two-operand elementwise ops.
pub(crate) type BinaryBuilder =
    for<'c, 'a> fn(Value<'c, 'a>, Value<'c, 'a>, Type<'c>, Location<'c>) -> Result<Operation<'c>, Error>;

/// Wraps a melior failure, which can only come from a bug here (never from a valid graph).
pub(crate) fn internal(what: &str, error: impl std::fmt::Display) -> Error {
    Error::Internal { message: format!("{what}: {error}") }
}

/// Creates `name` with everything given; the single place ops are created.
fn build<'c>(
    name: &str,
    location: Location<'c>,
    operands: &[Value<'c, '_>],
    results: &[Type<'c>],
    attributes: &[(Identifier<'c>, Attribute<'c>)],
    regions: Vec<Region<'c>>,
) -> Result<Operation<'c>, Error> {
    OperationBuilder::new(name, location)
        .add_operands(operands)
        .add_results(results)
        .add_attributes(attributes)
        .add_regions_vec(regions)
        .build()
        .map_err(|error| internal(&format!("creating `{name}`"), error))
}

/// A named attribute.
fn named<'c>(context: &'c Context, name: &str, attribute: impl Into<Attribute<'c>>) -> (Identifier<'c>, Attribute<'c>) {
    (Identifier::new(context, name), attribute.into())
}

/// `N : i64`.
fn i64_attr(context: &Context, value: i64) -> Attribute<'_> {
    IntegerAttribute::new(IntegerType::new(context, 64).into(), value).into()
}

/// `array<i64: ...>`.
fn i64_array<'c>(context: &'c Context, values: &[i64]) -> Attribute<'c> {
    DenseI64ArrayAttribute::new(context, values).into()
}

/// `true` / `false`.
fn bool_attr(context: &Context, value: bool) -> Attribute<'_> {
    BoolAttribute::new(context, value).into()
}

/// `dense<[[lo, hi], ...]> : tensor<Nx2xi64>`, StableHLO's padding format.
fn padding_attr<'c>(context: &'c Context, padding: &[(i64, i64)]) -> Attribute<'c> {
    let rows = padding.len() as u64;
    let ty = RankedTensorType::new(&[rows, 2], IntegerType::new(context, 64).into(), None).into();
    let values: Vec<i64> = padding.iter().flat_map(|&(low, high)| [low, high]).collect();
    DenseElementsAttribute::i64_values(ty, &values).into()
}

/// Parses a StableHLO attribute spelled by one of the builders below.
fn opaque<'c>(context: &'c Context, text: &str) -> Result<Attribute<'c>, Error> {
    Attribute::parse(context, text).ok_or_else(|| Error::Internal { message: format!("MLIR did not parse `{text}`") })
}

/// `[0, 1]`, the list syntax inside StableHLO struct attributes.
fn dim_list(dims: &[i64]) -> String {
    let items: Vec<String> = dims.iter().map(i64::to_string).collect();
    format!("[{}]", items.join(", "))
}

/// Appends `name = [..]` to a struct attribute body unless `dims` is empty (as StableHLO's
/// printer does).
fn push_dims(fields: &mut Vec<String>, name: &str, dims: &[i64]) {
    if !dims.is_empty() {
        fields.push(format!("{name} = {}", dim_list(dims)));
    }
}

/// The first result of an op just appended to a block.
fn result<'c, 'a>(operation: OperationRef<'c, 'a>) -> Result<Value<'c, 'a>, Error> {
    operation.result(0).map(Into::into).map_err(|error| internal("reading an op result", error))
}

// ---------------------------------------------------------------------------------------------
// Nullary ops.
// ---------------------------------------------------------------------------------------------

/// `stablehlo.constant` holding `literal` (of its own type).
pub(crate) fn constant<'c>(
    context: &'c Context,
    literal: &Literal,
    location: Location<'c>,
) -> Result<Operation<'c>, Error> {
    let value = dense_literal(context, literal)?;
    let ty = crate::types::tensor_of(context, literal.dtype(), literal.dims())?;
    build("stablehlo.constant", location, &[], &[ty], &[named(context, "value", value)], Vec::new())
}

/// `stablehlo.iota` counting along `dimension`.
pub(crate) fn iota<'c>(
    context: &'c Context,
    dimension: i64,
    result: Type<'c>,
    location: Location<'c>,
) -> Result<Operation<'c>, Error> {
    let attributes = [named(context, "iota_dimension", i64_attr(context, dimension))];
    build("stablehlo.iota", location, &[], &[result], &attributes, Vec::new())
}

// ---------------------------------------------------------------------------------------------
// Elementwise ops without attributes: one builder each, generated.
// ---------------------------------------------------------------------------------------------

macro_rules! unary_builders {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`stablehlo.", stringify!($name), "`.")]
        pub(crate) fn $name<'c>(
            operand: Value<'c, '_>,
            result: Type<'c>,
            location: Location<'c>,
        ) -> Result<Operation<'c>, Error> {
            build(concat!("stablehlo.", stringify!($name)), location, &[operand], &[result], &[], Vec::new())
        }
    )*};
}

macro_rules! binary_builders {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`stablehlo.", stringify!($name), "`.")]
        pub(crate) fn $name<'c, 'a>(
            lhs: Value<'c, 'a>,
            rhs: Value<'c, 'a>,
            result: Type<'c>,
            location: Location<'c>,
        ) -> Result<Operation<'c>, Error> {
            build(concat!("stablehlo.", stringify!($name)), location, &[lhs, rhs], &[result], &[], Vec::new())
        }
    )*};
}

unary_builders!(
    abs,
    negate,
    exponential,
    exponential_minus_one,
    log,
    log_plus_one,
    sqrt,
    rsqrt,
    cbrt,
    tanh,
    logistic,
    sine,
    cosine,
    tan,
    floor,
    ceil,
    round_nearest_even,
    round_nearest_afz,
    sign,
    not,
    is_finite,
    convert,
    bitcast_convert,
    reshape,
);

/// CHLO's special functions, in their generic form (`"chlo.lgamma"(%x)`): the context leaves
/// dialects unregistered, and PJRT plugins legalize CHLO as JAX's modules use it.
macro_rules! chlo_builders {
    ($($name:ident: $($operand:ident),+;)*) => {$(
        #[doc = concat!("`chlo.", stringify!($name), "`.")]
        pub(crate) fn $name<'c, 'a>(
            $($operand: Value<'c, 'a>,)+
            result: Type<'c>,
            location: Location<'c>,
        ) -> Result<Operation<'c>, Error> {
            build(concat!("chlo.", stringify!($name)), location, &[$($operand),+], &[result], &[], Vec::new())
        }
    )*};
}

chlo_builders!(
    lgamma: operand;
    digamma: operand;
    erf_inv: operand;
    erfc: operand;
    bessel_i1e: operand;
    polygamma: lhs, rhs;
    zeta: lhs, rhs;
    next_after: lhs, rhs;
);

binary_builders!(
    add,
    subtract,
    multiply,
    divide,
    remainder,
    power,
    maximum,
    minimum,
    atan2,
    and,
    or,
    xor,
    shift_left,
    shift_right_arithmetic,
    shift_right_logical,
);

/// The builder of an IR unary op.
pub(crate) fn unary_builder(op: UnaryOp) -> UnaryBuilder {
    match op {
        UnaryOp::Abs => abs,
        UnaryOp::Negate => negate,
        UnaryOp::Exponential => exponential,
        UnaryOp::ExponentialMinusOne => exponential_minus_one,
        UnaryOp::Log => log,
        UnaryOp::LogPlusOne => log_plus_one,
        UnaryOp::Sqrt => sqrt,
        UnaryOp::Rsqrt => rsqrt,
        UnaryOp::Cbrt => cbrt,
        UnaryOp::Tanh => tanh,
        UnaryOp::Logistic => logistic,
        UnaryOp::Sine => sine,
        UnaryOp::Cosine => cosine,
        UnaryOp::Tan => tan,
        UnaryOp::Floor => floor,
        UnaryOp::Ceil => ceil,
        UnaryOp::RoundNearestEven => round_nearest_even,
        UnaryOp::RoundNearestAfz => round_nearest_afz,
        UnaryOp::Sign => sign,
        UnaryOp::Not => not,
        UnaryOp::IsFinite => is_finite,
        UnaryOp::Lgamma => lgamma,
        UnaryOp::Digamma => digamma,
        UnaryOp::ErfInv => erf_inv,
        UnaryOp::Erfc => erfc,
        UnaryOp::BesselI1e => bessel_i1e,
    }
}

/// The builder of an IR binary op.
pub(crate) fn binary_builder(op: BinaryOp) -> BinaryBuilder {
    match op {
        BinaryOp::Add => add,
        BinaryOp::Subtract => subtract,
        BinaryOp::Multiply => multiply,
        BinaryOp::Divide => divide,
        BinaryOp::Remainder => remainder,
        BinaryOp::Power => power,
        BinaryOp::Maximum => maximum,
        BinaryOp::Minimum => minimum,
        BinaryOp::Atan2 => atan2,
        BinaryOp::And => and,
        BinaryOp::Or => or,
        BinaryOp::Xor => xor,
        BinaryOp::ShiftLeft => shift_left,
        BinaryOp::ShiftRightArithmetic => shift_right_arithmetic,
        BinaryOp::ShiftRightLogical => shift_right_logical,
        BinaryOp::Polygamma => polygamma,
        BinaryOp::Zeta => zeta,
        BinaryOp::NextAfter => next_after,
    }
}

/// `stablehlo.return`, the terminator of combiner regions.
pub(crate) fn r#return<'c>(values: &[Value<'c, '_>], location: Location<'c>) -> Result<Operation<'c>, Error> {
    build("stablehlo.return", location, values, &[], &[], Vec::new())
}

/// `stablehlo.while` over the loop state `operands`, with the `cond` and `body` regions built.
pub(crate) fn while_loop<'c>(
    operands: &[Value<'c, '_>],
    results: &[Type<'c>],
    cond: Region<'c>,
    body: Region<'c>,
    location: Location<'c>,
) -> Result<Operation<'c>, Error> {
    build("stablehlo.while", location, operands, results, &[], vec![cond, body])
}

/// `stablehlo.custom_call @target` through XLA's typed FFI (`api_version = 4`): `config` becomes
/// the backend config dictionary, which the handler reads as its attributes (strings here).
pub(crate) fn custom_call_ffi<'c>(
    context: &'c Context,
    target: &str,
    config: &[(&str, &str)],
    operands: &[Value<'c, '_>],
    results: &[Type<'c>],
    location: Location<'c>,
) -> Result<Operation<'c>, Error> {
    let entries: Vec<(Identifier<'c>, Attribute<'c>)> =
        config.iter().map(|(name, value)| named(context, name, StringAttribute::new(context, value))).collect();
    let i32_type = IntegerType::new(context, 32).into();
    let attributes = [
        named(context, "call_target_name", StringAttribute::new(context, target)),
        named(context, "api_version", IntegerAttribute::new(i32_type, 4)),
        named(context, "backend_config", DictionaryAttribute::new(context, &entries)),
        named(context, "has_side_effect", bool_attr(context, false)),
    ];
    build("stablehlo.custom_call", location, operands, results, &attributes, Vec::new())
}

/// `sdy.sharding_constraint`: `operand` laid out as `sharding` (Shardy's `#sdy.sharding<...>`
/// text, built by the caller from a `Sharding`).
pub(crate) fn sharding_constraint<'c>(
    context: &'c Context,
    operand: Value<'c, '_>,
    sharding: &str,
    location: Location<'c>,
) -> Result<Operation<'c>, Error> {
    let attribute = Attribute::parse(context, sharding)
        .ok_or_else(|| internal("a sharding constraint", format!("`{sharding}` does not parse")))?;
    let ty = melior::ir::ValueLike::r#type(&operand);
    build(
        "sdy.sharding_constraint",
        location,
        &[operand],
        &[ty],
        &[(Identifier::new(context, "sharding"), attribute)],
        Vec::new(),
    )
}

// ---------------------------------------------------------------------------------------------
// Elementwise ops with attributes or three operands.
// ---------------------------------------------------------------------------------------------

/// `stablehlo.compare` of operands of `operand_dtype`.
///
/// `compare_type` is explicit so XLA never guesses: `FLOAT` (IEEE, NaN compares unordered, as
/// PyTorch does) for floats, `SIGNED` for signed integers, `UNSIGNED` for `u8`, `u64` and `bool`.
pub(crate) fn compare<'c>(
    context: &'c Context,
    lhs: Value<'c, '_>,
    rhs: Value<'c, '_>,
    direction: CompareDirection,
    operand_dtype: DType,
    result: Type<'c>,
    location: Location<'c>,
) -> Result<Operation<'c>, Error> {
    let compare_type = if operand_dtype.is_float() {
        "FLOAT"
    } else if operand_dtype.is_signed_integer() {
        "SIGNED"
    } else {
        "UNSIGNED"
    };
    let attributes = [
        named(
            context,
            "comparison_direction",
            opaque(context, &format!("#stablehlo<comparison_direction {}>", direction.mnemonic()))?,
        ),
        named(context, "compare_type", opaque(context, &format!("#stablehlo<comparison_type {compare_type}>"))?),
    ];
    build("stablehlo.compare", location, &[lhs, rhs], &[result], &attributes, Vec::new())
}

/// `stablehlo.rng_bit_generator(state)`: results (new state, bits), with the algorithm as
/// `#stablehlo<rng_algorithm ...>`.
pub(crate) fn rng_bit_generator<'c>(
    context: &'c Context,
    state: Value<'c, '_>,
    algorithm: RngAlgorithm,
    state_type: Type<'c>,
    result: Type<'c>,
    location: Location<'c>,
) -> Result<Operation<'c>, Error> {
    let attributes = [named(
        context,
        "rng_algorithm",
        opaque(context, &format!("#stablehlo<rng_algorithm {}>", algorithm.mnemonic()))?,
    )];
    build("stablehlo.rng_bit_generator", location, &[state], &[state_type, result], &attributes, Vec::new())
}

/// `stablehlo.real`, `stablehlo.imag` (one operand) and `stablehlo.complex` (two).
pub(crate) fn complex_part<'c>(
    name: &'static str,
    operands: &[Value<'c, '_>],
    result: Type<'c>,
    location: Location<'c>,
) -> Result<Operation<'c>, Error> {
    build(name, location, operands, &[result], &[], Vec::new())
}

/// `stablehlo.fft` of the trailing `length.len()` dims.
pub(crate) fn fft<'c>(
    context: &'c Context,
    operand: Value<'c, '_>,
    kind: FftType,
    length: &[i64],
    result: Type<'c>,
    location: Location<'c>,
) -> Result<Operation<'c>, Error> {
    let attributes = [
        named(context, "fft_type", opaque(context, &format!("#stablehlo<fft_type {}>", kind.mnemonic()))?),
        named(context, "fft_length", i64_array(context, length)),
    ];
    build("stablehlo.fft", location, &[operand], &[result], &attributes, Vec::new())
}

/// `stablehlo.select(pred, on_true, on_false)`.
pub(crate) fn select<'c>(
    pred: Value<'c, '_>,
    on_true: Value<'c, '_>,
    on_false: Value<'c, '_>,
    result: Type<'c>,
    location: Location<'c>,
) -> Result<Operation<'c>, Error> {
    build("stablehlo.select", location, &[pred, on_true, on_false], &[result], &[], Vec::new())
}

/// `stablehlo.clamp(min, operand, max)`.
pub(crate) fn clamp<'c>(
    min: Value<'c, '_>,
    operand: Value<'c, '_>,
    max: Value<'c, '_>,
    result: Type<'c>,
    location: Location<'c>,
) -> Result<Operation<'c>, Error> {
    build("stablehlo.clamp", location, &[min, operand, max], &[result], &[], Vec::new())
}

// ---------------------------------------------------------------------------------------------
// Layout ops.
// ---------------------------------------------------------------------------------------------

/// `stablehlo.transpose`: result dim `i` is operand dim `permutation[i]`.
pub(crate) fn transpose<'c>(
    context: &'c Context,
    operand: Value<'c, '_>,
    permutation: &[i64],
    result: Type<'c>,
    location: Location<'c>,
) -> Result<Operation<'c>, Error> {
    let attributes = [named(context, "permutation", i64_array(context, permutation))];
    build("stablehlo.transpose", location, &[operand], &[result], &attributes, Vec::new())
}

/// `stablehlo.broadcast_in_dim`: operand dim `i` becomes result dim `dims[i]`.
pub(crate) fn broadcast_in_dim<'c>(
    context: &'c Context,
    operand: Value<'c, '_>,
    dims: &[i64],
    result: Type<'c>,
    location: Location<'c>,
) -> Result<Operation<'c>, Error> {
    let attributes = [named(context, "broadcast_dimensions", i64_array(context, dims))];
    build("stablehlo.broadcast_in_dim", location, &[operand], &[result], &attributes, Vec::new())
}

/// `stablehlo.slice` with static start, limit and strides.
pub(crate) fn slice<'c>(
    context: &'c Context,
    operand: Value<'c, '_>,
    start: &[i64],
    limit: &[i64],
    strides: &[i64],
    result: Type<'c>,
    location: Location<'c>,
) -> Result<Operation<'c>, Error> {
    let attributes = [
        named(context, "start_indices", i64_array(context, start)),
        named(context, "limit_indices", i64_array(context, limit)),
        named(context, "strides", i64_array(context, strides)),
    ];
    build("stablehlo.slice", location, &[operand], &[result], &attributes, Vec::new())
}

// ---------------------------------------------------------------------------------------------
// Shape-polymorphic ops: sizes known only at run time travel as 1-D integer tensors.
// ---------------------------------------------------------------------------------------------

/// `stablehlo.get_dimension_size`: the size of `dimension` of `operand` as a `tensor<i32>`.
pub(crate) fn get_dimension_size<'c>(
    context: &'c Context,
    operand: Value<'c, '_>,
    dimension: i64,
    location: Location<'c>,
) -> Result<Operation<'c>, Error> {
    let result = crate::types::tensor_of(context, ttpu_ir::DType::I32, &[])?;
    let attributes = [named(context, "dimension", i64_attr(context, dimension))];
    build("stablehlo.get_dimension_size", location, &[operand], &[result], &attributes, Vec::new())
}

/// `stablehlo.dynamic_broadcast_in_dim` to the shape held by `output_dimensions`.
pub(crate) fn dynamic_broadcast_in_dim<'c, 'a>(
    context: &'c Context,
    operand: Value<'c, 'a>,
    output_dimensions: Value<'c, 'a>,
    dims: &[i64],
    result: Type<'c>,
    location: Location<'c>,
) -> Result<Operation<'c>, Error> {
    let attributes = [named(context, "broadcast_dimensions", i64_array(context, dims))];
    build(
        "stablehlo.dynamic_broadcast_in_dim",
        location,
        &[operand, output_dimensions],
        &[result],
        &attributes,
        Vec::new(),
    )
}

/// `stablehlo.dynamic_reshape` to the shape held by `output_shape`.
pub(crate) fn dynamic_reshape<'c, 'a>(
    operand: Value<'c, 'a>,
    output_shape: Value<'c, 'a>,
    result: Type<'c>,
    location: Location<'c>,
) -> Result<Operation<'c>, Error> {
    build("stablehlo.dynamic_reshape", location, &[operand, output_shape], &[result], &[], Vec::new())
}

/// `stablehlo.dynamic_iota` of the shape held by `output_shape`, counting along `dimension`.
pub(crate) fn dynamic_iota<'c>(
    context: &'c Context,
    output_shape: Value<'c, '_>,
    dimension: i64,
    result: Type<'c>,
    location: Location<'c>,
) -> Result<Operation<'c>, Error> {
    let attributes = [named(context, "iota_dimension", i64_attr(context, dimension))];
    build("stablehlo.dynamic_iota", location, &[output_shape], &[result], &attributes, Vec::new())
}

/// `stablehlo.real_dynamic_slice` with start, limit and strides as 1-D tensors.
pub(crate) fn real_dynamic_slice<'c, 'a>(
    operand: Value<'c, 'a>,
    start: Value<'c, 'a>,
    limit: Value<'c, 'a>,
    strides: Value<'c, 'a>,
    result: Type<'c>,
    location: Location<'c>,
) -> Result<Operation<'c>, Error> {
    build("stablehlo.real_dynamic_slice", location, &[operand, start, limit, strides], &[result], &[], Vec::new())
}

/// `stablehlo.concatenate` along `dimension`.
pub(crate) fn concatenate<'c>(
    context: &'c Context,
    operands: &[Value<'c, '_>],
    dimension: i64,
    result: Type<'c>,
    location: Location<'c>,
) -> Result<Operation<'c>, Error> {
    let attributes = [named(context, "dimension", i64_attr(context, dimension))];
    build("stablehlo.concatenate", location, operands, &[result], &attributes, Vec::new())
}

/// `stablehlo.pad(operand, padding_value)`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn pad<'c>(
    context: &'c Context,
    operand: Value<'c, '_>,
    padding_value: Value<'c, '_>,
    low: &[i64],
    high: &[i64],
    interior: &[i64],
    result: Type<'c>,
    location: Location<'c>,
) -> Result<Operation<'c>, Error> {
    let attributes = [
        named(context, "edge_padding_low", i64_array(context, low)),
        named(context, "edge_padding_high", i64_array(context, high)),
        named(context, "interior_padding", i64_array(context, interior)),
    ];
    build("stablehlo.pad", location, &[operand, padding_value], &[result], &attributes, Vec::new())
}

// ---------------------------------------------------------------------------------------------
// Contractions and reductions.
// ---------------------------------------------------------------------------------------------

/// `stablehlo.dot_general` with `#stablehlo.dot<...>` dimension numbers.
pub(crate) fn dot_general<'c>(
    context: &'c Context,
    lhs: Value<'c, '_>,
    rhs: Value<'c, '_>,
    dims: &DotDims,
    result: Type<'c>,
    location: Location<'c>,
) -> Result<Operation<'c>, Error> {
    let mut fields = Vec::new();
    push_dims(&mut fields, "lhs_batching_dimensions", &dims.lhs_batch);
    push_dims(&mut fields, "rhs_batching_dimensions", &dims.rhs_batch);
    push_dims(&mut fields, "lhs_contracting_dimensions", &dims.lhs_contracting);
    push_dims(&mut fields, "rhs_contracting_dimensions", &dims.rhs_contracting);
    let numbers = opaque(context, &format!("#stablehlo.dot<{}>", fields.join(", ")))?;
    let attributes = [named(context, "dot_dimension_numbers", numbers)];
    build("stablehlo.dot_general", location, &[lhs, rhs], &[result], &attributes, Vec::new())
}

/// A combiner region `(tensor<T>, tensor<T>) -> tensor<T>` for reductions and scatter:
/// `combiner(acc, x)`, or just the second argument when `combiner` is `None` (scatter's
/// overwrite).
fn combiner_region<'c>(
    combiner: Option<BinaryOp>,
    scalar: Type<'c>,
    location: Location<'c>,
) -> Result<Region<'c>, Error> {
    let block = Block::new(&[(scalar, location), (scalar, location)]);
    {
        let argument = |index: usize| -> Result<Value<'c, '_>, Error> {
            block.argument(index).map(Into::into).map_err(|error| internal("reading a block argument", error))
        };
        let (lhs, rhs) = (argument(0)?, argument(1)?);
        let value = match combiner {
            Some(op) => result(block.append_operation(binary_builder(op)(lhs, rhs, scalar, location)?))?,
            None => rhs,
        };
        block.append_operation(r#return(&[value], location)?);
    }
    let region = Region::new();
    region.append_block(block);
    Ok(region)
}

/// `stablehlo.sort` of `keys` with `positions` (an `i64` iota) riding along, stable, along
/// `dimension`; results (sorted keys, positions). The comparator puts NaN above every number
/// (last ascending, first descending) and treats `-0.0` and `0.0` as equal, as PyTorch does;
/// stability keeps equal keys in position order.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sort<'c>(
    context: &'c Context,
    keys: Value<'c, '_>,
    positions: Value<'c, '_>,
    dimension: i64,
    descending: bool,
    key_dtype: DType,
    results: [Type<'c>; 2],
    location: Location<'c>,
) -> Result<Operation<'c>, Error> {
    let key = crate::types::tensor_of(context, key_dtype, &[])?;
    let position = crate::types::tensor_of(context, DType::I64, &[])?;
    let predicate = crate::types::tensor_of(context, DType::Bool, &[])?;
    let block = Block::new(&[(key, location), (key, location), (position, location), (position, location)]);
    {
        let argument = |index: usize| -> Result<Value<'c, '_>, Error> {
            block.argument(index).map(Into::into).map_err(|error| internal("reading a block argument", error))
        };
        let (a, b) = (argument(0)?, argument(1)?);
        let append = |operation: Operation<'c>| result(block.append_operation(operation));
        let direction = if descending { CompareDirection::Gt } else { CompareDirection::Lt };
        let mut before = append(compare(context, a, b, direction, key_dtype, predicate, location)?)?;
        if key_dtype.is_float() {
            // NaN compares false with everything: order it explicitly.
            let a_nan = append(compare(context, a, a, CompareDirection::Ne, key_dtype, predicate, location)?)?;
            let b_nan = append(compare(context, b, b, CompareDirection::Ne, key_dtype, predicate, location)?)?;
            let (nan, number) = if descending { (a_nan, b_nan) } else { (b_nan, a_nan) };
            let not_number = append(not(number, predicate, location)?)?;
            let by_nan = append(and(nan, not_number, predicate, location)?)?;
            before = append(or(before, by_nan, predicate, location)?)?;
        }
        block.append_operation(r#return(&[before], location)?);
    }
    let region = Region::new();
    region.append_block(block);
    let attributes = [
        named(context, "dimension", i64_attr(context, dimension)),
        named(context, "is_stable", bool_attr(context, true)),
    ];
    build("stablehlo.sort", location, &[keys, positions], &results, &attributes, vec![region])
}

/// `stablehlo.reduce` of one operand over `dimensions`, combining with `combiner` from
/// `init` (a 0-d tensor of type `scalar`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn reduce<'c>(
    context: &'c Context,
    operand: Value<'c, '_>,
    init: Value<'c, '_>,
    dimensions: &[i64],
    combiner: BinaryOp,
    scalar: Type<'c>,
    result: Type<'c>,
    location: Location<'c>,
) -> Result<Operation<'c>, Error> {
    let attributes = [named(context, "dimensions", i64_array(context, dimensions))];
    let body = combiner_region(Some(combiner), scalar, location)?;
    build("stablehlo.reduce", location, &[operand, init], &[result], &attributes, vec![body])
}

/// `stablehlo.reduce_window` of one operand; padding is filled with `init`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn reduce_window<'c>(
    context: &'c Context,
    operand: Value<'c, '_>,
    init: Value<'c, '_>,
    window: &Window,
    combiner: BinaryOp,
    scalar: Type<'c>,
    result: Type<'c>,
    location: Location<'c>,
) -> Result<Operation<'c>, Error> {
    let attributes = [
        named(context, "window_dimensions", i64_array(context, &window.dimensions)),
        named(context, "window_strides", i64_array(context, &window.strides)),
        named(context, "base_dilations", i64_array(context, &window.base_dilations)),
        named(context, "window_dilations", i64_array(context, &window.window_dilations)),
        named(context, "padding", padding_attr(context, &window.padding)),
    ];
    let body = combiner_region(Some(combiner), scalar, location)?;
    build("stablehlo.reduce_window", location, &[operand, init], &[result], &attributes, vec![body])
}

/// One side of `#stablehlo.conv<...>`, as StableHLO's printer writes it: a letter for the
/// batch/feature dims, the spatial index for spatial dims and `?` for a dim nothing names.
fn conv_layout(first: (i64, char), second: (i64, char), spatial: &[i64]) -> Result<String, Error> {
    let bad = |dim: i64| Error::Internal { message: format!("convolution dim {dim} is negative") };
    let rank = spatial
        .iter()
        .chain([&first.0, &second.0])
        .map(|&dim| usize::try_from(dim).map(|dim| dim + 1).map_err(|_| bad(dim)))
        .try_fold(0usize, |rank, dim| dim.map(|dim| rank.max(dim)))?;
    let mut layout = vec![String::from("?"); rank];
    for (dim, letter) in [first, second] {
        layout[dim as usize] = letter.to_string();
    }
    for (index, &dim) in spatial.iter().enumerate() {
        layout[dim as usize] = index.to_string();
    }
    Ok(format!("[{}]", layout.join(", ")))
}

/// `stablehlo.convolution` with `#stablehlo.conv<[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]>`
/// dimension numbers.
pub(crate) fn convolution<'c>(
    context: &'c Context,
    input: Value<'c, '_>,
    kernel: Value<'c, '_>,
    dims: &ConvDims,
    result: Type<'c>,
    location: Location<'c>,
) -> Result<Operation<'c>, Error> {
    let mut numbers = String::from("#stablehlo.conv<");
    numbers.push_str(&conv_layout((dims.input_batch, 'b'), (dims.input_feature, 'f'), &dims.input_spatial)?);
    numbers.push('x');
    numbers.push_str(&conv_layout(
        (dims.kernel_output_feature, 'o'),
        (dims.kernel_input_feature, 'i'),
        &dims.kernel_spatial,
    )?);
    numbers.push_str("->");
    numbers.push_str(&conv_layout((dims.output_batch, 'b'), (dims.output_feature, 'f'), &dims.output_spatial)?);
    numbers.push('>');
    let attributes = [
        named(context, "dimension_numbers", opaque(context, &numbers)?),
        named(context, "window_strides", i64_array(context, &dims.window_strides)),
        named(context, "padding", padding_attr(context, &dims.padding)),
        named(context, "lhs_dilation", i64_array(context, &dims.lhs_dilation)),
        named(context, "rhs_dilation", i64_array(context, &dims.rhs_dilation)),
        named(context, "feature_group_count", i64_attr(context, dims.feature_group_count)),
        named(context, "batch_group_count", i64_attr(context, dims.batch_group_count)),
    ];
    build("stablehlo.convolution", location, &[input, kernel], &[result], &attributes, Vec::new())
}

// ---------------------------------------------------------------------------------------------
// Gather and scatter.
// ---------------------------------------------------------------------------------------------

/// `stablehlo.gather` with `#stablehlo.gather<...>` dimension numbers.
pub(crate) fn gather<'c>(
    context: &'c Context,
    operand: Value<'c, '_>,
    start_indices: Value<'c, '_>,
    dims: &GatherDims,
    result: Type<'c>,
    location: Location<'c>,
) -> Result<Operation<'c>, Error> {
    let mut fields = Vec::new();
    push_dims(&mut fields, "offset_dims", &dims.offset_dims);
    push_dims(&mut fields, "collapsed_slice_dims", &dims.collapsed_slice_dims);
    push_dims(&mut fields, "operand_batching_dims", &dims.operand_batching_dims);
    push_dims(&mut fields, "start_indices_batching_dims", &dims.start_indices_batching_dims);
    push_dims(&mut fields, "start_index_map", &dims.start_index_map);
    fields.push(format!("index_vector_dim = {}", dims.index_vector_dim));
    let numbers = opaque(context, &format!("#stablehlo.gather<{}>", fields.join(", ")))?;
    let attributes = [
        named(context, "dimension_numbers", numbers),
        named(context, "slice_sizes", i64_array(context, &dims.slice_sizes)),
        named(context, "indices_are_sorted", bool_attr(context, dims.indices_are_sorted)),
    ];
    build("stablehlo.gather", location, &[operand, start_indices], &[result], &attributes, Vec::new())
}

/// `stablehlo.scatter` with `#stablehlo.scatter<...>` dimension numbers; the update region
/// returns the update (`Replace`) or combines it with the current value.
#[allow(clippy::too_many_arguments)]
pub(crate) fn scatter<'c>(
    context: &'c Context,
    operand: Value<'c, '_>,
    scatter_indices: Value<'c, '_>,
    updates: Value<'c, '_>,
    dims: &ScatterDims,
    scalar: Type<'c>,
    result: Type<'c>,
    location: Location<'c>,
) -> Result<Operation<'c>, Error> {
    let mut fields = Vec::new();
    push_dims(&mut fields, "update_window_dims", &dims.update_window_dims);
    push_dims(&mut fields, "inserted_window_dims", &dims.inserted_window_dims);
    push_dims(&mut fields, "input_batching_dims", &dims.input_batching_dims);
    push_dims(&mut fields, "scatter_indices_batching_dims", &dims.scatter_indices_batching_dims);
    push_dims(&mut fields, "scatter_dims_to_operand_dims", &dims.scatter_dims_to_operand_dims);
    fields.push(format!("index_vector_dim = {}", dims.index_vector_dim));
    let numbers = opaque(context, &format!("#stablehlo.scatter<{}>", fields.join(", ")))?;
    let attributes = [
        named(context, "scatter_dimension_numbers", numbers),
        named(context, "indices_are_sorted", bool_attr(context, dims.indices_are_sorted)),
        named(context, "unique_indices", bool_attr(context, dims.unique_indices)),
    ];
    let combiner = match dims.kind {
        ttpu_ir::ScatterKind::Replace => None,
        ttpu_ir::ScatterKind::Combine(kind) => Some(kind.combiner()),
    };
    let region = combiner_region(combiner, scalar, location)?;
    build("stablehlo.scatter", location, &[operand, scatter_indices, updates], &[result], &attributes, vec![region])
}

/// `dense<[[...], ...]> : tensor<GxNxi64>` of equal-length rows (replica groups, or
/// source-target pairs as rows of two).
fn i64_matrix<'c>(context: &'c Context, rows: &[Vec<i64>]) -> Attribute<'c> {
    let width = rows.first().map_or(0, Vec::len) as u64;
    let ty = RankedTensorType::new(&[rows.len() as u64, width], IntegerType::new(context, 64).into(), None).into();
    let values: Vec<i64> = rows.iter().flatten().copied().collect();
    DenseElementsAttribute::i64_values(ty, &values).into()
}

/// A StableHLO collective across the replicas of a replicated program. Without a channel handle
/// the replica groups name replica ids (cross-replica mode); `scalar` is the 0-d element type the
/// reducing collectives combine in.
pub(crate) fn collective<'c>(
    context: &'c Context,
    collective: &ttpu_ir::Collective,
    operand: Value<'c, '_>,
    scalar: Type<'c>,
    result: Type<'c>,
    location: Location<'c>,
) -> Result<Operation<'c>, Error> {
    use ttpu_ir::Collective;
    let groups = |groups: &[Vec<i64>]| named(context, "replica_groups", i64_matrix(context, groups));
    let (name, attributes, regions) = match collective {
        Collective::AllReduce { kind, groups: replicas } => (
            "stablehlo.all_reduce",
            vec![groups(replicas)],
            vec![combiner_region(Some(kind.combiner()), scalar, location)?],
        ),
        Collective::AllGather { dimension, groups: replicas } => (
            "stablehlo.all_gather",
            vec![named(context, "all_gather_dim", i64_attr(context, *dimension)), groups(replicas)],
            Vec::new(),
        ),
        Collective::ReduceScatter { kind, dimension, groups: replicas } => (
            "stablehlo.reduce_scatter",
            vec![named(context, "scatter_dimension", i64_attr(context, *dimension)), groups(replicas)],
            vec![combiner_region(Some(kind.combiner()), scalar, location)?],
        ),
        Collective::AllToAll { split_dimension, concat_dimension, groups: replicas } => (
            "stablehlo.all_to_all",
            vec![
                named(context, "split_dimension", i64_attr(context, *split_dimension)),
                named(context, "concat_dimension", i64_attr(context, *concat_dimension)),
                named(context, "split_count", i64_attr(context, replicas.first().map_or(1, Vec::len) as i64)),
                groups(replicas),
            ],
            Vec::new(),
        ),
        Collective::CollectivePermute { pairs } => {
            let rows: Vec<Vec<i64>> = pairs.iter().map(|&(source, target)| vec![source, target]).collect();
            let matrix = if rows.is_empty() {
                let ty = RankedTensorType::new(&[0, 2], IntegerType::new(context, 64).into(), None).into();
                DenseElementsAttribute::i64_values(ty, &[]).into()
            } else {
                i64_matrix(context, &rows)
            };
            ("stablehlo.collective_permute", vec![named(context, "source_target_pairs", matrix)], Vec::new())
        }
    };
    build(name, location, &[operand], &[result], &attributes, regions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conv_layout_matches_stablehlo_printer() {
        assert_eq!(conv_layout((0, 'b'), (1, 'f'), &[2, 3]).unwrap(), "[b, f, 0, 1]");
        assert_eq!(conv_layout((0, 'b'), (3, 'f'), &[1, 2]).unwrap(), "[b, 0, 1, f]");
        assert_eq!(conv_layout((3, 'o'), (2, 'i'), &[0, 1]).unwrap(), "[0, 1, i, o]");
        assert_eq!(conv_layout((0, 'b'), (2, 'f'), &[]).unwrap(), "[b, ?, f]");
        assert!(conv_layout((-1, 'b'), (0, 'f'), &[]).is_err());
    }

    #[test]
    fn dim_lists() {
        assert_eq!(dim_list(&[]), "[]");
        assert_eq!(dim_list(&[0, 2]), "[0, 2]");
    }
}
