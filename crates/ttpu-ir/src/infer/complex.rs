//! Inference for complex parts and Fourier transforms, per the StableHLO spec of `real`, `imag`,
//! `complex` and `fft`.

use super::{InferResult, fail};
use crate::{Dim, FftType, Op, TensorType};

/// `real` and `imag`: a complex operand gives its part dtype, same shape.
pub(super) fn part(op: &Op, operand: &TensorType) -> InferResult {
    match operand.dtype.complex_part() {
        Some(part) => Ok(operand.with_dtype(part)),
        None => fail(op, format!("needs a complex operand, found {operand}")),
    }
}

/// `complex`: two operands of one type, `f32` or `f64`.
pub(super) fn complex(op: &Op, lhs: &TensorType, rhs: &TensorType) -> InferResult {
    if lhs != rhs {
        return fail(op, format!("operand types differ: {lhs} vs {rhs}"));
    }
    match lhs.dtype.complex_of() {
        Some(dtype) => Ok(lhs.with_dtype(dtype)),
        None => fail(op, format!("needs f32 or f64 parts, found {lhs}")),
    }
}

/// `fft`: one to three trailing dims of static, positive transform sizes. `FFT`/`IFFT` keep a
/// complex operand's type; `RFFT` takes `f32`/`f64` and keeps `n/2 + 1` entries of the last dim;
/// `IRFFT` reads `n/2 + 1` entries of the last dim and gives `n` real ones.
pub(super) fn fft(op: &Op, kind: FftType, length: &[i64], operand: &TensorType) -> InferResult {
    if length.is_empty() || length.len() > 3 {
        return fail(op, format!("transforms 1 to 3 dims, found fft_length {length:?}"));
    }
    if length.iter().any(|&size| size <= 0) {
        return fail(op, format!("fft_length {length:?} must be positive"));
    }
    let rank = operand.rank();
    if rank < length.len() {
        return fail(op, format!("fft_length {length:?} has more dims than {operand}"));
    }
    let dtype = match kind {
        FftType::Fft | FftType::Ifft if operand.dtype.is_complex() => operand.dtype,
        FftType::Rfft if operand.dtype.complex_of().is_some() => operand.dtype.complex_of().expect("checked"),
        FftType::Irfft if operand.dtype.is_complex() => operand.dtype.complex_part().expect("checked"),
        _ => return fail(op, format!("{} is not defined for {operand}", kind.mnemonic())),
    };
    let last = length.len() - 1;
    let mut dims = operand.shape.dims().to_vec();
    let first = rank - length.len();
    for (index, &size) in length.iter().enumerate() {
        // What the operand must hold along this dim.
        let expected = if kind == FftType::Irfft && index == last { size / 2 + 1 } else { size };
        if dims[first + index] != Dim::Static(expected) {
            return fail(
                op,
                format!(
                    "{} with fft_length {length:?} needs dim {} of {operand} to be {expected}",
                    kind.mnemonic(),
                    first + index
                ),
            );
        }
    }
    dims[rank - 1] = Dim::Static(match kind {
        FftType::Rfft => length[last] / 2 + 1,
        _ => length[last],
    });
    Ok(TensorType::new(dtype, dims.into_iter().collect()))
}
