//! Host tensors, safetensors files, and the dtype mappings at the runtime's edges: IR dtypes to
//! PJRT element types and back, and to safetensors dtypes and back. Every frontend converts
//! through these, so one table holds each mapping.
//!
//! PJRT host buffers are native-endian and IR literals are little-endian; ttpu runs only on
//! little-endian hosts, where the two agree.

use std::path::Path;

use indexmap::IndexMap;
use safetensors::SafeTensors;
use ttpu_ir::{DType, Dim, TensorType};
use ttpu_pjrt::{ElementType, HostBuffer};

use crate::{Error, Result};

/// A dense row-major tensor in host memory (little-endian bytes).
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    /// Element type.
    pub dtype: DType,
    /// Dims, outermost first.
    pub shape: Vec<i64>,
    /// `product(shape) * dtype.byte_size()` bytes.
    pub data: Vec<u8>,
}

impl HostTensor {
    /// A tensor of `dtype` and `shape` holding `data`, checked: the dims must be non-negative and
    /// the data exactly as long as they need.
    pub fn new(dtype: DType, shape: Vec<i64>, data: Vec<u8>) -> Result<HostTensor> {
        let expected = byte_size(dtype, &shape).ok_or_else(|| Error::InvalidShape { dims: shape.clone() })?;
        if expected != data.len() {
            return Err(Error::DataLength {
                ty: TensorType::from_static(dtype, &shape).to_string(),
                expected,
                actual: data.len(),
            });
        }
        Ok(HostTensor { dtype, shape, data })
    }

    /// The IR type of this tensor.
    pub fn ty(&self) -> TensorType {
        TensorType::from_static(self.dtype, &self.shape)
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data.len() / self.dtype.byte_size()
    }

    /// Whether the tensor has no element.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Element `index` as `f64` (bools as 0/1); used for comparisons and printing.
    pub fn get_f64(&self, index: usize) -> f64 {
        let size = self.dtype.byte_size();
        ttpu_ir::Scalar::from_bytes(self.dtype, &self.data[index * size..(index + 1) * size]).as_f64()
    }

    /// Whether this tensor fits `ty`, where a symbolic dim fits any size (sizes are checked
    /// against ranges separately). The fields are public, so a tensor whose data length
    /// disagrees with its shape can be built by hand; it fits nothing.
    pub fn fits(&self, ty: &TensorType) -> bool {
        byte_size(self.dtype, &self.shape) == Some(self.data.len())
            && ty.dtype == self.dtype
            && ty.rank() == self.shape.len()
            && ty.shape.dims().iter().zip(&self.shape).all(|(dim, &size)| match dim {
                Dim::Static(expected) => *expected == size,
                Dim::Sym(_) | Dim::Expr(_) => true,
            })
    }

    /// `f32[2, 3]`, as IR types print.
    pub fn describe(&self) -> String {
        self.ty().to_string()
    }

    /// This downloaded tensor as a value of `dtype`: a `complex32` value comes back from its
    /// `c64` buffer and is narrowed to PyTorch's 4-byte elements (exactly: its parts are halves);
    /// every other tensor is returned as it is.
    pub fn as_value_of(self, dtype: DType) -> HostTensor {
        if dtype != DType::C32 || self.dtype != DType::C64 {
            return self;
        }
        HostTensor { dtype, shape: self.shape, data: host_bytes(dtype, self.data) }
    }

    /// The tensor of a PJRT host buffer; `None` for element types the IR has no dtype for.
    pub fn from_host_buffer(buffer: HostBuffer) -> Option<HostTensor> {
        let dtype = dtype_of_element(buffer.element_type)?;
        HostTensor::new(dtype, buffer.dims, buffer.data).ok()
    }
}

/// Bytes a dense tensor of `dtype` and `dims` takes; `None` for a negative dim or an overflow.
pub fn byte_size(dtype: DType, dims: &[i64]) -> Option<usize> {
    dims.iter().try_fold(dtype.byte_size(), |acc, &dim| acc.checked_mul(usize::try_from(dim).ok()?))
}

/// Named tensors in file order.
pub type TensorMap = IndexMap<String, HostTensor>;

/// Reads every tensor of a safetensors file, sorted by name.
pub fn read_safetensors(path: &Path) -> Result<TensorMap> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io { path: path.to_owned(), source })?;
    safetensors_from_bytes(&bytes).map_err(|message| Error::Safetensors { path: path.to_owned(), message })
}

