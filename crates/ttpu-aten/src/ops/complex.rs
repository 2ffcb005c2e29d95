//! Complex numbers and Fourier transforms: `view_as_real`/`view_as_complex`, `real`, `imag`,
//! `angle`, `complex` and ATen's three FFT kernels (`_fft_r2c`, `_fft_c2r`, `_fft_c2c`).
//!
//! StableHLO's `fft` transforms the trailing dims, so PyTorch's `dim` list is moved to the end (in
//! its order, which puts the halved dim of a one-sided transform last) and moved back after.
//! StableHLO's inverse transforms divide by `n` and PyTorch's kernels do not (their `normalization`
//! argument says what to divide by), so inverse results are multiplied by `n` times PyTorch's
//! factor, which is exactly 1 for the default `norm="backward"`.

use ttpu_ir::{BinaryOp, CompareDirection, DType, FftType, Scalar, Shape, ValueId};

use super::elementwise::tensor;
use crate::args::Args;
use crate::ctx::{Cx, Imported};
use crate::error::Result;
use crate::promote::DEFAULT_FLOAT;

/// The parts dtype of a complex value, or an error naming the op that needs one.
fn complex_part(cx: &Cx<'_>, z: ValueId, op: &str) -> Result<DType> {
    let ty = cx.ty(z);
    ty.dtype.complex_part().ok_or_else(|| cx.bad(format!("{op} needs a complex tensor, found {ty}")))
}

fn real_of(cx: &mut Cx<'_>, z: ValueId) -> Result<ValueId> {
    let built = cx.b.real(z);
    cx.ok(built)
}

/// `value` cast to `dtype` as PyTorch casts: a complex value cast to a real dtype keeps its real
/// part (PyTorch warns that the imaginary part is discarded, and computes it all the same).
pub(super) fn cast(cx: &mut Cx<'_>, value: ValueId, dtype: DType) -> Result<ValueId> {
    let value = if cx.dtype(value).is_complex() && !dtype.is_complex() { real_of(cx, value)? } else { value };
    cx.convert(value, dtype)
}

fn imag_of(cx: &mut Cx<'_>, z: ValueId) -> Result<ValueId> {
    let built = cx.b.imag(z);
    cx.ok(built)
}

fn complex_of(cx: &mut Cx<'_>, re: ValueId, im: ValueId) -> Result<ValueId> {
    let built = cx.b.complex(re, im);
    cx.ok(built)
}

/// `view_as_real`: a complex tensor as its parts along a new last dim of 2 (real first).
pub(super) fn view_as_real(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let z = args.tensor("self")?;
    complex_part(cx, z, "view_as_real")?;
    let mut shape = cx.shape(z).0.into_vec();
    shape.push(ttpu_ir::Dim::Static(1));
    let shape: Shape = shape.into_iter().collect();
    let re = real_of(cx, z)?;
    let im = imag_of(cx, z)?;
    let re = cx.reshape(re, shape.clone())?;
    let im = cx.reshape(im, shape)?;
    let rank = cx.rank(z) as i64;
    tensor(cx.concatenate(&[re, im], rank)?)
}

/// `view_as_complex`: an `f32`/`f64` tensor whose last dim is 2 (real, imaginary) as complex.
pub(super) fn view_as_complex(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let ty = cx.ty(x);
    if ty.dtype.complex_of().is_none() {
        return Err(cx.bad(format!("view_as_complex is only supported for float and double tensors, found {ty}")));
    }
    let rank = ty.rank();
    if rank == 0 || ty.shape[rank - 1] != ttpu_ir::Dim::Static(2) {
        return Err(cx.bad(format!("view_as_complex needs a last dim of size 2, found {ty}")));
    }
    let shape: Shape = ty.shape.dims()[..rank - 1].iter().cloned().collect();
    let re = cx.slice_dim(x, rank - 1, 0, 1, 1)?;
    let im = cx.slice_dim(x, rank - 1, 1, 2, 1)?;
    let re = cx.reshape(re, shape.clone())?;
    let im = cx.reshape(im, shape)?;
    tensor(complex_of(cx, re, im)?)
}

/// `real`: the real part of a complex tensor; a real tensor is its own real part.
pub(super) fn real(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    if !cx.dtype(x).is_complex() {
        return tensor(x);
    }
    tensor(real_of(cx, x)?)
}

/// `imag`: the imaginary part of a complex tensor (PyTorch refuses real tensors).
pub(super) fn imag(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    complex_part(cx, x, "imag")?;
    tensor(imag_of(cx, x)?)
}

