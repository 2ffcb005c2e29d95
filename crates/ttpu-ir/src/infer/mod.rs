//! Result-type inference, one module per op family.
//!
//! [`infer`] is the single source of truth for what an op produces: the builder calls it to type
//! new values and the verifier calls it again to check stored types.

mod collective;
mod complex;
mod control;
pub use control::MAX_LOOP_NESTING;
mod conv;
mod elementwise;
mod gather;
mod layout;
mod reduce;

use smallvec::SmallVec;

use crate::{DType, Dim, Op, TensorType};

/// An op was applied to operands it does not accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{op}`: {message}")]
pub struct InferError {
    /// The op mnemonic.
    pub op: &'static str,
    /// What is wrong with the operands or attributes.
    pub message: String,
}

pub(crate) type InferResult<T = TensorType> = Result<T, InferError>;

pub(crate) fn fail<T>(op: &Op, message: impl Into<String>) -> InferResult<T> {
    Err(InferError { op: op.mnemonic(), message: message.into() })
}

/// The result types of `op` applied to operands of `operand_types`.
pub fn infer(op: &Op, operand_types: &[&TensorType]) -> Result<SmallVec<[TensorType; 1]>, InferError> {
    let expected_arity = match op {
        Op::Constant(_) | Op::Iota { .. } => Some(0),
        Op::Unary(_)
        | Op::Convert(_)
        | Op::BitcastConvert(_)
        | Op::Reshape(_)
        | Op::Transpose(_)
        | Op::BroadcastInDim { .. } => Some(1),
        Op::Slice { .. } | Op::Reduce { .. } | Op::ReduceWindow { .. } => Some(1),
        Op::Binary(_) | Op::Compare(_) | Op::Pad { .. } | Op::DotGeneral(_) => Some(2),
        Op::Convolution(_) | Op::Gather(_) => Some(2),
        Op::RngBitGenerator { .. } | Op::DimSize(_) | Op::ArgSort { .. } | Op::Collective(_) => Some(1),
        Op::Real | Op::Imag | Op::Fft { .. } => Some(1),
        Op::Complex => Some(2),
        Op::Select | Op::Clamp | Op::Scatter(_) => Some(3),
        Op::Concatenate(_) | Op::While(_) | Op::Kernel(_) => None,
    };
    if let Some(arity) = expected_arity
        && operand_types.len() != arity
    {
        return fail(op, format!("expected {arity} operands, found {}", operand_types.len()));
    }
    let ty = match op {
        Op::While(while_loop) => return control::while_loop(op, while_loop, operand_types),
        Op::Kernel(kernel) => return control::kernel(op, kernel, operand_types),
        Op::Constant(literal) => literal.ty(),
        Op::Iota { dtype, .. } if dtype.is_bool() || dtype.is_complex() => {
            return fail(op, format!("not defined for {dtype}"));
        }
        Op::Iota { dimension, dtype, shape } => {
            check_dim(op, *dimension, shape.rank())?;
            TensorType::new(*dtype, shape.clone())
        }
        Op::Unary(unary) => elementwise::unary(op, *unary, operand_types[0])?,
        Op::Binary(binary) => elementwise::binary(op, *binary, operand_types[0], operand_types[1])?,
        Op::Compare(direction) => elementwise::compare(op, *direction, operand_types[0], operand_types[1])?,
        Op::Select => elementwise::select(op, operand_types[0], operand_types[1], operand_types[2])?,
        Op::Clamp => elementwise::clamp(op, operand_types[0], operand_types[1], operand_types[2])?,
        // StableHLO leaves complex-to-real conversion undefined; `real` says which part is meant.
        Op::Convert(dtype) if operand_types[0].dtype.is_complex() && !dtype.is_complex() => {
            return fail(op, format!("cannot convert {} to {dtype}; take `real` or `imag`", operand_types[0]));
        }
        Op::Convert(dtype) => operand_types[0].with_dtype(*dtype),
        Op::BitcastConvert(dtype) => layout::bitcast_convert(op, operand_types[0], *dtype)?,
        Op::Reshape(shape) => layout::reshape(op, operand_types[0], shape)?,
        Op::Transpose(permutation) => layout::transpose(op, operand_types[0], permutation)?,
        Op::BroadcastInDim { dims, shape } => layout::broadcast_in_dim(op, operand_types[0], dims, shape)?,
        Op::Slice { start, limit, strides } => layout::slice(op, operand_types[0], start, limit, strides)?,
        Op::Concatenate(dimension) => layout::concatenate(op, operand_types, *dimension)?,
        Op::Pad { low, high, interior } => layout::pad(op, operand_types[0], operand_types[1], low, high, interior)?,
        Op::DotGeneral(dims) => reduce::dot_general(op, operand_types[0], operand_types[1], dims)?,
        Op::Reduce { kind, dimensions } => reduce::reduce(op, *kind, operand_types[0], dimensions)?,
        Op::ReduceWindow { kind, window } => reduce::reduce_window(op, *kind, operand_types[0], window)?,
        Op::Convolution(dims) => conv::convolution(op, operand_types[0], operand_types[1], dims)?,
        Op::Gather(dims) => gather::gather(op, operand_types[0], operand_types[1], dims)?,
        Op::Scatter(dims) => gather::scatter(op, operand_types[0], operand_types[1], operand_types[2], dims)?,
        Op::RngBitGenerator { algorithm, dtype, shape } => {
            rng_bit_generator(op, *algorithm, *dtype, shape, operand_types[0])?
        }
        Op::DimSize(dimension) => {
            check_dim(op, *dimension, operand_types[0].rank())?;
            TensorType::scalar(DType::I64)
        }
        Op::Collective(collective) => collective::collective(op, collective, operand_types[0])?,
        Op::Real | Op::Imag => complex::part(op, operand_types[0])?,
        Op::Complex => complex::complex(op, operand_types[0], operand_types[1])?,
        Op::Fft { kind, length } => complex::fft(op, *kind, length, operand_types[0])?,
        Op::ArgSort { dimension, .. } => {
            let operand = operand_types[0];
            if operand.dtype == DType::Bool {
                return fail(op, "sorts numbers; convert bool first");
            }
            if operand.dtype.is_complex() {
                return fail(op, format!("complex numbers have no order; found {operand}"));
            }
            check_dim(op, *dimension, operand.rank())?;
            operand.with_dtype(DType::I64)
        }
    };
    Ok(smallvec::smallvec![ty])
}

