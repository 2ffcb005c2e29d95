//! Writes through strided views of memory: `as_strided_scatter`, the inverse of `as_strided`,
//! which the device needs when an in-place op writes a view that `as_strided` made (DDP's
//! gradient buckets: each gradient is an `as_strided` view of one flat bucket, and the reducer
//! writes each one with `mul(..., out=view)`).

use ttpu_ir::{ScatterKind, Shape};

use super::elementwise::tensor;
use super::index::scatter_points;
use crate::args::Args;
use crate::ctx::{Cx, Imported};
use crate::error::Result;
use crate::storage;

/// `as_strided_scatter(self, src, size, stride, storage_offset)`: `self` (as contiguous
/// memory, as PyTorch's kernel clones it) with the elements that `as_strided(size, stride,
/// storage_offset)` would view replaced by `src`. Views whose elements overlap are refused:
/// which write would land there is not defined.
pub(super) fn as_strided_scatter(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let src = args.tensor("src")?;
    // The view's strides address `self`'s storage: an input laid out otherwise than row-major
    // would put the elements elsewhere than this graph's values.
    if let Some((_, layout)) = cx.input_layouts.iter().find(|(param, _)| *param == "self")
        && !crate::storage::is_contiguous(layout)
    {
        return Err(cx.bad("as_strided_scatter of a non-contiguous self is not supported"));
    }
    let size = args.ints("size")?;
    let stride = args.ints("stride")?;
    let offset = args.opt_int("storage_offset")?.unwrap_or(0);
    if size.len() != stride.len() || size.iter().any(|&s| s < 0) || stride.iter().any(|&s| s < 0) || offset < 0 {
        return Err(cx.bad(format!("size {size:?}, stride {stride:?} and offset {offset} do not describe a view")));
    }
    let dims = cx.static_dims(x, "as_strided_scatter")?;
    let numel = dims.iter().product::<i64>();
    let count = size.iter().try_fold(1i64, |acc, &s| acc.checked_mul(s)).filter(|&count| count <= numel.max(1));
    let Some(count) = count else {
        return Err(cx.bad(format!("a view of sizes {size:?} has more elements than `self` ({numel})")));
    };
    if cx.static_dims(src, "as_strided_scatter")?.as_slice() != size.as_slice() {
        return Err(cx.bad(format!("src {} does not have the view's sizes {size:?}", cx.ty(src))));
    }
    if count == 0 {
        return tensor(x);
    }
    let last = size
        .iter()
        .zip(&stride)
        .try_fold(offset, |acc, (&s, &st)| (s - 1).checked_mul(st).and_then(|step| acc.checked_add(step)));
    if !matches!(last, Some(last) if last < numel) {
        return Err(cx.bad(format!(
            "sizes {size:?}, strides {stride:?} and offset {offset} reach past the {numel} elements of `self`"
        )));
    }
    if overlaps(&size, &stride) {
        return Err(cx.bad(format!(
            "the view of sizes {size:?} and strides {stride:?} has overlapping elements; writing it is not defined"
        )));
    }
    let flat = cx.reshape(x, Shape::from_static(&[numel]))?;
    let view = storage::View { base: flat, storage_len: numel, sizes: size, strides: stride, offset };
    let positions = storage::positions(cx, &view)?;
    let points = cx.reshape(positions, Shape::from_static(&[count, 1]))?;
    let src = cx.convert(src, cx.dtype(x))?;
    let updates = cx.reshape(src, Shape::from_static(&[count]))?;
    let written = scatter_points(cx, flat, points, updates, ScatterKind::Replace)?;
    tensor(cx.reshape(written, Shape::from_static(&dims))?)
}

/// Whether two indices of a view of `size` and `stride` reach one element: with the dims of
/// more than one element sorted by stride, each stride must pass the whole extent of the dims
/// inside it.
fn overlaps(size: &[i64], stride: &[i64]) -> bool {
    let mut dims: Vec<(i64, i64)> = size.iter().zip(stride).filter(|(s, _)| **s > 1).map(|(&s, &st)| (st, s)).collect();
    dims.sort_unstable();
    let mut extent = 0i64;
    for (stride, size) in dims {
        if stride <= extent {
            return true;
        }
        extent = extent.saturating_add(stride.saturating_mul(size - 1));
    }
    false
}

#[cfg(test)]
mod tests {
    use super::overlaps;

    #[test]
    fn overlapping_views_are_told_apart() {
        assert!(!overlaps(&[2, 3], &[3, 1]), "contiguous");
        assert!(!overlaps(&[3, 2], &[1, 3]), "transposed");
        assert!(!overlaps(&[4], &[2]), "every other element");
        assert!(overlaps(&[2, 3], &[1, 1]), "windows sharing elements");
        assert!(overlaps(&[3], &[0]), "an expanded dim");
        assert!(!overlaps(&[1, 5], &[0, 1]), "a dim of one element never overlaps");
    }
}