/// `complex(real, imag)`: two `f32` (or two `f64`) tensors, broadcast together.
pub(super) fn complex(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (re, im) = (args.tensor("real")?, args.tensor("imag")?);
    let (re_ty, im_ty) = (cx.ty(re), cx.ty(im));
    if re_ty.dtype != im_ty.dtype || re_ty.dtype.complex_of().is_none() {
        return Err(cx.bad(format!("complex needs two float or two double tensors, found {re_ty} and {im_ty}")));
    }
    let [re, im] = cx.broadcast_all([re, im])?;
    tensor(complex_of(cx, re, im)?)
}

/// `angle`: `atan2(imag, real)` of a complex tensor, in its parts dtype. Of a real tensor,
/// PyTorch's kernel: `pi` for negative values, `0` otherwise, NaN kept (integers compute in the
/// default float dtype).
pub(super) fn angle(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let dtype = cx.dtype(x);
    if dtype.is_complex() {
        let re = real_of(cx, x)?;
        let im = imag_of(cx, x)?;
        return tensor(cx.binary(BinaryOp::Atan2, im, re)?);
    }
    let out = if dtype.is_float() { dtype } else { DEFAULT_FLOAT };
    let x = cx.convert(x, out)?;
    let zero = cx.splat_like(x, Scalar::Float(0.0))?;
    let pi = cx.splat_like(x, Scalar::Float(std::f64::consts::PI))?;
    let negative = cx.compare(CompareDirection::Lt, x, zero)?;
    let turned = cx.select(negative, pi, zero)?;
    let nan = cx.compare(CompareDirection::Ne, x, x)?;
    tensor(cx.select(nan, x, turned)?)
}

/// A checked FFT call: the normalized `dim` list (one to three dims, as StableHLO's `fft`
/// transforms at most three) and PyTorch's `normalization` mode (0: none, 1: by `1/sqrt(n)`,
/// 2: by `1/n`, aten's `fft_norm_mode`).
fn fft_args(cx: &Cx<'_>, args: &Args, rank: usize) -> Result<(Vec<usize>, i64)> {
    let dims = cx.norm_dims(&args.ints("dim")?, rank)?;
    if dims.is_empty() || dims.len() > 3 {
        return Err(cx.bad(format!(
            "transforms 1 to 3 dims at once (StableHLO's fft), found {} dims; split the transform",
            dims.len()
        )));
    }
    let normalization = args.int("normalization")?;
    if !(0..=2).contains(&normalization) {
        return Err(cx.bad(format!("normalization must be 0, 1 or 2 (none, 1/sqrt(n), 1/n), found {normalization}")));
    }
    Ok((dims, normalization))
}

/// The permutation moving `dims` (in their order) behind the other dims.
fn to_end(rank: usize, dims: &[usize]) -> Vec<i64> {
    let mut permutation: Vec<i64> = (0..rank).filter(|dim| !dims.contains(dim)).map(|dim| dim as i64).collect();
    permutation.extend(dims.iter().map(|&dim| dim as i64));
    permutation
}

fn inverse(permutation: &[i64]) -> Vec<i64> {
    let mut inverse = vec![0; permutation.len()];
    for (index, &dim) in permutation.iter().enumerate() {
        inverse[dim as usize] = index as i64;
    }
    inverse
}

/// The static sizes of the trailing `count` dims of `x`.
fn trailing_sizes(cx: &Cx<'_>, x: ValueId, count: usize, what: &str) -> Result<Vec<i64>> {
    let rank = cx.rank(x);
    (rank - count..rank).map(|dim| cx.static_dim(x, dim, what)).collect()
}

/// PyTorch's `compute_fct`: 1, `1/sqrt(n)` or `1/n`, computed in the dtype of the parts as its
/// kernels do.
fn norm_factor(part: DType, n: i64, normalization: i64) -> f64 {
    match (normalization, part) {
        (1, DType::F32) => f64::from(1.0f32 / (n as f32).sqrt()),
        (2, DType::F32) => f64::from(1.0f32 / n as f32),
        (1, _) => 1.0 / (n as f64).sqrt(),
        (2, _) => 1.0 / n as f64,
        _ => 1.0,
    }
}

/// `x` times a real `factor`: each part of a complex value is scaled on its own, as PyTorch's
/// kernels scale, so infinities and signed zeros come out as there (a complex product with
/// `factor + 0i` would add `inf * 0` terms).
fn scale(cx: &mut Cx<'_>, x: ValueId, factor: f64) -> Result<ValueId> {
    if factor == 1.0 {
        return Ok(x);
    }
    if !cx.dtype(x).is_complex() {
        return cx.binary_scalar(BinaryOp::Multiply, x, Scalar::Float(factor));
    }
    let re = real_of(cx, x)?;
    let im = imag_of(cx, x)?;
    let re = cx.binary_scalar(BinaryOp::Multiply, re, Scalar::Float(factor))?;
    let im = cx.binary_scalar(BinaryOp::Multiply, im, Scalar::Float(factor))?;
    complex_of(cx, re, im)
}

