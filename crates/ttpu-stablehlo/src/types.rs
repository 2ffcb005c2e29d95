//! IR types and literals to MLIR types and dense attributes.
//!
//! StableHLO uses signless integers for signed data (`i32`, never `si32`), `ui8` for unsigned
//! bytes and words (`ui64`) and `i1` for booleans; floats map to the builtin float types of the same width,
//! complex types to `complex<f32>` and `complex<f64>`.

use melior::Context;
use melior::ir::attribute::DenseElementsAttribute;
use melior::ir::r#type::{IntegerType, RankedTensorType};
use melior::ir::{Attribute, Type, TypeLike};
use ttpu_ir::{DType, Literal, TensorType};

use crate::Error;

/// The MLIR element type of `dtype`.
pub(crate) fn element_type(context: &Context, dtype: DType) -> Type<'_> {
    match dtype {
        DType::F64 => Type::float64(context),
        DType::F32 => Type::float32(context),
        DType::F16 => Type::float16(context),
        DType::BF16 => Type::bfloat16(context),
        DType::I64 => IntegerType::new(context, 64).into(),
        DType::I32 => IntegerType::new(context, 32).into(),
        DType::I16 => IntegerType::new(context, 16).into(),
        DType::I8 => IntegerType::new(context, 8).into(),
        DType::U8 => IntegerType::unsigned(context, 8).into(),
        DType::U64 => IntegerType::unsigned(context, 64).into(),
        DType::U16 => IntegerType::unsigned(context, 16).into(),
        DType::U32 => IntegerType::unsigned(context, 32).into(),
        DType::Bool => IntegerType::new(context, 1).into(),
        // melior has no complex type constructor; MLIR's parser always knows the builtin
        // `complex<f32>`, so parsing it cannot fail.
        // `complex32` is held as `complex<f32>` with half parts (see `complex32`).
        DType::C32 | DType::C64 => Type::parse(context, "complex<f32>").expect("MLIR parses its builtin complex type"),
        DType::C128 => Type::parse(context, "complex<f64>").expect("MLIR parses its builtin complex type"),
    }
}

/// `tensor<...>` of static `dims` and `dtype`.
pub(crate) fn tensor_of<'c>(context: &'c Context, dtype: DType, dims: &[i64]) -> Result<Type<'c>, Error> {
    let sizes = dims
        .iter()
        .map(|&size| {
            // MLIR encodes a dynamic dim as i64::MIN, so a negative size must never reach it.
            u64::try_from(size).map_err(|_| Error::Internal { message: format!("negative dim {size} in {dims:?}") })
        })
        .collect::<Result<Vec<u64>, Error>>()?;
    Ok(RankedTensorType::new(&sizes, element_type(context, dtype), None).into())
}

/// The MLIR type of a value: symbolic dims become `?` (checked beforehand to be allowed).
pub(crate) fn tensor_type<'c>(context: &'c Context, ty: &TensorType) -> Result<Type<'c>, Error> {
    // MLIR spells a dynamic size as i64::MIN (`ShapedType::kDynamic`).
    let sizes: Vec<u64> = ty
        .shape
        .dims()
        .iter()
        .map(|dim| match dim.as_static() {
            Some(size) => u64::try_from(size).map_err(|_| Error::Internal { message: format!("negative dim in {ty}") }),
            None => Ok(i64::MIN as u64),
        })
        .collect::<Result<_, Error>>()?;
    Ok(RankedTensorType::new(&sizes, element_type(context, ty.dtype), None).into())
}

/// `dense<...>` holding `literal` bit-exactly.
///
/// Built from the literal's raw little-endian bytes (no per-element attribute), which is both
/// exact for `f16`/`bf16` and fast for big weights. A splat passes one element, which MLIR
/// stores (and prints) as a splat. Booleans go through the `bool` constructor because MLIR
/// stores `i1` bit-packed, not one byte per element as the literal does.
// melior has no safe constructor for a dense attribute from raw bytes; MLIR's C API has one.
#[allow(unsafe_code)]
pub(crate) fn dense_literal<'c>(context: &'c Context, literal: &Literal) -> Result<Attribute<'c>, Error> {
    let ty = tensor_of(context, literal.dtype(), literal.dims())?;
    if literal.dtype() == DType::Bool {
        let attribute = match literal.splat_value() {
            Some(value) => DenseElementsAttribute::bool_splat(ty, value.as_i64() != 0),
            None => {
                let values: Vec<i32> = literal.bytes().iter().map(|&byte| i32::from(byte != 0)).collect();
                DenseElementsAttribute::bool_values(ty, &values)
            }
        };
        return Ok(attribute.into());
    }
    if literal.dtype() == DType::C32 {
        let widened = crate::complex32::widen_literal(literal)?;
        let attribute = dense_literal(context, &widened)?;
        // The same values; the type stays the literal's, which is `complex<f32>` as well.
        return Ok(attribute);
    }
    // MLIR reads the buffer in host byte order while literals are little-endian.
    if cfg!(target_endian = "big") {
        return Err(Error::Internal { message: "constants need a little-endian host".into() });
    }
    let bytes = literal.bytes();
    let size = literal.dtype().byte_size();
    let buffer = if is_splat(bytes, size) { &bytes[..size] } else { bytes };
    // SAFETY: `ty` is a valid ranked tensor type of this context and the pointer/length pair
    // describes a live slice; MLIR copies the data and returns null when the size is wrong.
    let raw = unsafe { mlir_sys::mlirDenseElementsAttrRawBufferGet(ty.to_raw(), buffer.len(), buffer.as_ptr().cast()) };
    // SAFETY: a non-null result is a valid attribute owned by the context.
    unsafe { Attribute::from_option_raw(raw) }.ok_or_else(|| Error::Internal {
        message: format!("MLIR refused {} bytes of data for {}", buffer.len(), literal.ty()),
    })
}

/// Whether `bytes` holds at least one element and every element of `size` bytes is the same.
///
/// A buffer repeats with period `size` exactly when it equals itself shifted by one element, so
/// one `memcmp` decides, instead of one comparison per element (big splat constants are common:
/// every broadcast scalar of the frontend becomes one).
fn is_splat(bytes: &[u8], size: usize) -> bool {
    bytes.len() >= size && bytes[size..] == bytes[..bytes.len() - size]
}

#[cfg(test)]
mod tests {
    use super::is_splat;

    #[test]
    fn splat_detection() {
        assert!(!is_splat(&[], 4));
        assert!(is_splat(&[1, 2], 2));
        assert!(is_splat(&[1, 2, 1, 2, 1, 2], 2));
        assert!(!is_splat(&[1, 2, 1, 2, 2, 1], 2));
        assert!(!is_splat(&[1, 1, 1, 2], 2));
        assert!(is_splat(&[7; 12], 4));
    }
}
