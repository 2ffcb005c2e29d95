//! The decompositions both frontends need, each as PyTorch's CPU kernel computes it: in the
//! opmath dtype where the kernel accumulates, with PyTorch's handling of NaN, infinities and
//! empty reductions.

use ttpu_ir::{BinaryOp, CompareDirection, DType, GraphBuilder, ReduceKind, Scalar, Shape, UnaryOp, ValueId};

use crate::Built;
use crate::graph::{
    Count, binary_scalar, broadcast_to, convert, count, divide_by_count, reduce_keep, splat, splat_like,
};
use crate::promote::opmath;

/// `softmax` (or `log_softmax` when `log`) of a float `x` along `dim`, as `out` (`x`'s dtype, or
/// `f32` for `_softmax(half_to_float=True)`). Computed in opmath as `exp(x - max)` over its sum;
/// the log form is `(x - max) - log(sum)`, with no division and no log of an underflowed
/// probability. A rank-0 input is one element: 1, or 0 for the log form.
pub fn softmax(b: &mut GraphBuilder, x: ValueId, dim: usize, log: bool, out: DType) -> Built {
    let dtype = b.ty(x).dtype;
    if b.ty(x).rank() == 0 {
        return splat(b, out, Scalar::Int(if log { 0 } else { 1 }), &Shape::scalar());
    }
    let x = convert(b, x, opmath(dtype))?;
    let shape = b.ty(x).shape.clone();
    let max = reduce_keep(b, x, ReduceKind::Max, &[dim], true)?;
    let max = broadcast_to(b, max, &shape)?;
    let shifted = b.binary(BinaryOp::Subtract, x, max)?;
    let exp = b.unary(UnaryOp::Exponential, shifted)?;
    let total = reduce_keep(b, exp, ReduceKind::Sum, &[dim], true)?;
    let result = if log {
        let log_total = b.unary(UnaryOp::Log, total)?;
        let log_total = broadcast_to(b, log_total, &shape)?;
        b.binary(BinaryOp::Subtract, shifted, log_total)?
    } else {
        let total = broadcast_to(b, total, &shape)?;
        b.binary(BinaryOp::Divide, exp, total)?
    };
    convert(b, result, out)
}

/// The results of [`layer_norm`]: PyTorch's `native_layer_norm` triple.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LayerNorm {
    /// The normalized input, scaled and shifted, in the input's dtype.
    pub out: ValueId,
    /// The mean over the normalized dims (kept with size 1).
    pub mean: ValueId,
    /// `1 / sqrt(var + eps)` over the normalized dims (kept with size 1).
    pub rstd: ValueId,
}

/// Layer norm of a float `x` over its last `normalized_rank` dims: `(x - mean) * rstd`, times
/// `weight` and plus `bias` where given, all in opmath (parameters converted to it). Mean and
/// rstd come back in `f32` when a half input meets parameters of another dtype (PyTorch's mixed
/// kernel), else in the input's dtype.
pub fn layer_norm(
    b: &mut GraphBuilder,
    x: ValueId,
    normalized_rank: usize,
    weight: Option<ValueId>,
    bias: Option<ValueId>,
    eps: Scalar,
) -> Built<LayerNorm> {
    let dtype = b.ty(x).dtype;
    let rank = b.ty(x).rank();
    let axes: Vec<usize> = (rank.saturating_sub(normalized_rank)..rank).collect();
    let n = count(b, x, &axes)?;
    let compute = opmath(dtype);
    let xc = convert(b, x, compute)?;
    let shape = b.ty(xc).shape.clone();
    let sum = reduce_keep(b, xc, ReduceKind::Sum, &axes, true)?;
    let mean = divide_by_count(b, sum, n, 0.0)?;
    let wide_mean = broadcast_to(b, mean, &shape)?;
    let centered = b.binary(BinaryOp::Subtract, xc, wide_mean)?;
    let squared = b.binary(BinaryOp::Multiply, centered, centered)?;
    let sum_squares = reduce_keep(b, squared, ReduceKind::Sum, &axes, true)?;
    let variance = divide_by_count(b, sum_squares, n, 0.0)?;
    let shifted = binary_scalar(b, BinaryOp::Add, variance, eps)?;
    let rstd = b.unary(UnaryOp::Rsqrt, shifted)?;
    let wide_rstd = broadcast_to(b, rstd, &shape)?;
    let mut out = b.binary(BinaryOp::Multiply, centered, wide_rstd)?;
    for (param, op) in [(weight, BinaryOp::Multiply), (bias, BinaryOp::Add)] {
        if let Some(param) = param {
            let param = convert(b, param, compute)?;
            let param = broadcast_to(b, param, &shape)?;
            out = b.binary(op, out, param)?;
        }
    }
    let out = convert(b, out, dtype)?;
    let mixed = [weight, bias].iter().flatten().any(|&param| b.ty(param).dtype != dtype);
    let stats = if mixed && compute != dtype { compute } else { dtype };
    Ok(LayerNorm { out, mean: convert(b, mean, stats)?, rstd: convert(b, rstd, stats)? })
}

