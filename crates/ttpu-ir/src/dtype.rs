//! Element types of tensors.
//!
//! The set is PyTorch's dtypes that XLA can hold; names follow the `.fx` spelling (`f32`, `bf16`, `b8`
//! is printed as `bool`), which is also the IR text spelling.

use std::fmt;
use std::str::FromStr;

/// Element type of a tensor.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// IEEE binary64.
    F64,
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    BF16,
    /// Signed 64-bit integer.
    I64,
    /// Signed 32-bit integer.
    I32,
    /// Signed 16-bit integer.
    I16,
    /// Signed 8-bit integer.
    I8,
    /// Unsigned 8-bit integer.
    U8,
    /// Unsigned 64-bit integer: PyTorch's `uint64`, and the state and the bits of
    /// `rng_bit_generator` (XLA needs both unsigned). Literal elements hold the bit pattern in
    /// [`crate::Scalar::Int`], and the IR text spells them that way: values of 2^63 and above print
    /// as negative numbers.
    U64,
    /// Boolean (one byte per element, 0 or 1).
    Bool,
    /// Complex of two f32 (real, then imaginary part). PyTorch's `complex64`.
    C64,
    /// Complex of two f64 (real, then imaginary part). PyTorch's `complex128`.
    C128,
    /// Unsigned 16-bit integer (PyTorch's `uint16`).
    U16,
    /// Unsigned 32-bit integer (PyTorch's `uint32`).
    U32,
    /// Complex of two f16 (real, then imaginary part): PyTorch's `complex32` (`chalf`). StableHLO
    /// has complex types of f32 and f64 parts only, so programs hold it as `complex<f32>` and
    /// round both parts to f16 after every op that computes one (PyTorch computes `complex32` in
    /// `complex64` and rounds each result); device buffers are `c64`, host tensors 4 bytes per
    /// element as PyTorch stores them.
    C32,
}

impl DType {
    /// Every dtype, in a fixed order.
    pub const ALL: [DType; 16] = [
        DType::F64,
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I64,
        DType::I32,
        DType::I16,
        DType::I8,
        DType::U8,
        DType::U64,
        DType::Bool,
        DType::C64,
        DType::C128,
        DType::U16,
        DType::U32,
        DType::C32,
    ];

    /// The IR text spelling (`f32`, `bool`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F64 => "f64",
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I64 => "i64",
            DType::I32 => "i32",
            DType::I16 => "i16",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::U64 => "u64",
            DType::Bool => "bool",
            DType::C64 => "c64",
            DType::C128 => "c128",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::C32 => "c32",
        }
    }

    /// Bytes per element in a dense host buffer.
    pub fn byte_size(self) -> usize {
        match self {
            DType::C128 => 16,
            DType::F64 | DType::I64 | DType::U64 | DType::C64 => 8,
            DType::F32 | DType::I32 | DType::U32 | DType::C32 => 4,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
        }
    }

    /// Whether this is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F64 | DType::F32 | DType::F16 | DType::BF16)
    }

    /// Whether this is an integer type (bool excluded).
    pub fn is_integer(self) -> bool {
        matches!(
            self,
            DType::I64 | DType::I32 | DType::I16 | DType::I8 | DType::U8 | DType::U16 | DType::U32 | DType::U64
        )
    }

    /// Whether this is a signed integer type.
    pub fn is_signed_integer(self) -> bool {
        matches!(self, DType::I64 | DType::I32 | DType::I16 | DType::I8)
    }

    /// Whether this is a complex type (`c32`, `c64`, `c128`). Complex types are not floats: ops that need
    /// an ordered or real operand check [`DType::is_float`] and so refuse them.
    pub fn is_complex(self) -> bool {
        matches!(self, DType::C32 | DType::C64 | DType::C128)
    }

    /// The dtype of the real and imaginary parts of a complex type (`c64` -> `f32`).
    pub fn complex_part(self) -> Option<DType> {
        match self {
            DType::C32 => Some(DType::F16),
            DType::C64 => Some(DType::F32),
            DType::C128 => Some(DType::F64),
            _ => None,
        }
    }

    /// The complex type whose parts are this float type (`f32` -> `c64`, `f16` -> `c32`).
    pub fn complex_of(self) -> Option<DType> {
        match self {
            DType::F16 => Some(DType::C32),
            DType::F32 => Some(DType::C64),
            DType::F64 => Some(DType::C128),
            _ => None,
        }
    }

    /// Whether this is `bool`.
    pub fn is_bool(self) -> bool {
        self == DType::Bool
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The text was not a dtype name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownDType(pub String);

impl FromStr for DType {
    type Err = UnknownDType;

    /// Accepts the IR spelling and the `.fx` spelling (`b8` for bool, `ui8` for u8).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(match text {
            "f64" => DType::F64,
            "f32" => DType::F32,
            "f16" => DType::F16,
            "bf16" => DType::BF16,
            "i64" => DType::I64,
            "i32" => DType::I32,
            "i16" => DType::I16,
            "i8" => DType::I8,
            "u8" | "ui8" => DType::U8,
            "u16" => DType::U16,
            "u32" => DType::U32,
            "u64" => DType::U64,
            "bool" | "b8" => DType::Bool,
            "c32" => DType::C32,
            "c64" => DType::C64,
            "c128" => DType::C128,
            _ => return Err(UnknownDType(text.to_owned())),
        })
    }
}
