//! The builder steps every decomposition takes, each adding no node when nothing changes.

use ttpu_ir::{BinaryOp, DType, Dim, GraphBuilder, InferError, Literal, ReduceKind, Scalar, Shape, ValueId};

use crate::Built;

/// `value` converted to `dtype`; no node when it already has it.
pub fn convert(b: &mut GraphBuilder, value: ValueId, dtype: DType) -> Built {
    if b.ty(value).dtype == dtype { Ok(value) } else { b.convert(value, dtype) }
}

/// `value` reshaped to `shape`; no node when it already has it.
pub fn reshape(b: &mut GraphBuilder, value: ValueId, shape: Shape) -> Built {
    if b.ty(value).shape == shape { Ok(value) } else { b.reshape(value, shape) }
}

/// `value` broadcast to `shape` by NumPy's rule (dims aligned on the right, size-1 dims grow);
/// no node when it already has it.
pub fn broadcast_to(b: &mut GraphBuilder, value: ValueId, shape: &Shape) -> Built {
    let from = b.ty(value).shape.clone();
    if from == *shape {
        return Ok(value);
    }
    let Some(offset) = shape.rank().checked_sub(from.rank()) else {
        return Err(InferError {
            op: "broadcast_in_dim",
            message: format!("cannot broadcast {} to {shape}", b.ty(value)),
        });
    };
    let dims: Vec<i64> = (offset..shape.rank()).map(|dim| dim as i64).collect();
    b.broadcast_in_dim(value, &dims, shape.clone())
}

/// A tensor of `dtype` and `shape` whose every element is `value` (a scalar constant broadcast).
pub fn splat(b: &mut GraphBuilder, dtype: DType, value: Scalar, shape: &Shape) -> Built {
    let scalar = b.constant(Literal::scalar(dtype, value));
    broadcast_to(b, scalar, shape)
}

/// `value` in the dtype and shape of `like`.
pub fn splat_like(b: &mut GraphBuilder, like: ValueId, value: Scalar) -> Built {
    let ty = b.ty(like).clone();
    splat(b, ty.dtype, value, &ty.shape)
}

/// `value op scalar`, the scalar in `value`'s dtype.
pub fn binary_scalar(b: &mut GraphBuilder, op: BinaryOp, value: ValueId, scalar: Scalar) -> Built {
    let constant = splat_like(b, value, scalar)?;
    b.binary(op, value, constant)
}

/// The `kind`-reduction of `value` over `dims` (any order); no node for no dims.
pub fn reduce(b: &mut GraphBuilder, value: ValueId, kind: ReduceKind, dims: &[usize]) -> Built {
    if dims.is_empty() {
        return Ok(value);
    }
    let mut sorted: Vec<i64> = dims.iter().map(|&dim| dim as i64).collect();
    sorted.sort_unstable();
    b.reduce(value, kind, &sorted)
}

/// `shape` with every dim in `dims` set to 1.
pub fn keepdim_shape(shape: &Shape, dims: &[usize]) -> Shape {
    shape
        .dims()
        .iter()
        .enumerate()
        .map(|(index, dim)| if dims.contains(&index) { Dim::Static(1) } else { dim.clone() })
        .collect()
}

/// [`reduce`], keeping the reduced dims with size 1 when `keep`.
pub fn reduce_keep(b: &mut GraphBuilder, value: ValueId, kind: ReduceKind, dims: &[usize], keep: bool) -> Built {
    let reduced = reduce(b, value, kind, dims)?;
    if !keep {
        return Ok(reduced);
    }
    let kept = keepdim_shape(&b.ty(value).shape, dims);
    reshape(b, reduced, kept)
}

/// How many elements `dims` of a tensor hold.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Count {
    /// Every dim is static: the number.
    Static(i64),
    /// Some dim is symbolic: an `i64` scalar computed at run time from the dims' sizes.
    Runtime(ValueId),
}

/// The element count of `dims` of `x`.
pub fn count(b: &mut GraphBuilder, x: ValueId, dims: &[usize]) -> Built<Count> {
    let shape = b.ty(x).shape.clone();
    let mut known = 1i64;
    let mut computed: Option<ValueId> = None;
    for &dim in dims {
        match &shape.dims()[dim] {
            // Every dim of a tensor fits with the others in `i64` (the IR bounds element counts).
            Dim::Static(size) => known = known.saturating_mul(*size),
            _ => {
                let size = b.dim_size(x, dim as i64)?;
                computed = Some(match computed {
                    Some(acc) => b.binary(BinaryOp::Multiply, acc, size)?,
                    None => size,
                });
            }
        }
    }
    Ok(match computed {
        None => Count::Static(known),
        Some(size) => Count::Runtime(binary_scalar(b, BinaryOp::Multiply, size, Scalar::Int(known))?),
    })
}

/// `total / max(count - correction, 0)`, the count in `total`'s dtype: PyTorch's divisor for
/// means (no correction) and variances (Bessel's), inf or NaN when nothing is left.
pub fn divide_by_count(b: &mut GraphBuilder, total: ValueId, count: Count, correction: f64) -> Built {
    match count {
        Count::Static(n) if correction == 0.0 => binary_scalar(b, BinaryOp::Divide, total, Scalar::Int(n)),
        Count::Static(n) => binary_scalar(b, BinaryOp::Divide, total, Scalar::Float((n as f64 - correction).max(0.0))),
        Count::Runtime(n) => {
            let n = convert(b, n, b.ty(total).dtype)?;
            let n = binary_scalar(b, BinaryOp::Subtract, n, Scalar::Float(correction))?;
            let zero = splat_like(b, n, Scalar::Float(0.0))?;
            let n = b.binary(BinaryOp::Maximum, n, zero)?;
            let shape = b.ty(total).shape.clone();
            let n = broadcast_to(b, n, &shape)?;
            b.binary(BinaryOp::Divide, total, n)
        }
    }
}
