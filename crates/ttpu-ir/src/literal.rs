//! Constant tensor data held by `constant` nodes.
//!
//! Data is stored densely, little-endian, in the literal's own dtype, so lowering can hand the bytes
//! to MLIR unchanged and no value is rounded twice.

use std::fmt;
use std::sync::Arc;

use half::{bf16, f16};
use smallvec::SmallVec;

use crate::{DType, TensorType};

/// A scalar in the widest representation of its kind.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Scalar {
    /// A floating-point value.
    Float(f64),
    /// An integer value.
    Int(i64),
    /// A boolean value.
    Bool(bool),
}

impl Scalar {
    /// The value as `f64` (integers may round above 2^53).
    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::Float(value) => value,
            Scalar::Int(value) => value as f64,
            Scalar::Bool(value) => f64::from(u8::from(value)),
        }
    }

    /// The value as `i64`, truncating floats toward zero like a C cast.
    pub fn as_i64(self) -> i64 {
        match self {
            Scalar::Float(value) => value as i64,
            Scalar::Int(value) => value,
            Scalar::Bool(value) => i64::from(value),
        }
    }

    /// Encodes the value as one element of `dtype`, converting like `torch.tensor(v, dtype=...)`.
    pub fn to_bytes(self, dtype: DType, out: &mut Vec<u8>) {
        match dtype {
            DType::F64 => out.extend_from_slice(&self.as_f64().to_le_bytes()),
            DType::F32 => out.extend_from_slice(&(self.as_f64() as f32).to_le_bytes()),
            DType::F16 => out.extend_from_slice(&to_f16(self.as_f64()).to_le_bytes()),
            DType::BF16 => out.extend_from_slice(&to_bf16(self.as_f64()).to_le_bytes()),
            DType::I64 => out.extend_from_slice(&self.as_i64().to_le_bytes()),
            DType::I32 => out.extend_from_slice(&(self.as_i64() as i32).to_le_bytes()),
            DType::I16 => out.extend_from_slice(&(self.as_i64() as i16).to_le_bytes()),
            DType::I8 => out.extend_from_slice(&(self.as_i64() as i8).to_le_bytes()),
            DType::U8 => out.extend_from_slice(&(self.as_i64() as u8).to_le_bytes()),
            DType::U16 => out.extend_from_slice(&(self.as_i64() as u16).to_le_bytes()),
            DType::U32 => out.extend_from_slice(&(self.as_i64() as u32).to_le_bytes()),
            // The bit pattern: `Scalar::Int` holds u64 values of 2^63 and above as negative.
            DType::U64 => out.extend_from_slice(&self.as_i64().to_le_bytes()),
            // A `Scalar` is real: as a complex element it is (value, 0). Complex literals hold real
            // values only; numbers with an imaginary part are built with `complex`.
            DType::C32 => {
                out.extend_from_slice(&to_f16(self.as_f64()).to_le_bytes());
                out.extend_from_slice(&0u16.to_le_bytes());
            }
            DType::C64 => {
                out.extend_from_slice(&(self.as_f64() as f32).to_le_bytes());
                out.extend_from_slice(&0f32.to_le_bytes());
            }
            DType::C128 => {
                out.extend_from_slice(&self.as_f64().to_le_bytes());
                out.extend_from_slice(&0f64.to_le_bytes());
            }
            DType::Bool => out.push(u8::from(match self {
                Scalar::Float(value) => value != 0.0,
                Scalar::Int(value) => value != 0,
                Scalar::Bool(value) => value,
            })),
        }
    }

    /// Decodes one element of `dtype` from the front of `bytes`.
    pub fn from_bytes(dtype: DType, bytes: &[u8]) -> Scalar {
        fn array<const N: usize>(bytes: &[u8]) -> [u8; N] {
            bytes[..N].try_into().expect("caller passes at least one element")
        }
        match dtype {
            DType::F64 => Scalar::Float(f64::from_le_bytes(array(bytes))),
            DType::F32 => Scalar::Float(f64::from(f32::from_le_bytes(array(bytes)))),
            DType::F16 => Scalar::Float(f16::from_le_bytes(array(bytes)).to_f64()),
            DType::BF16 => Scalar::Float(bf16::from_le_bytes(array(bytes)).to_f64()),
            DType::I64 => Scalar::Int(i64::from_le_bytes(array(bytes))),
            DType::I32 => Scalar::Int(i64::from(i32::from_le_bytes(array(bytes)))),
            DType::I16 => Scalar::Int(i64::from(i16::from_le_bytes(array(bytes)))),
            DType::I8 => Scalar::Int(i64::from(i8::from_le_bytes(array(bytes)))),
            DType::U8 => Scalar::Int(i64::from(bytes[0])),
            DType::U16 => Scalar::Int(i64::from(u16::from_le_bytes(array(bytes)))),
            DType::U32 => Scalar::Int(i64::from(u32::from_le_bytes(array(bytes)))),
            DType::U64 => Scalar::Int(i64::from_le_bytes(array(bytes))),
            DType::Bool => Scalar::Bool(bytes[0] != 0),
            // Complex elements are (real, imaginary) pairs; a literal built from scalars has zero
            // imaginary parts, so the real part is the whole value.
            DType::C32 => Scalar::Float(f16::from_le_bytes(array(bytes)).to_f64()),
            DType::C64 => Scalar::Float(f64::from(f32::from_le_bytes(array(bytes)))),
            DType::C128 => Scalar::Float(f64::from_le_bytes(array(bytes))),
        }
    }
}