/// Every tensor of safetensors bytes, sorted by name (safetensors keeps no insertion order, and
/// sorted keys make every listing deterministic); the error is the message of what is wrong.
pub fn safetensors_from_bytes(bytes: &[u8]) -> std::result::Result<TensorMap, String> {
    let file = SafeTensors::deserialize(bytes).map_err(|error| error.to_string())?;
    let mut names: Vec<String> = file.names().into_iter().map(|name| name.to_owned()).collect();
    names.sort();
    let mut map = TensorMap::new();
    for name in names {
        let view = file.tensor(&name).map_err(|error| error.to_string())?;
        let dtype = dtype_from_safetensors(view.dtype())
            .ok_or_else(|| format!("tensor `{name}` has unsupported dtype {:?}", view.dtype()))?;
        let shape = view
            .shape()
            .iter()
            .map(|&size| i64::try_from(size).map_err(|_| format!("tensor `{name}` has a dim too large: {size}")))
            .collect::<std::result::Result<Vec<i64>, String>>()?;
        map.insert(name, HostTensor { dtype, shape, data: view.data().to_vec() });
    }
    Ok(map)
}

/// Writes tensors to a safetensors file.
pub fn write_safetensors(path: &Path, tensors: &TensorMap) -> Result<()> {
    write_safetensors_with_metadata(path, tensors, None)
}

/// Writes tensors and a string-to-string metadata map to a safetensors file.
pub fn write_safetensors_with_metadata(
    path: &Path,
    tensors: &TensorMap,
    metadata: Option<std::collections::HashMap<String, String>>,
) -> Result<()> {
    let safetensors_error = |message: String| Error::Safetensors { path: path.to_owned(), message };
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|(name, tensor)| {
            let shape = tensor
                .shape
                .iter()
                .map(|&size| usize::try_from(size).map_err(|_| format!("tensor `{name}` has a negative dim")))
                .collect::<std::result::Result<Vec<usize>, String>>()
                .map_err(safetensors_error)?;
            let dtype = safetensors_dtype(tensor.dtype).ok_or_else(|| {
                safetensors_error(format!(
                    "tensor `{name}` is {}, which safetensors cannot store; write its real and imaginary parts",
                    tensor.dtype
                ))
            })?;
            safetensors::tensor::TensorView::new(dtype, shape, &tensor.data)
                .map(|view| (name.clone(), view))
                .map_err(|error| safetensors_error(error.to_string()))
        })
        .collect::<Result<_>>()?;
    let bytes = safetensors::serialize(views, metadata).map_err(|error| safetensors_error(error.to_string()))?;
    std::fs::write(path, bytes).map_err(|source| Error::Io { path: path.to_owned(), source })
}

/// The PJRT element type holding `dtype`.
pub fn element_type(dtype: DType) -> ElementType {
    match dtype {
        DType::F64 => ElementType::F64,
        DType::F32 => ElementType::F32,
        DType::F16 => ElementType::F16,
        DType::BF16 => ElementType::BF16,
        DType::I64 => ElementType::S64,
        DType::I32 => ElementType::S32,
        DType::I16 => ElementType::S16,
        DType::I8 => ElementType::S8,
        DType::U8 => ElementType::U8,
        DType::U16 => ElementType::U16,
        DType::U32 => ElementType::U32,
        DType::U64 => ElementType::U64,
        DType::Bool => ElementType::Pred,
        // Devices hold `complex32` as `c64` with half parts: PJRT has no type of two halves.
        DType::C32 | DType::C64 => ElementType::C64,
        DType::C128 => ElementType::C128,
    }
}

/// The device form of host data of `dtype`: `complex32` parts widened to f32 (exactly), every
/// other dtype as it is.
pub fn device_bytes(dtype: DType, data: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    match dtype {
        DType::C32 => std::borrow::Cow::Owned(ttpu_ir::complex32_as_c64_bytes(data)),
        _ => std::borrow::Cow::Borrowed(data),
    }
}

/// The host form of a device buffer's data that holds a value of `dtype`: `complex32` from its
/// `c64` buffer (whose parts are halves, so the narrowing is exact), every other dtype as it is.
pub fn host_bytes(dtype: DType, data: Vec<u8>) -> Vec<u8> {
    match dtype {
        DType::C32 => ttpu_ir::c64_as_complex32_bytes(&data),
        _ => data,
    }
}

/// The IR dtype of a PJRT element type; `None` for those the IR has no dtype for.
pub fn dtype_of_element(element: ElementType) -> Option<DType> {
    Some(match element {
        ElementType::F64 => DType::F64,
        ElementType::F32 => DType::F32,
        ElementType::F16 => DType::F16,
        ElementType::BF16 => DType::BF16,
        ElementType::S64 => DType::I64,
        ElementType::S32 => DType::I32,
        ElementType::S16 => DType::I16,
        ElementType::S8 => DType::I8,
        ElementType::U8 => DType::U8,
        ElementType::U16 => DType::U16,
        ElementType::U32 => DType::U32,
        ElementType::U64 => DType::U64,
        ElementType::Pred => DType::Bool,
        ElementType::C64 => DType::C64,
        ElementType::C128 => DType::C128,
    })
}

