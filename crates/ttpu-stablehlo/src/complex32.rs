//! `complex32` (PyTorch's `chalf`) in programs whose complex types have `f32` parts at least.
//!
//! StableHLO's complex types are `complex<f32>` and `complex<f64>`, and PJRT has no buffer type
//! of two halves. PyTorch computes a `complex32` op in `complex64` and rounds both parts of its
//! result to half (`c10::complex<Half>` arithmetic converts to `complex<float>`), so a program
//! holds every `c32` value as `complex<f32>` whose parts are always halves: an op that computes
//! a `c32` result is followed by the rounding of its parts, and an op that only moves, selects
//! or widens exact values (reshapes, slices, gathers, `complex` of two halves) needs none.
//! Reading a part gives `f32` that converts exactly to the IR's `f16`; building one from halves
//! widens them first. What cannot keep that contract is refused: an FFT (PyTorch's CPU has none in
//! half, and CUDA's computes in half, which this rounding does not reproduce) and a kernel (whose
//! module sees the wider type). Bitcasts of complex values are refused by the IR itself.

use melior::Context;
use melior::ir::{Block, Location, Value};
use ttpu_ir::{Collective, DType, Literal, Op, ScatterKind, TensorType};

use crate::Error;
use crate::lower::append;
use crate::ops;
use crate::types::tensor_type;

/// Whether a node of `op` with a `c32` result computes new values, which must be rounded.
pub(crate) fn computes(op: &Op) -> bool {
    match op {
        Op::Reshape(_)
        | Op::Transpose(_)
        | Op::BroadcastInDim { .. }
        | Op::Slice { .. }
        | Op::Concatenate(_)
        | Op::Pad { .. }
        | Op::Gather(_)
        | Op::Select
        | Op::Constant(_)
        | Op::Complex
        | Op::While(_) => false,
        Op::Scatter(dims) => !matches!(dims.kind, ScatterKind::Replace),
        Op::Collective(collective) => {
            matches!(collective, Collective::AllReduce { .. } | Collective::ReduceScatter { .. })
        }
        _ => true,
    }
}

/// Refuses an op that cannot keep `c32` values as halves.
pub(crate) fn check(op: &Op, dtypes: impl IntoIterator<Item = DType>) -> Result<(), Error> {
    if !dtypes.into_iter().any(|dtype| dtype == DType::C32) {
        return Ok(());
    }
    let reason = match op {
        Op::Fft { .. } => {
            "PyTorch's CPU has no half FFT and CUDA's computes in half precision, which a complex64 FFT \
             rounded afterwards does not reproduce"
        }
        Op::Kernel(_) => "a kernel's module would see complex64 where its signature says complex32",
        _ => return Ok(()),
    };
    Err(Error::Complex32 { op: op.mnemonic(), reason })
}

/// `value` (a `complex<f32>` of shape `ty`) with both parts rounded to half and widened back.
pub(crate) fn round<'c, 'a>(
    context: &'c Context,
    block: &'a Block<'c>,
    value: Value<'c, 'a>,
    ty: &TensorType,
    location: Location<'c>,
) -> Result<Value<'c, 'a>, Error> {
    let wide = tensor_type(context, &TensorType::new(DType::F32, ty.shape.clone()))?;
    let half = tensor_type(context, &TensorType::new(DType::F16, ty.shape.clone()))?;
    let complex = tensor_type(context, ty)?;
    let mut parts = [value; 2];
    for (slot, name) in ["stablehlo.real", "stablehlo.imag"].into_iter().enumerate() {
        let part = append(block, ops::complex_part(name, &[value], wide, location)?)?;
        let halved = append(block, ops::convert(part, half, location)?)?;
        parts[slot] = append(block, ops::convert(halved, wide, location)?)?;
    }
    append(block, ops::complex_part("stablehlo.complex", &parts, complex, location)?)
}

/// `real` or `imag` (`name`) of a `c32` value as the IR's `f16` result `result`: the `f32` part,
/// converted exactly.
pub(crate) fn part<'c, 'a>(
    context: &'c Context,
    block: &'a Block<'c>,
    name: &'static str,
    operand: Value<'c, 'a>,
    result: &TensorType,
    location: Location<'c>,
) -> Result<melior::ir::Operation<'c>, Error> {
    let wide = tensor_type(context, &TensorType::new(DType::F32, result.shape.clone()))?;
    let part = append(block, ops::complex_part(name, &[operand], wide, location)?)?;
    ops::convert(part, tensor_type(context, result)?, location)
}

/// The `f16` operands of a `complex` building a `c32`, widened to `f32`.
pub(crate) fn widen<'c, 'a>(
    context: &'c Context,
    block: &'a Block<'c>,
    operands: &[Value<'c, 'a>],
    ty: &TensorType,
    location: Location<'c>,
) -> Result<[Value<'c, 'a>; 2], Error> {
    let wide = tensor_type(context, &TensorType::new(DType::F32, ty.shape.clone()))?;
    Ok([
        append(block, ops::convert(operands[0], wide, location)?)?,
        append(block, ops::convert(operands[1], wide, location)?)?,
    ])
}

/// A `c32` literal as the `c64` literal of the same values (each half widened exactly).
pub(crate) fn widen_literal(literal: &Literal) -> Result<Literal, Error> {
    Literal::from_bytes(DType::C64, literal.dims(), ttpu_ir::complex32_as_c64_bytes(literal.bytes()))
        .map_err(|error| Error::Internal { message: format!("widening a complex32 constant: {error:?}") })
}
