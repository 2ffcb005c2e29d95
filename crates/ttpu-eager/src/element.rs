//! Host element types a tensor can be built from or read as (the dtype mappings at the PJRT and
//! safetensors boundaries are the runtime's).
//!
//! PJRT host buffers are native-endian and IR literals are little-endian; ttpu runs only on
//! little-endian hosts, where the two agree, so both sides use `to_le_bytes`.

use half::{bf16, f16};
use ttpu_ir::{DType, Scalar};

mod sealed {
    pub trait Sealed {}
}

/// A Rust type that holds one tensor element: `f32`, `f64`, `i64`, `i32`, `bool`, `bf16`, `f16`.
pub trait Element: sealed::Sealed + Copy + Send + Sync + 'static {
    /// The tensor dtype of this type.
    const DTYPE: DType;
    /// Appends the little-endian bytes of `self`.
    fn write(self, out: &mut Vec<u8>);
    /// Reads one element from the front of `bytes` (at least `DTYPE.byte_size()` long).
    fn read(bytes: &[u8]) -> Self;
    /// The value as an IR scalar, for constants.
    fn to_scalar(self) -> Scalar;
}

macro_rules! element {
    ($ty:ty, $dtype:expr, $scalar:expr) => {
        impl sealed::Sealed for $ty {}
        impl Element for $ty {
            const DTYPE: DType = $dtype;
            fn write(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn read(bytes: &[u8]) -> Self {
                let mut array = [0u8; size_of::<$ty>()];
                array.copy_from_slice(&bytes[..size_of::<$ty>()]);
                <$ty>::from_le_bytes(array)
            }
            fn to_scalar(self) -> Scalar {
                #[allow(clippy::redundant_closure_call)]
                ($scalar)(self)
            }
        }
    };
}

element!(f32, DType::F32, |value: f32| Scalar::Float(f64::from(value)));
element!(f64, DType::F64, Scalar::Float);
element!(i64, DType::I64, Scalar::Int);
element!(i32, DType::I32, |value: i32| Scalar::Int(i64::from(value)));
element!(bf16, DType::BF16, |value: bf16| Scalar::Float(value.to_f64()));
element!(f16, DType::F16, |value: f16| Scalar::Float(value.to_f64()));

impl sealed::Sealed for bool {}
impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn write(self, out: &mut Vec<u8>) {
        out.push(u8::from(self));
    }
    fn read(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }
    fn to_scalar(self) -> Scalar {
        Scalar::Bool(self)
    }
}
