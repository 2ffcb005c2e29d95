//! Host tensors and safetensors files: the data that crosses the driver's API.
//!
//! The driver converts between IR dtypes, safetensors dtypes and PJRT element types with
//! `ttpu-eager`'s mappings (one copy for both paths), so the runtime crate never sees an IR type.

use std::path::Path;

use indexmap::IndexMap;
use safetensors::SafeTensors;
use ttpu_eager::{dtype_from_safetensors, safetensors_dtype};
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
}

/// Named tensors in file order.
pub type TensorMap = IndexMap<String, HostTensor>;

/// Reads every tensor of a safetensors file.
pub fn read_safetensors(path: &Path) -> Result<TensorMap> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io { path: path.to_owned(), source })?;
    let file = SafeTensors::deserialize(&bytes)
        .map_err(|error| Error::Safetensors { path: path.to_owned(), message: error.to_string() })?;
    let mut names: Vec<String> = file.names().into_iter().map(|name| name.to_owned()).collect();
    // safetensors does not keep insertion order; sorted keys make every listing deterministic.
    names.sort();
    let mut map = TensorMap::new();
    for name in names {
        let view = file
            .tensor(&name)
            .map_err(|error| Error::Safetensors { path: path.to_owned(), message: error.to_string() })?;
        let dtype = dtype_from_safetensors(view.dtype()).ok_or_else(|| Error::Safetensors {
            path: path.to_owned(),
            message: format!("tensor `{name}` has unsupported dtype {:?}", view.dtype()),
        })?;
        let shape = view.shape().iter().map(|&size| size as i64).collect();
        map.insert(name, HostTensor { dtype, shape, data: view.data().to_vec() });
    }
    Ok(map)
}

/// Writes tensors to a safetensors file.
pub fn write_safetensors(path: &Path, tensors: &TensorMap) -> Result<()> {
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|(name, tensor)| {
            let shape = tensor.shape.iter().map(|&size| size as usize).collect();
            safetensors::tensor::TensorView::new(safetensors_dtype(tensor.dtype), shape, &tensor.data)
                .map(|view| (name.clone(), view))
                .map_err(|error| Error::Safetensors { path: path.to_owned(), message: error.to_string() })
        })
        .collect::<Result<_>>()?;
    let bytes = safetensors::serialize(views, None)
        .map_err(|error| Error::Safetensors { path: path.to_owned(), message: error.to_string() })?;
    std::fs::write(path, bytes).map_err(|source| Error::Io { path: path.to_owned(), source })
}

/// The IR dtype of a PJRT host buffer; the compiler never emits the others.
pub(crate) fn from_host_buffer(buffer: HostBuffer) -> Option<HostTensor> {
    let dtype = match buffer.element_type {
        ElementType::F64 => DType::F64,
        ElementType::F32 => DType::F32,
        ElementType::F16 => DType::F16,
        ElementType::BF16 => DType::BF16,
        ElementType::S64 => DType::I64,
        ElementType::S32 => DType::I32,
        ElementType::S16 => DType::I16,
        ElementType::S8 => DType::I8,
        ElementType::U8 => DType::U8,
        ElementType::U64 => DType::U64,
        ElementType::Pred => DType::Bool,
        _ => return None,
    };
    Some(HostTensor { dtype, shape: buffer.dims, data: buffer.data })
}

/// Whether `tensor` fits `ty`, where a symbolic dim fits any size (sizes are checked against
/// ranges separately).
pub(crate) fn fits(ty: &TensorType, tensor: &HostTensor) -> bool {
    ty.dtype == tensor.dtype
        && ty.rank() == tensor.shape.len()
        && ty.shape.dims().iter().zip(&tensor.shape).all(|(dim, &size)| match dim {
            Dim::Static(expected) => *expected == size,
            Dim::Sym(_) | Dim::Expr(_) => true,
        })
}

/// `f32[2, 3]` for a host tensor, like IR types print.
pub(crate) fn describe(tensor: &HostTensor) -> String {
    tensor.ty().to_string()
}
