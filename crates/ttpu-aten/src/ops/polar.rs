//! Complex conjugation and construction from polar coordinates: `_conj`, `_conj_physical`,
//! `conj_physical` and `polar` (rotary embeddings build their frequencies with it).
//!
//! PyTorch's `_conj` only flips a lazy bit on the tensor; its value, once read, is the conjugate,
//! which is what the IR computes. Conjugating a real tensor gives it back.

use ttpu_ir::{BinaryOp, DType, UnaryOp};

use super::elementwise::tensor;
use crate::args::Args;
use crate::ctx::{Cx, Imported};
use crate::error::Result;

/// `_conj` / `_conj_physical` / `conj_physical(self)`: `real - i imag`.
pub(super) fn conj(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let z = args.tensor("self")?;
    if !cx.dtype(z).is_complex() {
        return tensor(z);
    }
    let built = cx.b.real(z);
    let re = cx.ok(built)?;
    let built = cx.b.imag(z);
    let im = cx.ok(built)?;
    let im = cx.unary(UnaryOp::Negate, im)?;
    let built = cx.b.complex(re, im);
    tensor(cx.ok(built)?)
}

/// `polar(abs, angle)`: `abs * cos(angle) + i abs * sin(angle)`, of two `f16`, `f32` or `f64`
/// tensors broadcast together.
pub(super) fn polar(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (magnitude, angle) = (args.tensor("abs")?, args.tensor("angle")?);
    let (abs_ty, angle_ty) = (cx.ty(magnitude), cx.ty(angle));
    if abs_ty.dtype != angle_ty.dtype || abs_ty.dtype.complex_of().is_none() {
        return Err(cx.bad(format!("polar needs two half, float or double tensors, found {abs_ty} and {angle_ty}")));
    }
    let [mut magnitude, mut angle] = cx.broadcast_all([magnitude, angle])?;
    // Half parts are computed in f32 and each rounded once, as PyTorch's kernel does.
    let part = abs_ty.dtype;
    if part == DType::F16 {
        magnitude = cx.convert(magnitude, DType::F32)?;
        angle = cx.convert(angle, DType::F32)?;
    }
    let cos = cx.unary(UnaryOp::Cosine, angle)?;
    let sin = cx.unary(UnaryOp::Sine, angle)?;
    let mut re = cx.binary(BinaryOp::Multiply, magnitude, cos)?;
    let mut im = cx.binary(BinaryOp::Multiply, magnitude, sin)?;
    if part == DType::F16 {
        re = cx.convert(re, part)?;
        im = cx.convert(im, part)?;
    }
    let built = cx.b.complex(re, im);
    tensor(cx.ok(built)?)
}
