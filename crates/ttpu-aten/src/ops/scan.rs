//! Running reductions over a dim of symbolic size, where `reduce_window` (whose window must be
//! static) cannot scan: prefix `i` reduces the whole dim with the elements past `i` replaced by
//! the reduction's identity, over an `[.., n, n, ..]` lower-triangular mask built with `iota`, so
//! every size is computed at run time. Quadratic in the dim, which only symbolic dims pay.

use ttpu_ir::{CompareDirection, DType, ReduceKind, TensorType, ValueId};

use crate::ctx::Cx;
use crate::error::Result;

/// The running `kind` reduction of `x` along `dim` (any size, static or symbolic).
pub(super) fn masked_scan(cx: &mut Cx<'_>, x: ValueId, dim: usize, kind: ReduceKind) -> Result<ValueId> {
    let rank = cx.rank(x);
    let shape = cx.shape(x);
    // `[.., n (prefix end i), n (element j), ..]`: the element axis right after `dim`.
    let mut wide: Vec<ttpu_ir::Dim> = shape.dims().to_vec();
    wide.insert(dim + 1, shape[dim].clone());
    let wide: ttpu_ir::Shape = wide.into_iter().collect();
    let keep: Vec<i64> = (0..rank as i64).map(|d| if d < dim as i64 { d } else { d + 1 }).collect();
    let rows = cx.broadcast_in_dim(x, &keep, wide.clone())?;
    let index_type = TensorType::new(DType::I64, wide.clone());
    let built = cx.b.iota(index_type.clone(), dim as i64);
    let i = cx.ok(built)?;
    let built = cx.b.iota(index_type, dim as i64 + 1);
    let j = cx.ok(built)?;
    let inside = cx.compare(CompareDirection::Le, j, i)?;
    let dtype = cx.dtype(x);
    let identity = cx.splat(dtype, kind.identity(dtype), &wide)?;
    let masked = cx.select(inside, rows, identity)?;
    cx.reduce(masked, kind, &[dim + 1])
}