fn fft(cx: &mut Cx<'_>, x: ValueId, kind: FftType, length: &[i64]) -> Result<ValueId> {
    let built = cx.b.fft(x, kind, length);
    cx.ok(built)
}

/// `_fft_r2c(self, dim, normalization, onesided)`: the forward transform of a real tensor; a
/// one-sided result keeps `n/2 + 1` entries of the last listed dim.
pub(super) fn fft_r2c(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let ty = cx.ty(x);
    let Some(complex) = ty.dtype.complex_of() else {
        return Err(cx.bad(format!("_fft_r2c needs a float or double tensor, found {ty}")));
    };
    let (dims, normalization) = fft_args(cx, args, ty.rank())?;
    let onesided = args.bool_or("onesided", true)?;
    let permutation = to_end(ty.rank(), &dims);
    let moved = cx.transpose(x, &permutation)?;
    let length = trailing_sizes(cx, moved, dims.len(), "_fft_r2c")?;
    let spectrum = if onesided {
        fft(cx, moved, FftType::Rfft, &length)?
    } else {
        let zero = cx.splat_like(moved, Scalar::Float(0.0))?;
        let z = complex_of(cx, moved, zero)?;
        debug_assert_eq!(cx.dtype(z), complex);
        fft(cx, z, FftType::Fft, &length)?
    };
    let n = length.iter().product();
    let scaled = scale(cx, spectrum, norm_factor(ty.dtype, n, normalization))?;
    tensor(cx.transpose(scaled, &inverse(&permutation))?)
}

/// `_fft_c2c(self, dim, normalization, forward)`: the forward or (unnormalized) inverse transform
/// of a complex tensor.
pub(super) fn fft_c2c(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let z = args.tensor("self")?;
    let part = complex_part(cx, z, "_fft_c2c")?;
    let (dims, normalization) = fft_args(cx, args, cx.rank(z))?;
    let forward = args.bool_or("forward", true)?;
    let permutation = to_end(cx.rank(z), &dims);
    let moved = cx.transpose(z, &permutation)?;
    let length = trailing_sizes(cx, moved, dims.len(), "_fft_c2c")?;
    let n: i64 = length.iter().product();
    let (kind, factor) = if forward {
        (FftType::Fft, norm_factor(part, n, normalization))
    } else {
        (FftType::Ifft, n as f64 * norm_factor(part, n, normalization))
    };
    let transformed = fft(cx, moved, kind, &length)?;
    let scaled = scale(cx, transformed, factor)?;
    tensor(cx.transpose(scaled, &inverse(&permutation))?)
}

/// `_fft_c2r(self, dim, normalization, last_dim_size)`: the inverse of a one-sided transform,
/// giving `last_dim_size` real entries along the last listed dim from its first
/// `last_dim_size/2 + 1` complex ones (PyTorch's kernel reads no more).
pub(super) fn fft_c2r(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let z = args.tensor("self")?;
    let part = complex_part(cx, z, "_fft_c2r")?;
    let rank = cx.rank(z);
    let (dims, normalization) = fft_args(cx, args, rank)?;
    let last_dim_size = args.int("last_dim_size")?;
    if last_dim_size < 1 {
        return Err(cx.bad(format!("last_dim_size must be positive, found {last_dim_size}")));
    }
    let permutation = to_end(rank, &dims);
    let mut moved = cx.transpose(z, &permutation)?;
    let mut length = trailing_sizes(cx, moved, dims.len(), "_fft_c2r")?;
    let half = last_dim_size / 2 + 1;
    let stored = length[dims.len() - 1];
    if stored < half {
        return Err(cx.bad(format!(
            "last_dim_size {last_dim_size} needs {half} entries along dim {}, found {stored}",
            dims[dims.len() - 1]
        )));
    }
    moved = cx.slice_dim(moved, rank - 1, 0, half, 1)?;
    *length.last_mut().expect("at least one dim") = last_dim_size;
    let n: i64 = length.iter().product();
    let transformed = fft(cx, moved, FftType::Irfft, &length)?;
    let scaled = scale(cx, transformed, n as f64 * norm_factor(part, n, normalization))?;
    tensor(cx.transpose(scaled, &inverse(&permutation))?)
}