/// `rng_bit_generator`: a `u64` state of as many words as the algorithm takes, and `u64` bits of
/// a static shape (XLA generates 32- or 64-bit words; `u64` is the IR's only such unsigned type).
fn rng_bit_generator(
    op: &Op,
    algorithm: crate::RngAlgorithm,
    dtype: DType,
    shape: &crate::Shape,
    state: &TensorType,
) -> InferResult {
    let words = algorithm.state_words();
    match (state.dtype, state.shape.as_static().as_deref()) {
        (DType::U64, Some([size])) if words.contains(size) => {}
        _ => {
            let words: Vec<String> = words.iter().map(|size| format!("u64[{size}]")).collect();
            return fail(op, format!("{} needs a {} state, found {state}", algorithm.mnemonic(), words.join(" or ")));
        }
    }
    if dtype != DType::U64 {
        return fail(op, format!("generates u64 bits, not {dtype}"));
    }
    if shape.as_static().is_none() {
        return fail(op, format!("the result shape {shape} must be static"));
    }
    Ok(TensorType::new(dtype, shape.clone()))
}

/// Checks `dim` is a valid (already normalised, non-negative) dim of a rank-`rank` tensor.
pub(crate) fn check_dim(op: &Op, dim: i64, rank: usize) -> InferResult<usize> {
    match usize::try_from(dim) {
        Ok(index) if index < rank => Ok(index),
        _ => fail(op, format!("dim {dim} is out of range for rank {rank}")),
    }
}

/// Checks `dims` are distinct valid dims of a rank-`rank` tensor.
pub(crate) fn check_dims(op: &Op, dims: &[i64], rank: usize) -> InferResult<Vec<usize>> {
    let mut seen = vec![false; rank];
    let mut res = Vec::with_capacity(dims.len());
    for &dim in dims {
        let index = check_dim(op, dim, rank)?;
        if std::mem::replace(&mut seen[index], true) {
            return fail(op, format!("dim {dim} appears twice in {dims:?}"));
        }
        res.push(index);
    }
    Ok(res)
}

/// `value`, or a failure when the size arithmetic that produced it overflowed.
pub(crate) fn checked(op: &Op, value: Option<i64>) -> InferResult<i64> {
    match value {
        Some(value) => Ok(value),
        None => fail(op, "sizes overflow 64 bits"),
    }
}

/// The extent of `size` elements spread `dilation` apart (`0` for no elements), or `None` on
/// overflow.
pub(crate) fn dilated_size(size: i64, dilation: i64) -> Option<i64> {
    if size == 0 { Some(0) } else { size.checked_sub(1)?.checked_mul(dilation)?.checked_add(1) }
}

/// The extent of `size` elements dilated by `dilation` and padded by `(low, high)`, or `None` on
/// overflow.
pub(crate) fn padded_size(size: i64, dilation: i64, (low, high): (i64, i64)) -> Option<i64> {
    dilated_size(size, dilation)?.checked_add(low)?.checked_add(high)
}

/// Whether two dims are provably equal.
pub(crate) fn same_dim(lhs: &Dim, rhs: &Dim) -> bool {
    lhs == rhs
}

/// A static dim or a failure naming what needed to be static.
pub(crate) fn static_dim(op: &Op, dim: &Dim, what: &str) -> InferResult<i64> {
    match dim {
        Dim::Static(size) => Ok(*size),
        Dim::Sym(name) => fail(op, format!("{what} must be static, found symbol `{name}`")),
        Dim::Expr(expr) => fail(op, format!("{what} must be static, found `{expr}`")),
    }
}

/// The output size of a window of `dilated_window` elements sliding with `stride` over `size`
/// dilated by `base_dilation` and padded by `padding`. A symbolic size is assumed to be at least
/// one and at least the window (the sizes PyTorch's own shape formulas assume).
pub(crate) fn window_output(
    op: &Op,
    size: &Dim,
    base_dilation: i64,
    padding: (i64, i64),
    dilated_window: i64,
    stride: i64,
) -> InferResult<Dim> {
    if let Dim::Static(size) = size {
        let padded = checked(op, padded_size(*size, base_dilation, padding))?;
        return Ok(Dim::Static(if padded < dilated_window { 0 } else { (padded - dilated_window) / stride + 1 }));
    }
    let constant = padding
        .0
        .checked_add(padding.1)
        .and_then(|sum| sum.checked_add(1))
        .and_then(|sum| sum.checked_sub(base_dilation))
        .and_then(|sum| sum.checked_sub(dilated_window));
    let out = size
        .checked_mul(&Dim::Static(base_dilation))
        .and_then(|dilated| dilated.checked_add(&Dim::Static(constant?)))
        .and_then(|span| span.floor_div(stride))
        .and_then(|steps| steps.checked_add(&Dim::Static(1)));
    match out {
        Some(out) => Ok(out),
        None => fail(op, "sizes overflow 64 bits"),
    }
}