/// Which GELU.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Gelu {
    /// `x * Φ(x)` through `erf` (`approximate='none'`).
    Exact,
    /// The tanh approximation (`approximate='tanh'`).
    Tanh,
}

/// GELU of `x`, computed in `x`'s dtype (callers convert to opmath and back).
pub fn gelu(b: &mut GraphBuilder, x: ValueId, kind: Gelu) -> Built {
    let half_x = binary_scalar(b, BinaryOp::Multiply, x, Scalar::Float(0.5))?;
    let inner = match kind {
        Gelu::Exact => {
            let scaled = binary_scalar(b, BinaryOp::Multiply, x, Scalar::Float(std::f64::consts::FRAC_1_SQRT_2))?;
            ttpu_ir::composite::erf(b, scaled)?
        }
        Gelu::Tanh => {
            // PyTorch's constants: kBeta = √2 · (2/√π) · 0.5 = √(2/π), kKappa = 0.044715.
            let beta = std::f64::consts::SQRT_2 * std::f64::consts::FRAC_2_SQRT_PI * 0.5;
            let square = b.binary(BinaryOp::Multiply, x, x)?;
            let cube = b.binary(BinaryOp::Multiply, square, x)?;
            let kappa_cube = binary_scalar(b, BinaryOp::Multiply, cube, Scalar::Float(0.044715))?;
            let sum = b.binary(BinaryOp::Add, x, kappa_cube)?;
            let scaled = binary_scalar(b, BinaryOp::Multiply, sum, Scalar::Float(beta))?;
            b.unary(UnaryOp::Tanh, scaled)?
        }
    };
    let one_plus = binary_scalar(b, BinaryOp::Add, inner, Scalar::Int(1))?;
    b.binary(BinaryOp::Multiply, half_x, one_plus)
}

/// The variance of a float `x` over `dims` with `correction` (its square root when `sqrt`),
/// and the mean, both in `x`'s dtype, computed in opmath as the mean squared deviation from the
/// mean over `max(n - correction, 0)` (inf or NaN when nothing is left, as in PyTorch). The
/// reduced dims are kept with size 1 when `keep`.
pub fn var_mean(
    b: &mut GraphBuilder,
    x: ValueId,
    dims: &[usize],
    correction: f64,
    keep: bool,
    sqrt: bool,
) -> Built<(ValueId, ValueId)> {
    let dtype = b.ty(x).dtype;
    let n: Count = count(b, x, dims)?;
    let compute = convert(b, x, opmath(dtype))?;
    let shape = b.ty(compute).shape.clone();
    let kept_mean = reduce_keep(b, compute, ReduceKind::Sum, dims, true)?;
    let kept_mean = divide_by_count(b, kept_mean, n, 0.0)?;
    let mean = broadcast_to(b, kept_mean, &shape)?;
    let centered = b.binary(BinaryOp::Subtract, compute, mean)?;
    let squared = b.binary(BinaryOp::Multiply, centered, centered)?;
    let total = reduce_keep(b, squared, ReduceKind::Sum, dims, keep)?;
    let result = divide_by_count(b, total, n, correction)?;
    let result = if sqrt { b.unary(UnaryOp::Sqrt, result)? } else { result };
    let mean_shape = b.ty(total).shape.clone();
    let mean = crate::graph::reshape(b, kept_mean, mean_shape)?;
    Ok((convert(b, result, dtype)?, convert(b, mean, dtype)?))
}

/// Python's `lhs % rhs` (the sign of the divisor) on operands of one type, from C's `fmod` (the
/// sign of the dividend), as PyTorch's kernel computes it: a nonzero `fmod` whose sign differs
/// from the divisor's moves by one divisor.
pub fn python_remainder(b: &mut GraphBuilder, lhs: ValueId, rhs: ValueId) -> Built {
    let fmod = b.binary(BinaryOp::Remainder, lhs, rhs)?;
    let zero = splat_like(b, lhs, Scalar::Int(0))?;
    let nonzero = b.compare(CompareDirection::Ne, fmod, zero)?;
    let fmod_negative = b.compare(CompareDirection::Lt, fmod, zero)?;
    let divisor_negative = b.compare(CompareDirection::Lt, rhs, zero)?;
    let signs_differ = b.compare(CompareDirection::Ne, fmod_negative, divisor_negative)?;
    let adjust = b.binary(BinaryOp::And, nonzero, signs_differ)?;
    let shifted = b.binary(BinaryOp::Add, fmod, rhs)?;
    b.select(adjust, shifted, fmod)
}