/// The bytes of `complex32` elements (pairs of little-endian halves) as `complex64` elements
/// holding the same values (each half widened exactly to f32): how programs and devices hold
/// `complex32`, which StableHLO and PJRT have no type for.
pub fn complex32_as_c64_bytes(halves: &[u8]) -> Vec<u8> {
    halves.chunks_exact(2).flat_map(|half| f16::from_le_bytes([half[0], half[1]]).to_f32().to_le_bytes()).collect()
}

/// The inverse of [`complex32_as_c64_bytes`]: `complex64` elements whose parts are halves, as
/// `complex32` bytes (each part rounded to half, exact for such values).
pub fn c64_as_complex32_bytes(parts: &[u8]) -> Vec<u8> {
    parts
        .chunks_exact(4)
        .flat_map(|part| f16::from_f32(f32::from_le_bytes([part[0], part[1], part[2], part[3]])).to_le_bytes())
        .collect()
}

/// `value` rounded to f32 with round-to-odd: truncated toward zero, with the last mantissa bit
/// set when anything was cut off. Rounding that result once more to a format of at most 22
/// mantissa bits (f16, bf16) gives the correctly rounded value, which two nearest-even roundings
/// would not always give.
fn round_to_odd_f32(value: f64) -> f32 {
    let nearest = value as f32;
    if value.is_nan() || f64::from(nearest) == value {
        return nearest;
    }
    // `nearest` is inexact: step it toward zero if it rounded away, then mark it inexact.
    let toward_zero =
        if f64::from(nearest).abs() > value.abs() { f32::from_bits(nearest.to_bits() - 1) } else { nearest };
    f32::from_bits(toward_zero.to_bits() | 1)
}

/// The f16 nearest to `value`, ties to even (`half` converts f64 by way of a truncated f32).
pub(crate) fn to_f16(value: f64) -> f16 {
    f16::from_f32(round_to_odd_f32(value))
}

/// The bf16 nearest to `value`, ties to even.
pub(crate) fn to_bf16(value: f64) -> bf16 {
    bf16::from_f32(round_to_odd_f32(value))
}

impl fmt::Display for Scalar {
    /// Floats always print with a fraction or exponent so they re-parse as floats; non-finite
    /// values print as `inf`, `-inf`, `nan`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Scalar::Float(value) if value.is_nan() => f.write_str("nan"),
            Scalar::Float(value) if value.is_infinite() => f.write_str(if value > 0.0 { "inf" } else { "-inf" }),
            Scalar::Float(value) => {
                let text = format!("{value:?}");
                f.write_str(&text)
            }
            Scalar::Int(value) => write!(f, "{value}"),
            Scalar::Bool(value) => write!(f, "{value}"),
        }
    }
}

/// A constant tensor: dtype, static dims and dense little-endian data.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Literal {
    dtype: DType,
    dims: SmallVec<[i64; 4]>,
    data: Arc<[u8]>,
}

