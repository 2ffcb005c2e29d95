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
    /// Unsigned 64-bit integer: the state and the bits of `rng_bit_generator` (XLA needs both
    /// unsigned). Literal elements hold the bit pattern in [`crate::Scalar::Int`], and the IR text
    /// spells them that way: values of 2^63 and above print as negative numbers.
    U64,
    /// Boolean (one byte per element, 0 or 1).
    Bool,
}

impl DType {
    /// Every dtype, in a fixed order.
    pub const ALL: [DType; 11] = [
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
        }
    }

    /// Bytes per element in a dense host buffer.
    pub fn byte_size(self) -> usize {
        match self {
            DType::F64 | DType::I64 | DType::U64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 | DType::I16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
        }
    }

    /// Whether this is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F64 | DType::F32 | DType::F16 | DType::BF16)
    }

    /// Whether this is an integer type (bool excluded).
    pub fn is_integer(self) -> bool {
        matches!(self, DType::I64 | DType::I32 | DType::I16 | DType::I8 | DType::U8 | DType::U64)
    }

    /// Whether this is a signed integer type.
    pub fn is_signed_integer(self) -> bool {
        matches!(self, DType::I64 | DType::I32 | DType::I16 | DType::I8)
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
            "u64" => DType::U64,
            "bool" | "b8" => DType::Bool,
            _ => return Err(UnknownDType(text.to_owned())),
        })
    }
}
