//! `gcd` and `lcm` of integer tensors: Euclid's algorithm as PyTorch's `calc_gcd` runs it on the
//! magnitudes (`while a != 0: a, b = b % a, a`), unrolled to the most steps any pair of the dtype
//! needs (consecutive Fibonacci numbers are the slowest pairs, so a `k`-bit type needs fewer than
//! `1.45 k` steps); a pair that is done keeps its values through the remaining steps.

use ttpu_ir::{BinaryOp, CompareDirection, DType, Scalar, UnaryOp, ValueId};

use super::elementwise::tensor;
use crate::args::Args;
use crate::ctx::{Cx, Imported};
use crate::error::Result;

/// Steps of Euclid's algorithm that settle every pair of `dtype` (the index of the first
/// Fibonacci number past its range, plus one).
fn steps(dtype: DType) -> usize {
    match dtype {
        DType::I8 | DType::U8 => 14,
        DType::I16 => 25,
        DType::I32 => 48,
        _ => 94,
    }
}

/// The integer operands, promoted together, or an error naming the op.
fn operands(cx: &mut Cx<'_>, args: &Args, what: &str) -> Result<(ValueId, ValueId)> {
    let (a, b) = (args.operand("self")?, args.operand("other")?);
    let dtype = cx.result_type(&[a, b]);
    if !dtype.is_integer() {
        return Err(cx.bad(format!("{what} takes integer tensors, found {dtype}")));
    }
    let [a, b] = cx.prepare([a, b], dtype)?;
    Ok((a, b))
}

/// `gcd` of two integer tensors of one shape and dtype.
fn gcd_of(cx: &mut Cx<'_>, a: ValueId, b: ValueId) -> Result<ValueId> {
    let signed = cx.dtype(a).is_signed_integer();
    let (mut a, mut b) = if signed { (cx.unary(UnaryOp::Abs, a)?, cx.unary(UnaryOp::Abs, b)?) } else { (a, b) };
    let zero = cx.splat_like(a, Scalar::Int(0))?;
    let one = cx.splat_like(a, Scalar::Int(1))?;
    for _ in 0..steps(cx.dtype(a)) {
        let running = cx.compare(CompareDirection::Ne, a, zero)?;
        let divisor = cx.select(running, a, one)?;
        let remainder = cx.binary(BinaryOp::Remainder, b, divisor)?;
        let next_b = cx.select(running, a, b)?;
        a = cx.select(running, remainder, a)?;
        b = next_b;
    }
    Ok(b)
}

/// `gcd(self, other)`.
pub(super) fn gcd(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (a, b) = operands(cx, args, "gcd")?;
    tensor(gcd_of(cx, a, b)?)
}

/// `lcm(self, other)`: `|a / gcd * b|`, 0 where the gcd is 0.
pub(super) fn lcm(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (a, b) = operands(cx, args, "lcm")?;
    let g = gcd_of(cx, a, b)?;
    let zero = cx.splat_like(g, Scalar::Int(0))?;
    let one = cx.splat_like(g, Scalar::Int(1))?;
    let none = cx.compare(CompareDirection::Eq, g, zero)?;
    let divisor = cx.select(none, one, g)?;
    let quotient = cx.binary(BinaryOp::Divide, a, divisor)?;
    let product = cx.binary(BinaryOp::Multiply, quotient, b)?;
    let magnitude = if cx.dtype(product).is_signed_integer() { cx.unary(UnaryOp::Abs, product)? } else { product };
    tensor(cx.select(none, zero, magnitude)?)
}