/// The data length did not match dims and dtype.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiteralSizeError {
    /// Bytes the dims and dtype need.
    pub expected: usize,
    /// Bytes given.
    pub actual: usize,
}

impl Literal {
    /// A literal from raw little-endian bytes.
    pub fn from_bytes(dtype: DType, dims: &[i64], data: impl Into<Arc<[u8]>>) -> Result<Literal, LiteralSizeError> {
        let data = data.into();
        let count: i64 = dims.iter().product();
        let expected = usize::try_from(count).unwrap_or(0) * dtype.byte_size();
        if data.len() != expected {
            return Err(LiteralSizeError { expected, actual: data.len() });
        }
        Ok(Literal { dtype, dims: dims.into(), data })
    }

    /// A rank-0 literal.
    pub fn scalar(dtype: DType, value: Scalar) -> Literal {
        Literal::splat(dtype, &[], value)
    }

    /// A literal whose every element is `value`.
    pub fn splat(dtype: DType, dims: &[i64], value: Scalar) -> Literal {
        let count = usize::try_from(dims.iter().product::<i64>()).unwrap_or(0);
        let mut one = Vec::with_capacity(dtype.byte_size());
        value.to_bytes(dtype, &mut one);
        let data: Vec<u8> = one.iter().copied().cycle().take(count * one.len()).collect();
        Literal { dtype, dims: dims.into(), data: data.into() }
    }

    /// A literal from element values, converted to `dtype`.
    pub fn from_scalars(dtype: DType, dims: &[i64], values: &[Scalar]) -> Result<Literal, LiteralSizeError> {
        let mut data = Vec::with_capacity(values.len() * dtype.byte_size());
        for value in values {
            value.to_bytes(dtype, &mut data);
        }
        Literal::from_bytes(dtype, dims, data)
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Static dims.
    pub fn dims(&self) -> &[i64] {
        &self.dims
    }

    /// The tensor type of this literal.
    pub fn ty(&self) -> TensorType {
        TensorType::from_static(self.dtype, &self.dims)
    }

    /// Dense little-endian bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data.len() / self.dtype.byte_size()
    }

    /// Whether the literal holds no element.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Element `index` in row-major order.
    pub fn get(&self, index: usize) -> Option<Scalar> {
        let size = self.dtype.byte_size();
        let bytes = self.data.get(index * size..(index + 1) * size)?;
        Some(Scalar::from_bytes(self.dtype, bytes))
    }

    /// The single value if every element is bitwise the same (and there is at least one).
    pub fn splat_value(&self) -> Option<Scalar> {
        let size = self.dtype.byte_size();
        let first = self.data.get(..size)?;
        self.data.chunks_exact(size).all(|chunk| chunk == first).then(|| Scalar::from_bytes(self.dtype, first))
    }

    /// Every element, row-major.
    pub fn scalars(&self) -> impl Iterator<Item = Scalar> + '_ {
        self.data.chunks_exact(self.dtype.byte_size()).map(|chunk| Scalar::from_bytes(self.dtype, chunk))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f64_to_half_precision_rounds_once() {
        // Just above the tie between 1 and the next bf16: rounding to f32 first lands exactly on
        // the tie, and ties-to-even would then wrongly give 1.
        let above_tie = 1.0 + 2f64.powi(-8) + 2f64.powi(-30);
        assert_eq!(to_bf16(above_tie).to_f64(), 1.0 + 2f64.powi(-7));
        assert_eq!(to_bf16(1.0 + 2f64.powi(-8)).to_f64(), 1.0, "an exact tie goes to even");
        let above_f16_tie = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        assert_eq!(to_f16(above_f16_tie).to_f64(), 1.0 + 2f64.powi(-10));
        assert_eq!(to_bf16(-above_tie).to_f64(), -(1.0 + 2f64.powi(-7)));
        assert!(to_bf16(1e39).to_f64().is_infinite(), "beyond the range is infinity");
        assert_eq!(to_f16(1e-30).to_f64(), 0.0);
        assert!(to_bf16(f64::NAN).is_nan());
        assert_eq!(to_f16(65504.0).to_f64(), 65504.0);
    }
}