/// The IR dtype of a safetensors dtype; `None` for those the IR has no type for.
pub fn dtype_from_safetensors(dtype: safetensors::Dtype) -> Option<DType> {
    use safetensors::Dtype;
    Some(match dtype {
        Dtype::F64 => DType::F64,
        Dtype::F32 => DType::F32,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::I64 => DType::I64,
        Dtype::I32 => DType::I32,
        Dtype::I16 => DType::I16,
        Dtype::I8 => DType::I8,
        Dtype::U8 => DType::U8,
        Dtype::U16 => DType::U16,
        Dtype::U32 => DType::U32,
        Dtype::U64 => DType::U64,
        Dtype::BOOL => DType::Bool,
        _ => return None,
    })
}

/// The safetensors dtype that stores `dtype`; `None` for complex types, which the safetensors
/// format (as of the crate's 0.6) has no dtype for.
pub fn safetensors_dtype(dtype: DType) -> Option<safetensors::Dtype> {
    use safetensors::Dtype;
    Some(match dtype {
        DType::F64 => Dtype::F64,
        DType::F32 => Dtype::F32,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::I64 => Dtype::I64,
        DType::I32 => Dtype::I32,
        DType::I16 => Dtype::I16,
        DType::I8 => Dtype::I8,
        DType::U8 => Dtype::U8,
        DType::U16 => Dtype::U16,
        DType::U32 => Dtype::U32,
        DType::U64 => Dtype::U64,
        DType::Bool => Dtype::BOOL,
        DType::C32 | DType::C64 | DType::C128 => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complex32_widens_to_its_device_form_and_back_exactly() {
        // (1.5, -0.0999755859375), (65504, -inf): halves, as PyTorch stores complex32.
        let halves: Vec<u8> = [0x3e00u16, 0xae66, 0x7bff, 0xfc00].iter().flat_map(|bits| bits.to_le_bytes()).collect();
        let device = device_bytes(DType::C32, &halves).into_owned();
        let parts: Vec<f32> = device.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        assert_eq!(parts, [1.5, -0.099_975_586, 65504.0, f32::NEG_INFINITY]);
        assert_eq!(host_bytes(DType::C32, device), halves);
        // Every other dtype passes through untouched.
        assert_eq!(&*device_bytes(DType::F16, &halves), halves.as_slice());
    }

    #[test]
    fn every_dtype_maps_both_ways() {
        for dtype in DType::ALL {
            // `complex32` lives in `c64` buffers (see `device_bytes`).
            let held = if dtype == DType::C32 { DType::C64 } else { dtype };
            assert_eq!(dtype_of_element(element_type(dtype)), Some(held));
            match safetensors_dtype(dtype) {
                Some(stored) => assert_eq!(dtype_from_safetensors(stored), Some(dtype)),
                None => assert!(dtype.is_complex(), "only complex types lack a safetensors dtype"),
            }
        }
    }

    #[test]
    fn new_checks_the_data_length_and_dims() {
        assert!(HostTensor::new(DType::F32, vec![2, 3], vec![0; 24]).is_ok());
        let short = HostTensor::new(DType::F32, vec![2, 3], vec![0; 20]).unwrap_err();
        assert_eq!(short.to_string(), "a tensor of type f32[2, 3] needs 24 bytes, found 20");
        let negative = HostTensor::new(DType::F32, vec![-1], vec![]).unwrap_err();
        assert_eq!(negative.to_string(), "invalid shape [-1]");
        assert!(HostTensor::new(DType::F64, vec![i64::MAX, 4], vec![]).is_err());
    }

    #[test]
    fn safetensors_round_trip() {
        let dir = std::env::temp_dir().join(format!("ttpu-runtime-host-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.safetensors");
        let mut map = TensorMap::new();
        map.insert(
            "b".into(),
            HostTensor::new(DType::I64, vec![2], [7i64, -3].iter().flat_map(|v| v.to_le_bytes()).collect()).unwrap(),
        );
        map.insert("a".into(), HostTensor::new(DType::Bool, vec![], vec![1]).unwrap());
        write_safetensors(&path, &map).unwrap();
        let read = read_safetensors(&path).unwrap();
        assert_eq!(read.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(read["b"], map["b"]);
        assert_eq!(read["a"], map["a"]);
        std::fs::write(&path, b"garbage").unwrap();
        let error = read_safetensors(&path).unwrap_err().to_string();
        assert!(error.starts_with(&format!("{}: ", path.display())), "{error}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
