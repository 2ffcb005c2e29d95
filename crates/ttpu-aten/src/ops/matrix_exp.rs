//! `linalg_matrix_exp`: the exponential of square matrices by scaling and squaring, as PyTorch's
//! kernel computes it in outline: `exp(A) = exp(A / 2^s)^(2^s)` with `s` the smallest power of two
//! that brings the 1-norm to at most 1, and the scaled exponential by its Taylor series to degree
//! 18 (the degree PyTorch's kernel reaches too; the series' remainder at norm 1 is below 1e-17).
//! PyTorch picks among polynomials of lower degree for small norms, so results agree to rounding,
//! not bit for bit. The squarings are unrolled to a bound and applied where `s` asks for them.

use ttpu_ir::{BinaryOp, CompareDirection, DType, DotDims, ReduceKind, Scalar, UnaryOp};

use super::elementwise::tensor;
use super::householder::matrices;
use crate::args::Args;
use crate::ctx::{Cx, Imported};
use crate::error::Result;

/// The most squarings: a 1-norm up to 2^64, beyond which the exponential of any matrix that is not
/// nilpotent overflows in both types' range anyway.
const MAX_SQUARINGS: i64 = 64;

/// `linalg_matrix_exp(self)`.
pub(super) fn matrix_exp(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let a = matrices(cx, x, "linalg.matrix_exp")?;
    if a.m != a.n {
        return Err(cx.bad(format!("linalg.matrix_exp: expected a square matrix, found {}", cx.ty(x))));
    }
    let b = a.b();
    let matmul = |cx: &mut Cx<'_>, lhs, rhs| {
        let bb = b as i64;
        let dims = DotDims {
            lhs_batch: (0..bb).collect(),
            rhs_batch: (0..bb).collect(),
            lhs_contracting: [bb + 1].into_iter().collect(),
            rhs_contracting: [bb].into_iter().collect(),
        };
        cx.dot_general(lhs, rhs, dims)
    };
    // s = max(0, ceil(log2(|A|_1))) from the exponent bits of the norm, capped.
    let magnitude = cx.unary(UnaryOp::Abs, x)?;
    let column_sums = cx.reduce(magnitude, ReduceKind::Sum, &[b])?;
    let norm = cx.reduce_propagating_nan(column_sums, ReduceKind::Max, &[b])?;
    let log = cx.unary(UnaryOp::Log, norm)?;
    let log2 = cx.binary_scalar(BinaryOp::Divide, log, Scalar::Float(std::f64::consts::LN_2))?;
    let steps = cx.unary(UnaryOp::Ceil, log2)?;
    let zero = cx.splat_like(steps, Scalar::Int(0))?;
    let most = cx.splat_like(steps, Scalar::Int(MAX_SQUARINGS))?;
    // NaN norms (NaN inputs) take no squarings; the NaN flows through the series.
    let nan = cx.compare(CompareDirection::Ne, steps, steps)?;
    let steps = cx.select(nan, zero, steps)?;
    let steps = cx.binary(BinaryOp::Maximum, steps, zero)?;
    let steps = cx.binary(BinaryOp::Minimum, steps, most)?;
    let (bits, shift, bias) = if a.dtype == DType::F64 { (DType::I64, 52, 1023) } else { (DType::I32, 23, 127) };
    let count = cx.convert(steps, bits)?;
    // 2^-s exactly, from its exponent field.
    let biased = cx.splat_like(count, Scalar::Int(bias))?;
    let exponent = cx.binary(BinaryOp::Subtract, biased, count)?;
    let field = cx.binary_scalar(BinaryOp::ShiftLeft, exponent, Scalar::Int(shift))?;
    let scale = cx.bitcast_convert(field, a.dtype)?;
    let shape = cx.shape(x);
    let scale_wide = cx.broadcast_in_dim(scale, &(0..b as i64).collect::<Vec<_>>(), shape.clone())?;
    let scaled = cx.binary(BinaryOp::Multiply, x, scale_wide)?;
    // Taylor by Horner's rule: T = I + Y T / k from k = 18 down to 1.
    let rows = super::index::iota(cx, &shape, b)?;
    let cols = super::index::iota(cx, &shape, b + 1)?;
    let on = cx.compare(CompareDirection::Eq, rows, cols)?;
    let identity = cx.convert(on, a.dtype)?;
    let mut series = identity;
    for k in (1..=18).rev() {
        let product = matmul(cx, scaled, series)?;
        let term = cx.binary_scalar(BinaryOp::Divide, product, Scalar::Float(f64::from(k)))?;
        series = cx.binary(BinaryOp::Add, identity, term)?;
    }
    // Square s times.
    let count_wide = cx.broadcast_in_dim(count, &(0..b as i64).collect::<Vec<_>>(), shape.clone())?;
    for step in 0..MAX_SQUARINGS {
        let squared = matmul(cx, series, series)?;
        let index = cx.splat_like(count_wide, Scalar::Int(step))?;
        let due = cx.compare(CompareDirection::Lt, index, count_wide)?;
        series = cx.select(due, squared, series)?;
    }
    tensor(series)
}
