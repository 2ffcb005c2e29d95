//! Counting ops that mixture-of-experts routing uses: `histc` (tokens per expert) and
//! `repeat_interleave.Tensor` (expert ids repeated by their counts).

use smallvec::SmallVec;
use ttpu_ir::{BinaryOp, CompareDirection, DType, ReduceKind, Scalar, ScatterKind, Shape, TensorType, ValueId, Window};

use super::elementwise::tensor;
use super::index::scatter_points;
use crate::args::Args;
use crate::ctx::{Cx, DataDim, Imported};
use crate::error::Result;

/// `histc(self, bins, min, max)`: counts of the elements in `bins` equal-width bins over
/// `[min, max]` (the data's own extremes when `min == max`, widened by one each way if those are
/// equal too), as PyTorch's CPU kernel bins them: `bin = trunc((x - min) * bins / (max - min))`
/// in the input's dtype, `x == max` in the last bin, elements outside the range and NaN skipped.
/// The result has the input's dtype. Integer tensors bin as PyTorch's CUDA kernel bins them.
pub(super) fn histc(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let dtype = cx.dtype(x);
    if !dtype.is_float() && !dtype.is_integer() {
        return Err(cx.bad(format!("histc takes real tensors, found {}", cx.ty(x))));
    }
    let bins = args.int_or("bins", 100)?;
    if bins <= 0 {
        return Err(cx.bad(format!("bins must be positive, found {bins}")));
    }
    cx.table(&[bins], "histc")?;
    let (min, max) = (args.scalar_or("min", Scalar::Int(0))?.as_f64(), args.scalar_or("max", Scalar::Int(0))?.as_f64());
    if !min.is_finite() || !max.is_finite() {
        return Err(cx.bad(format!("range of [{min}, {max}] is not finite")));
    }
    if min > max {
        return Err(cx.bad("max must be larger than min"));
    }
    let sizes = cx.static_dims(x, "histc")?;
    let count: i64 = sizes.iter().product();
    let flat = cx.reshape(x, Shape::from_static(&[count]))?;
    // Integer tensors, which PyTorch's CPU kernel refuses, bin as its CUDA kernel bins them (and
    // transformers' mixture-of-experts layers count expert ids off the CPU): in 64-bit integers,
    // the bounds truncated. Floats bin in their own dtype.
    let integer = dtype.is_integer();
    let (flat, work) = if integer { (cx.convert(flat, DType::I64)?, DType::I64) } else { (flat, dtype) };
    let (bounds, widened, same_bounds) = if integer {
        let (min, max) = (min.trunc() as i64, max.trunc() as i64);
        (
            (Scalar::Int(min), Scalar::Int(max)),
            (Scalar::Int(min.saturating_sub(1)), Scalar::Int(max.saturating_add(1))),
            min == max,
        )
    } else {
        ((Scalar::Float(min), Scalar::Float(max)), (Scalar::Float(min - 1.0), Scalar::Float(max + 1.0)), min == max)
    };
    // The range, rounded to the input's dtype as PyTorch's bin edges are.
    let (low, high) = if same_bounds {
        if count == 0 {
            (cx.scalar(work, widened.0), cx.scalar(work, widened.1))
        } else {
            // The data's extremes (NaN, which PyTorch rejects here, leaves every bin empty).
            let low = cx.reduce(flat, ReduceKind::Min, &[0])?;
            let high = cx.reduce(flat, ReduceKind::Max, &[0])?;
            let same = cx.compare(CompareDirection::Eq, low, high)?;
            let one = cx.scalar(work, Scalar::Int(1));
            let (wider_low, wider_high) =
                (cx.binary(BinaryOp::Subtract, low, one)?, cx.binary(BinaryOp::Add, high, one)?);
            (cx.select(same, wider_low, low)?, cx.select(same, wider_high, high)?)
        }
    } else {
        (cx.scalar(work, bounds.0), cx.scalar(work, bounds.1))
    };
    let shape = Shape::from_static(&[count]);
    let (low_all, high_all) = (cx.broadcast_to(low, &shape)?, cx.broadcast_to(high, &shape)?);
    let above = cx.compare(CompareDirection::Ge, flat, low_all)?;
    let below = cx.compare(CompareDirection::Le, flat, high_all)?;
    let inside = cx.binary(BinaryOp::And, above, below)?;
    let offset = cx.binary(BinaryOp::Subtract, flat, low_all)?;
    let scaled = cx.binary_scalar(BinaryOp::Multiply, offset, Scalar::Int(bins))?;
    let width = cx.binary(BinaryOp::Subtract, high, low)?;
    let width = cx.broadcast_to(width, &shape)?;
    let position = if integer {
        // Inside the range the offset is non-negative and the width positive, so StableHLO's
        // truncating division is the kernel's integer division.
        cx.binary(BinaryOp::Divide, scaled, width)?
    } else if matches!(dtype, DType::F16 | DType::BF16) {
        // PyTorch's kernel rounds each step to the input's dtype (`c10::Half` arithmetic); each
        // step here computes in f32, where the exact result of one rounded operation on two
        // reduced-precision operands rounds to the same value.
        let step = |cx: &mut Cx<'_>, op: BinaryOp, lhs: ValueId, rhs: ValueId| -> Result<ValueId> {
            let (lhs, rhs) = (cx.convert(lhs, DType::F32)?, cx.convert(rhs, DType::F32)?);
            let exact = cx.binary(op, lhs, rhs)?;
            cx.convert(exact, dtype)
        };
        let offset = step(cx, BinaryOp::Subtract, flat, low_all)?;
        let factor = cx.splat(dtype, Scalar::Int(bins), &shape)?;
        let scaled = step(cx, BinaryOp::Multiply, offset, factor)?;
        let width = step(cx, BinaryOp::Subtract, high, low)?;
        let width = cx.broadcast_to(width, &shape)?;
        step(cx, BinaryOp::Divide, scaled, width)?
    } else if dtype == DType::F32 {
        // XLA may turn a division by a constant into a product with its reciprocal, which is off
        // by an ulp for some operands and moves an element across a bin edge; the quotient in
        // float64, rounded once to float32, is the correctly rounded float32 quotient.
        let (lhs, rhs) = (cx.convert(scaled, DType::F64)?, cx.convert(width, DType::F64)?);
        let quotient = cx.binary(BinaryOp::Divide, lhs, rhs)?;
        cx.convert(quotient, DType::F32)?
    } else {
        cx.binary(BinaryOp::Divide, scaled, width)?
    };
    // Truncation toward zero; the position is non-negative inside the range.
    let position = cx.convert(position, DType::I64)?;
    let last = cx.splat(DType::I64, Scalar::Int(bins - 1), &shape)?;
    let position = cx.binary(BinaryOp::Minimum, position, last)?;
    // Skipped elements go to bin `bins`, which the scatter drops as out of range.
    let nowhere = cx.splat(DType::I64, Scalar::Int(bins), &shape)?;
    let position = cx.select(inside, position, nowhere)?;
    let points = cx.reshape(position, Shape::from_static(&[count, 1]))?;
    let ones = cx.splat(DType::I64, Scalar::Int(1), &shape)?;
    let empty = cx.splat(DType::I64, Scalar::Int(0), &Shape::from_static(&[bins]))?;
    let counts = scatter_points(cx, empty, points, ones, ScatterKind::Combine(ReduceKind::Sum))?;
    // PyTorch adds ones to a count of the input's dtype one element at a time, so a count stops
    // growing where adding one rounds back to it: 2^11 in f16, 2^8 in bf16, 2^24 in f32 (2^53 is
    // beyond any tensor here).
    let saturated = match dtype {
        DType::F16 => Some(1 << 11),
        DType::BF16 => Some(1 << 8),
        DType::F32 => Some(1 << 24),
        _ => None,
    };
    let counts = match saturated {
        Some(limit) => cx.binary_scalar(BinaryOp::Minimum, counts, Scalar::Int(limit))?,
        None => counts,
    };
    tensor(cx.convert(counts, dtype)?)
}

/// `repeat_interleave.Tensor(repeats, *, output_size)`: `i` repeated `repeats[i]` times, in order.
/// The length is the sum of `repeats`: `output_size` when the model passes it, else a size the
/// data decides (see `data.rs`).
/// Output position `p` holds the number of running totals of `repeats` that are at most `p`.
pub(super) fn repeat_interleave(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let repeats = args.tensor("repeats")?;
    let dtype = cx.dtype(repeats);
    if cx.rank(repeats) > 1 || !matches!(dtype, DType::I64 | DType::I32) {
        return Err(cx.bad(format!("repeats must be a rank-0 or rank-1 integer tensor, found {}", cx.ty(repeats))));
    }
    let length = match args.opt_int("output_size")? {
        Some(size) => size,
        None => match super::data::repeat_length(cx, repeats)? {
            DataDim::Known(length) => length,
            DataDim::Pending => return Ok(Imported::Skipped),
        },
    };
    if length < 0 {
        return Err(cx.bad(format!("output_size must be non-negative, found {length}")));
    }
    let values =
        cx.reshape(repeats, Shape::from_static(&[cx.static_dims(repeats, "repeat_interleave")?.iter().product()]))?;
    let n = cx.static_dim(values, 0, "repeat_interleave")?;
    cx.table(&[length, n], "repeat_interleave")?;
    let values = cx.convert(values, DType::I64)?;
    let window = Window {
        dimensions: SmallVec::from_elem(n.max(1), 1),
        strides: SmallVec::from_elem(1, 1),
        base_dilations: SmallVec::from_elem(1, 1),
        window_dilations: SmallVec::from_elem(1, 1),
        padding: SmallVec::from_elem(((n - 1).max(0), 0), 1),
    };
    let built = cx.b.reduce_window(values, ReduceKind::Sum, window);
    let ends = cx.ok(built)?;
    let grid = Shape::from_static(&[length, n]);
    let ends = cx.broadcast_in_dim(ends, &[1], grid.clone())?;
    let built = cx.b.iota(TensorType::new(DType::I64, grid), 0);
    let positions = cx.ok(built)?;
    let passed = cx.compare(CompareDirection::Le, ends, positions)?;
    let passed = cx.convert(passed, DType::I64)?;
    let index = cx.reduce(passed, ReduceKind::Sum, &[1])?;
    tensor(cx.convert(index, dtype)?)
}
