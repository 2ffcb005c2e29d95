//! Ops that move or reinterpret data: views, permutations, slicing, concatenation, splitting,
//! padding, copies and casts.
//!
//! PyTorch's negative dims and Python-style slice bounds are normalised here; the IR only sees
//! non-negative dims and in-range static bounds. Reshapes keep symbolic dims where they can be
//! derived (a `-1` next to symbols is solved by exact polynomial division, `sym::exact_quotient`).

use smallvec::SmallVec;
use ttpu_ir::{Dim, GatherDims, Literal, Scalar, Shape, ValueId};

use super::complex;
use super::elementwise::tensor;
use crate::args::{Args, Val};
use crate::ctx::{Cx, Imported};
use crate::error::Result;
use crate::sym::SymExpr;
use crate::{storage, sym};

/// `clone`, `alias`, `detach`, `lift_fresh_copy`: values are immutable in the IR.
pub(super) fn identity(_cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    tensor(args.tensor("self")?)
}

/// `_to_copy` / `to.dtype`: a conversion when a dtype is given; device and layout are ignored.
pub(super) fn to_copy(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    match args.opt_dtype("dtype")? {
        Some(dtype) => tensor(complex::cast(cx, x, dtype)?),
        None => tensor(x),
    }
}

/// `_assert_tensor_metadata`: checks what is known statically and produces nothing.
pub(super) fn assert_tensor_metadata(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("a")?;
    if let Some(dtype) = args.opt_dtype("dtype")?
        && dtype != cx.dtype(x)
    {
        return Err(cx.bad(format!("asserts dtype {dtype} but the tensor is {}", cx.ty(x))));
    }
    Ok(Imported::None)
}

/// `_assert_scalar(cond, msg)`: a runtime assert on symbolic values; an error only when the given
/// symbol values make it false.
pub(super) fn assert_scalar(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    if !matches!(args.get("self"), Val::Bool(false) | Val::Int(0)) {
        return Ok(Imported::None);
    }
    let message = args.opt_str("assert_msg")?.unwrap_or("assertion failed").to_owned();
    Err(cx.bad(format!("fails for the given symbol values: {message}")))
}

/// `_assert_async(self[, assert_msg])`: an assert on a one-element tensor that PyTorch keeps in
/// the program. A condition that is a constant false is an import error with the message; a
/// condition that depends on the data builds nothing: it cannot change a value, and the compiled
/// program has no way to raise (see the op's note).
pub(super) fn assert_async(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let condition = args.tensor("self")?;
    if cx.b.graph().producer(condition).is_some_and(|node| match &node.op {
        ttpu_ir::Op::Constant(literal) => literal.scalars().all(|value| value.as_f64() == 0.0),
        _ => false,
    }) {
        let message = args.opt_str("assert_msg")?.unwrap_or("assertion failed").to_owned();
        return Err(cx.bad(format!("the assert is false: {message}")));
    }
    Ok(Imported::None)
}

/// Range hints for unbacked symbols: nothing to build.
pub(super) fn nothing(_cx: &mut Cx<'_>, _args: &Args) -> Result<Imported> {
    Ok(Imported::None)
}

/// `sym_size.int`: the size of one dim, static or symbolic.
pub(super) fn sym_size(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let dim = cx.norm_dim(args.int("dim")?, cx.rank(x))?;
    let shape = cx.shape(x);
    let Some(size) = shape.dims().get(dim) else {
        return Err(cx.bad("sym_size of a rank-0 tensor"));
    };
    Ok(Imported::SymInt(sym::from_dim(size)))
}

/// `permute(self, dims)`.
pub(super) fn permute(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let rank = cx.rank(x);
    let dims = cx.norm_dims(&args.ints("dims")?, rank)?;
    if dims.len() != rank {
        return Err(cx.bad(format!("permutation of {} dims for a tensor of rank {rank}", dims.len())));
    }
    let permutation: Vec<i64> = dims.iter().map(|&dim| dim as i64).collect();
    tensor(cx.transpose(x, &permutation)?)
}

/// Swaps two dims.
fn swap(cx: &mut Cx<'_>, x: ValueId, a: usize, b: usize) -> Result<ValueId> {
    let mut permutation: Vec<i64> = (0..cx.rank(x) as i64).collect();
    permutation.swap(a, b);
    cx.transpose(x, &permutation)
}

/// `t`: transposes a matrix; vectors and scalars are unchanged.
pub(super) fn t(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    match cx.rank(x) {
        0 | 1 => tensor(x),
        2 => tensor(swap(cx, x, 0, 1)?),
        rank => Err(cx.bad(format!("t expects a tensor of rank at most 2, found rank {rank}"))),
    }
}

/// `transpose.int(self, dim0, dim1)`.
pub(super) fn transpose(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let rank = cx.rank(x);
    let a = cx.norm_dim(args.int("dim0")?, rank)?;
    let b = cx.norm_dim(args.int("dim1")?, rank)?;
    if rank == 0 {
        return tensor(x);
    }
    tensor(swap(cx, x, a, b)?)
}

/// `view` / `_unsafe_view`.
pub(super) fn view(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let sizes = args.sym_ints("size")?;
    tensor(reshape_to(cx, x, &sizes)?)
}

/// `reshape(self, shape)`.
pub(super) fn reshape(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let sizes = args.sym_ints("shape")?;
    tensor(reshape_to(cx, x, &sizes)?)
}

/// Reshapes to `sizes`, one of which may be `-1`.
pub(super) fn reshape_to(cx: &mut Cx<'_>, x: ValueId, sizes: &[SymExpr]) -> Result<ValueId> {
    let mut dims: Vec<Option<Dim>> = Vec::with_capacity(sizes.len());
    for size in sizes {
        dims.push(match size {
            SymExpr::Int(-1) => None,
            size => Some(cx.dim_of(size)?),
        });
    }
    if dims.iter().filter(|dim| dim.is_none()).count() > 1 {
        return Err(cx.bad("only one dim can be -1"));
    }
    let from = cx.shape(x);
    let total = from.element_count().ok_or_else(|| cx.bad(format!("the size of {from} overflows 64 bits")))?;
    let known: Option<Dim> = dims.iter().flatten().try_fold(Dim::Static(1), |acc, dim| acc.checked_mul(dim));
    if let Some(slot) = dims.iter_mut().find(|dim| dim.is_none()) {
        let inferred = known.and_then(|known| sym::exact_quotient(&total, &known)).ok_or_else(|| {
            cx.bad(format!("cannot infer the -1 in {} for a tensor of shape {from}", show_sizes(sizes)))
        })?;
        *slot = Some(inferred);
    }
    let shape: Shape = dims.into_iter().flatten().collect();
    // Static shapes are checked by the IR; symbolic ones need equal products of dims.
    if !(from.is_static() && shape.is_static()) && shape.element_count().as_ref() != Some(&total) {
        return Err(cx.bad(format!("cannot view a tensor of shape {from} as {shape}")));
    }
    cx.reshape(x, shape)
}

fn show_sizes(sizes: &[SymExpr]) -> String {
    let shown: Vec<String> = sizes.iter().map(|size| sym::Show(size).to_string()).collect();
    format!("[{}]", shown.join(", "))
}

/// `expand(self, size)`: `-1` keeps a dim, new dims are added on the left.
pub(super) fn expand(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let sizes = args.sym_ints("size")?;
    let from = cx.shape(x);
    if sizes.len() < from.rank() {
        return Err(cx.bad(format!("cannot expand {} to fewer dims {}", cx.ty(x), show_sizes(&sizes))));
    }
    let offset = sizes.len() - from.rank();
    let mut dims = Vec::with_capacity(sizes.len());
    for (index, size) in sizes.iter().enumerate() {
        let dim = match size {
            SymExpr::Int(-1) if index >= offset => from[index - offset].clone(),
            SymExpr::Int(-1) => return Err(cx.bad("-1 is not allowed for a new leading dim")),
            size => cx.dim_of(size)?,
        };
        if index >= offset {
            let existing = &from[index - offset];
            if existing != &dim && existing != &Dim::Static(1) {
                return Err(cx.bad(format!("cannot expand dim {} of size {existing} to {dim}", index - offset)));
            }
        }
        dims.push(dim);
    }
    let shape: Shape = dims.into_iter().collect();
    tensor(cx.broadcast_to(x, &shape)?)
}

/// `unsqueeze(self, dim)`.
pub(super) fn unsqueeze(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let rank = cx.rank(x);
    let dim = cx.norm_dim(args.int("dim")?, rank + 1)?;
    let mut dims = cx.shape(x).0;
    dims.insert(dim, Dim::Static(1));
    tensor(cx.reshape(x, Shape(dims))?)
}

/// `squeeze` (all size-1 dims), `squeeze.dim`, `squeeze.dims`: only static size-1 dims go.
pub(super) fn squeeze(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let shape = cx.shape(x);
    let rank = shape.rank();
    let chosen: Vec<usize> =
        if args.has_param("dim") { cx.norm_dims(&args.ints("dim")?, rank)? } else { (0..rank).collect() };
    let kept: Shape = shape
        .dims()
        .iter()
        .enumerate()
        .filter(|(index, dim)| !(chosen.contains(index) && **dim == Dim::Static(1)))
        .map(|(_, dim)| dim.clone())
        .collect();
    tensor(cx.reshape(x, kept)?)
}

/// Python slice bounds for a dim of `size`: negative from the end, clamped to `[0, size]`.
fn clamp_bound(bound: i64, size: i64) -> i64 {
    let bound = if bound < 0 { bound.saturating_add(size) } else { bound };
    bound.clamp(0, size)
}

/// `slice.Tensor(self, dim, start, end, step)` with Python semantics.
pub(super) fn slice(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let rank = cx.rank(x);
    if rank == 0 {
        return Err(cx.bad("cannot slice a rank-0 tensor"));
    }
    let dim = cx.norm_dim(args.int_or("dim", 0)?, rank)?;
    let step = args.int_or("step", 1)?;
    if step < 1 {
        return Err(cx.bad(format!("slice step must be positive, found {step}")));
    }
    // An end that is the dim's own symbolic size (`x[:, :sym_size]`) takes the whole dim.
    let whole_dim = sym::from_dim(&cx.shape(x)[dim]);
    let end = match args.get("end") {
        Val::Sym(expr) if *expr == whole_dim => None,
        // A symbolic end inside the dim (`x[:, :s0]`): the IR takes it as the limit, trusting
        // PyTorch's guards that it lies within the dim, as the annotated result type says.
        Val::Sym(expr) if args.opt_int("start")?.unwrap_or(0) >= 0 => {
            let start = args.opt_int("start")?.unwrap_or(0);
            let limit = cx.dim_of(expr)?;
            return tensor(slice_along(cx, x, dim, start, limit, step)?);
        }
        _ => args.opt_int("end")?,
    };
    let start = args.opt_int("start")?;
    let size = match cx.shape(x)[dim].as_static() {
        Some(size) => size,
        // Taking a whole symbolic dim needs no size.
        None if start.unwrap_or(0) == 0 && end.is_none_or(|end| end == i64::MAX) && step == 1 => return tensor(x),
        // Static bounds from the front of a symbolic dim (`x[:, 2:]`, `x[:, 0:1]`).
        None if start.unwrap_or(0) >= 0 && end.is_none_or(|end| end >= 0) => {
            return tensor(symbolic_slice(cx, x, dim, start.unwrap_or(0), end, step)?);
        }
        None => cx.static_dim(x, dim, "slicing")?,
    };
    let start = clamp_bound(start.unwrap_or(0), size);
    let end = clamp_bound(end.unwrap_or(size), size).max(start);
    tensor(cx.slice_dim(x, dim, start, end, step)?)
}

/// `x[start:end:step]` along the symbolic dim `dim` with non-negative static bounds: PyTorch
/// clamps both to the size `S`, so the limit is `min(end, S)` (just `end` where the symbol's range
/// says `S >= end`, and `S` without an end). A start past `S` is a size PyTorch's guards rule out,
/// and the annotated result type, checked after the node, holds the size PyTorch computed.
fn symbolic_slice(cx: &mut Cx<'_>, x: ValueId, dim: usize, start: i64, end: Option<i64>, step: i64) -> Result<ValueId> {
    let size = cx.shape(x)[dim].clone();
    let smallest = match &size {
        Dim::Sym(name) => cx.b.graph().symbols.range(name).map_or(0, |range| range.min),
        _ => 0,
    };
    let limit = match end {
        None | Some(i64::MAX) => size,
        Some(end) if end <= smallest => Dim::Static(end),
        Some(end) => ttpu_ir::DimExpr::of(&size).minimum(&ttpu_ir::DimExpr::constant(end)).into_dim(),
    };
    slice_along(cx, x, dim, start, limit, step)
}

/// `x[start:limit:step]` along `dim` (a limit that may be symbolic), the other dims whole.
fn slice_along(cx: &mut Cx<'_>, x: ValueId, dim: usize, start: i64, limit: Dim, step: i64) -> Result<ValueId> {
    let rank = cx.rank(x);
    let mut limits: Vec<Dim> = cx.shape(x).0.into_vec();
    let mut starts = vec![0; rank];
    let mut strides = vec![1; rank];
    limits[dim] = limit;
    starts[dim] = start;
    strides[dim] = step;
    let built = cx.b.slice_to(x, &starts, &limits, &strides);
    cx.ok(built)
}

/// `select.int(self, dim, index)`: one index, the dim removed.
pub(super) fn select(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let rank = cx.rank(x);
    if rank == 0 {
        return Err(cx.bad("cannot select from a rank-0 tensor"));
    }
    let dim = cx.norm_dim(args.int("dim")?, rank)?;
    let index = args.int("index")?;
    if cx.shape(x)[dim].as_static().is_none() && index >= 0 {
        // A static index from the front of a symbolic dim, which PyTorch's guards keep inside it.
        let sliced = symbolic_slice(cx, x, dim, index, Some(index + 1), 1)?;
        let mut dims = cx.shape(sliced).0;
        dims.remove(dim);
        return tensor(cx.reshape(sliced, Shape(dims))?);
    }
    let size = cx.static_dim(x, dim, "select")?;
    let position = if index < 0 { index + size } else { index };
    if !(0..size).contains(&position) {
        return Err(cx.bad(format!("index {index} is out of range for dim {dim} of size {size}")));
    }
    tensor(take(cx, x, dim, position)?)
}

/// Element `index` of `dim`, with the dim removed.
fn take(cx: &mut Cx<'_>, x: ValueId, dim: usize, index: i64) -> Result<ValueId> {
    let sliced = cx.slice_dim(x, dim, index, index + 1, 1)?;
    let mut dims = cx.shape(x).0;
    dims.remove(dim);
    cx.reshape(sliced, Shape(dims))
}

/// `cat(tensors, dim)`: promotes dtypes, skips legacy empty `[0]` tensors.
pub(super) fn cat(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let tensors = args.tensors("tensors")?;
    if tensors.is_empty() {
        return Err(cx.bad("cat needs at least one tensor"));
    }
    let operands: Vec<_> = tensors.iter().map(|&value| crate::ctx::Operand::Tensor(value)).collect();
    let dtype = cx.result_type(&operands);
    let legacy_empty = |cx: &Cx<'_>, value: ValueId| cx.shape(value) == Shape::from_static(&[0]);
    let kept: Vec<ValueId> = tensors.iter().copied().filter(|&value| !legacy_empty(cx, value)).collect();
    let Some(&first) = kept.first() else {
        return tensor(cx.convert(tensors[0], dtype)?);
    };
    let rank = cx.rank(first);
    if rank == 0 {
        return Err(cx.bad("zero-dim tensors cannot be concatenated"));
    }
    let dim = cx.norm_dim(args.int_or("dim", 0)?, rank)?;
    let mut converted = Vec::with_capacity(kept.len());
    for value in kept {
        converted.push(cx.convert(value, dtype)?);
    }
    if converted.len() == 1 {
        return tensor(converted[0]);
    }
    tensor(cx.concatenate(&converted, dim as i64)?)
}

/// Slices `dim` into consecutive pieces of `sizes`.
fn split_into(cx: &mut Cx<'_>, x: ValueId, dim: usize, sizes: &[i64]) -> Result<Imported> {
    let mut pieces = Vec::with_capacity(sizes.len());
    let mut start = 0;
    for &size in sizes {
        pieces.push(Imported::Tensor(cx.slice_dim(x, dim, start, start + size, 1)?));
        start += size;
    }
    Ok(Imported::Tuple(pieces))
}

/// `split_with_sizes(self, split_sizes, dim)`.
pub(super) fn split_with_sizes(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let dim = cx.norm_dim(args.int_or("dim", 0)?, cx.rank(x))?;
    if cx.shape(x)[dim].as_static().is_none() {
        return split_symbolic(cx, x, dim, &args.sym_ints("split_sizes")?);
    }
    let size = cx.static_dim(x, dim, "split")?;
    let sizes = args.ints("split_sizes")?;
    if sizes.iter().any(|&piece| piece < 0) || sizes.iter().sum::<i64>() != size {
        return Err(cx.bad(format!("split sizes {sizes:?} do not add up to the dim's size {size}")));
    }
    split_into(cx, x, dim, &sizes)
}

/// `split_with_sizes` along a symbolic dim: pieces of static sizes from the front, the last one
/// (whose size PyTorch writes as the dim minus the others) running to the dim's end. The sizes
/// adding up to the dim is PyTorch's guard; the annotated types, checked after the node, hold the
/// sizes it computed.
fn split_symbolic(cx: &mut Cx<'_>, x: ValueId, dim: usize, sizes: &[SymExpr]) -> Result<Imported> {
    let mut pieces = Vec::with_capacity(sizes.len());
    let mut start = 0i64;
    for (position, size) in sizes.iter().enumerate() {
        let last = position + 1 == sizes.len();
        let limit = match size {
            SymExpr::Int(size) if !last => {
                if *size < 0 {
                    return Err(cx.bad(format!("split sizes must be non-negative, found {size}")));
                }
                Dim::Static(start + size)
            }
            _ if last => cx.shape(x)[dim].clone(),
            other => {
                return Err(cx.site.dynamic(format!(
                    "split needs every piece but the last to have a static size along a symbolic dim, found `{}`",
                    sym::Show(other)
                )));
            }
        };
        let piece = slice_along(cx, x, dim, start, limit.clone(), 1)?;
        pieces.push(Imported::Tensor(piece));
        if let Dim::Static(end) = limit {
            start = end;
        }
    }
    Ok(Imported::Tuple(pieces))
}

/// `split.Tensor(self, split_size, dim)`: equal pieces, the last one smaller.
pub(super) fn split(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let dim = cx.norm_dim(args.int_or("dim", 0)?, cx.rank(x))?;
    let size = cx.static_dim(x, dim, "split")?;
    let piece = args.int("split_size")?;
    if piece < 0 || (piece == 0 && size != 0) {
        return Err(cx.bad(format!("split_size must be positive, found {piece}")));
    }
    let count = if size == 0 { 1 } else { (size + piece - 1) / piece };
    let sizes: Vec<i64> = (0..count).map(|index| piece.min(size - index * piece)).collect();
    split_into(cx, x, dim, &sizes)
}

/// `unbind(self, dim)`: every index of `dim`, the dim removed.
pub(super) fn unbind(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let dim = cx.norm_dim(args.int_or("dim", 0)?, cx.rank(x))?;
    let size = cx.static_dim(x, dim, "unbind")?;
    let pieces = (0..size).map(|index| take(cx, x, dim, index).map(Imported::Tensor)).collect::<Result<_>>()?;
    Ok(Imported::Tuple(pieces))
}

/// `constant_pad_nd(self, pad, value)`: pairs from the last dim backwards; negative pads crop.
pub(super) fn constant_pad_nd(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let pad = args.ints("pad")?;
    let value = args.scalar_or("value", Scalar::Int(0))?;
    let rank = cx.rank(x);
    if pad.len() % 2 != 0 || pad.len() / 2 > rank {
        return Err(cx.bad(format!("pad {pad:?} must hold a (low, high) pair for at most {rank} dims")));
    }
    let mut low = vec![0; rank];
    let mut high = vec![0; rank];
    for (pair, chunk) in pad.chunks(2).enumerate() {
        low[rank - 1 - pair] = chunk[0];
        high[rank - 1 - pair] = chunk[1];
    }
    let dtype = cx.dtype(x);
    if !dtype.is_float() && matches!(value, Scalar::Float(fill) if fill.fract() != 0.0) {
        return Err(cx.bad(format!("pad value {value} does not fit a {dtype} tensor")));
    }
    let fill = cx.scalar(dtype, value);
    tensor(cx.pad(x, fill, &low, &high, &vec![0; rank])?)
}

/// `index_select(self, dim, index)`: gathers whole slices of `dim` at a 1-D index tensor.
pub(super) fn index_select(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let dim = cx.norm_dim(args.int("dim")?, cx.rank(x))?;
    let index = args.tensor("index")?;
    let index = match cx.rank(index) {
        0 => cx.reshape(index, Shape::from_static(&[1]))?,
        1 => index,
        rank => return Err(cx.bad(format!("index must be 1-D, found rank {rank}"))),
    };
    let symbolic_rest = cx.shape(x).dims().iter().enumerate().any(|(d, size)| d != dim && size.as_static().is_none());
    if symbolic_rest {
        // Other dims of symbolic size cannot be slice sizes: address every element instead, the
        // index spread over the result's shape.
        let mut shape = cx.shape(x);
        shape.0[dim] = cx.shape(index)[0].clone();
        let spread = cx.broadcast_in_dim(index, &[dim as i64], shape)?;
        return tensor(super::index::take_along(cx, x, dim, spread)?);
    }
    if cx.rank(x) > 0 {
        return tensor(gather_dim(cx, x, dim, index)?);
    }
    // A zero-dim self takes one index and gives a zero-dim result, as in PyTorch.
    if cx.shape(index)[0] != Dim::Static(1) {
        return Err(cx.bad(format!("the index {} of a zero-dim self must hold one value", cx.ty(index))));
    }
    let row = cx.reshape(x, Shape::from_static(&[1]))?;
    let picked = gather_dim(cx, row, 0, index)?;
    tensor(cx.reshape(picked, Shape::scalar())?)
}

/// Slices of `x` along `dim` at the positions in the 1-D `index`, in index order.
pub(crate) fn gather_dim(cx: &mut Cx<'_>, x: ValueId, dim: usize, index: ValueId) -> Result<ValueId> {
    // The gathered dim may be symbolic (its slices are one element); the others are taken whole,
    // so their sizes are attributes.
    let rank = cx.rank(x);
    let mut slice_sizes: SmallVec<[i64; 4]> = SmallVec::with_capacity(rank);
    for d in 0..rank {
        slice_sizes.push(if d == dim { 1 } else { cx.static_dim(x, d, "gathering")? });
    }
    let dims = GatherDims {
        // The kept operand dims stay in place; the index's one dim lands where `dim` was.
        offset_dims: (0..rank as i64).filter(|&index| index != dim as i64).collect(),
        collapsed_slice_dims: [dim as i64].into_iter().collect(),
        operand_batching_dims: SmallVec::new(),
        start_indices_batching_dims: SmallVec::new(),
        start_index_map: [dim as i64].into_iter().collect(),
        index_vector_dim: 1,
        slice_sizes,
        indices_are_sorted: false,
    };
    let built = cx.b.gather(x, index, dims);
    cx.ok(built)
}

/// Reverses `dim` (the IR has no `reverse`, so this gathers at `n-1, ..., 0`).
pub(crate) fn reverse(cx: &mut Cx<'_>, x: ValueId, dim: usize) -> Result<ValueId> {
    let size = cx.static_dim(x, dim, "flip")?;
    if size <= 1 {
        return Ok(x);
    }
    cx.table(&[size], "flip")?;
    let positions: Vec<Scalar> = (0..size).rev().map(Scalar::Int).collect();
    let literal = Literal::from_scalars(ttpu_ir::DType::I64, &[size], &positions).expect("one value per position");
    let index = cx.literal(literal);
    gather_dim(cx, x, dim, index)
}

/// `flip(self, dims)`.
pub(super) fn flip(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let mut x = args.tensor("self")?;
    let dims = cx.norm_dims(&args.ints("dims")?, cx.rank(x))?;
    if cx.rank(x) == 0 {
        return tensor(x);
    }
    for dim in dims {
        x = reverse(cx, x, dim)?;
    }
    tensor(x)
}

/// `repeat(self, repeats)`: tiles the tensor (new leading dims for extra repeats).
pub(super) fn repeat(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let repeats = args.ints("repeats")?;
    let sizes = cx.static_dims(x, "repeat")?;
    if repeats.len() < sizes.len() || repeats.iter().any(|&count| count < 0) {
        return Err(cx.bad(format!("repeats {repeats:?} must be non-negative, one per dim or more")));
    }
    let offset = repeats.len() - sizes.len();
    let padded: Vec<i64> = std::iter::repeat_n(1, offset).chain(sizes.iter().copied()).collect();
    let merged: Option<Vec<i64>> = padded.iter().zip(&repeats).map(|(size, count)| size.checked_mul(*count)).collect();
    let Some(merged) =
        merged.filter(|merged| merged.iter().try_fold(1i64, |acc, &size| acc.checked_mul(size)).is_some())
    else {
        return Err(cx.bad(format!("repeating sizes {padded:?} by {repeats:?} makes more elements than a size holds")));
    };
    // Interleave a repeat dim before each dim, broadcast, then merge the pairs.
    let mut interleaved = Vec::with_capacity(2 * padded.len());
    let mut dims = Vec::with_capacity(padded.len());
    for (index, &size) in padded.iter().enumerate() {
        interleaved.push(repeats[index]);
        interleaved.push(size);
        dims.push(2 * index as i64 + 1);
    }
    let x = cx.reshape(x, Shape::from_static(&padded))?;
    let broadcast = cx.broadcast_in_dim(x, &dims, Shape::from_static(&interleaved))?;
    tensor(cx.reshape(broadcast, Shape::from_static(&merged))?)
}

/// `triu` / `tril(self, diagonal)`: zeroes the elements below (`triu`) or above (`tril`) the
/// `diagonal`-th diagonal of the last two dims.
pub(super) fn triangle(cx: &mut Cx<'_>, args: &Args, upper: bool) -> Result<Imported> {
    let x = args.tensor("self")?;
    let diagonal = args.int_or("diagonal", 0)?;
    let shape = cx.shape(x);
    let rank = shape.rank();
    if rank < 2 {
        return Err(cx.bad(format!("expects a tensor of rank 2 or more, found {}", cx.ty(x))));
    }
    let matrix: Shape = shape.dims()[rank - 2..].iter().cloned().collect();
    let row = cx.b.iota(ttpu_ir::TensorType::new(ttpu_ir::DType::I64, matrix.clone()), 0);
    let row = cx.ok(row)?;
    let col = cx.b.iota(ttpu_ir::TensorType::new(ttpu_ir::DType::I64, matrix), 1);
    let col = cx.ok(col)?;
    let offset = cx.binary(ttpu_ir::BinaryOp::Subtract, col, row)?;
    let bound = cx.splat_like(offset, Scalar::Int(diagonal))?;
    let direction = if upper { ttpu_ir::CompareDirection::Ge } else { ttpu_ir::CompareDirection::Le };
    let keep = cx.compare(direction, offset, bound)?;
    let keep = cx.broadcast_in_dim(keep, &[rank as i64 - 2, rank as i64 - 1], shape)?;
    let zero = cx.splat_like(x, Scalar::Int(0))?;
    tensor(cx.select(keep, x, zero)?)
}

/// `copy(self, src, non_blocking)`: `src` in `self`'s dtype, broadcast to its shape.
pub(super) fn copy(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let src = args.tensor("src")?;
    let src = complex::cast(cx, src, cx.dtype(x))?;
    tensor(cx.broadcast_to(src, &cx.shape(x))?)
}

/// `fill.Scalar(self, value)`: `value` in `self`'s dtype and shape.
pub(super) fn fill(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let value = args.scalar("value")?;
    super::creation::check_fill_value(cx, value, cx.dtype(x), super::creation::FillCheck::Opmath)?;
    tensor(cx.splat_like(x, value)?)
}

/// `native_dropout(input, p, train)` outside training (or with `p = 0`): the input and an all-true
/// mask. Training mode draws the mask ([`super::random::dropout_train`]).
pub(super) fn native_dropout(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("input")?;
    let p = args.scalar("p")?.as_f64();
    // PyTorch reads a missing `train` as training.
    if args.bool_or("train", true)? && p != 0.0 {
        return super::random::dropout_train(cx, x, p);
    }
    let mask = cx.splat(ttpu_ir::DType::Bool, Scalar::Bool(true), &cx.shape(x))?;
    Ok(Imported::Tuple(vec![Imported::Tensor(x), Imported::Tensor(mask)]))
}

/// `sym_numel`: the element count (symbolic sizes multiply symbolically).
pub(super) fn sym_numel(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let shape = cx.shape(x);
    Ok(Imported::SymInt(product(shape.dims())))
}

/// `sym_stride.int(self, dim)`: the contiguous stride of `dim` (values are row-major in the IR).
pub(super) fn sym_stride(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let shape = cx.shape(x);
    let dim = cx.norm_dim(args.int("dim")?, shape.rank())?;
    match storage::input_layout(cx, "self") {
        storage::Layout::Contiguous => Ok(Imported::SymInt(product(shape.dims().get(dim + 1..).unwrap_or(&[])))),
        layout => {
            let view = storage::view_of(cx, x, &layout)
                .map_err(|reason| cx.bad(format!("the strides of `self` are not known: {reason}")))?;
            if view.sizes[dim] == 1 {
                // PyTorch's stride of a size-1 dim depends on how the view was made, and no
                // element's position depends on it; it is not tracked.
                return Err(cx.bad(format!("the stride of dim {dim} (of size 1) of a strided view is not tracked")));
            }
            Ok(Imported::SymInt(SymExpr::Int(view.strides[dim])))
        }
    }
}

/// `sym_storage_offset`: where `self` starts in its storage.
pub(super) fn sym_storage_offset(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    match storage::input_layout(cx, "self") {
        storage::Layout::Contiguous => Ok(Imported::SymInt(SymExpr::Int(0))),
        layout => {
            let view = storage::view_of(cx, x, &layout)
                .map_err(|reason| cx.bad(format!("the storage offset of `self` is not known: {reason}")))?;
            Ok(Imported::SymInt(SymExpr::Int(view.offset)))
        }
    }
}

/// The product of `dims` as a symbolic int, folded when static.
fn product(dims: &[Dim]) -> SymExpr {
    let mut constant = 1i64;
    let mut symbolic: Option<SymExpr> = None;
    for dim in dims {
        match dim {
            Dim::Static(size) => constant *= size,
            other => {
                let expr = sym::from_dim(other);
                symbolic = Some(match symbolic {
                    None => expr,
                    Some(acc) => SymExpr::Mul(Box::new(acc), Box::new(expr)),
                });
            }
        }
    }
    match symbolic {
        None => SymExpr::Int(constant),
        Some(expr) if constant == 1 => expr,
        Some(expr) => SymExpr::Mul(Box::new(SymExpr::Int(constant)), Box::new(expr)),
    }
}

/// The most elements an `as_strided` view may have: its storage positions are computed on the
/// device, but a view this large of a finite storage is almost surely a mistake in the input.
const MAX_VIEW_ELEMENTS: i64 = 1 << 40;

/// `as_strided(self, size, stride, storage_offset)`: reads `self`'s *storage*, which after a view
/// op is laid out differently from `self`'s logical elements; [`storage`] tracks that layout.
/// The result gathers the storage's flat elements at `offset + Σ index_k * stride_k`. A missing
/// `storage_offset` is `self`'s own offset, as in PyTorch.
pub(super) fn as_strided(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let size = args.ints("size")?;
    let stride = args.ints("stride")?;
    if size.len() != stride.len() || size.iter().any(|&s| s < 0) || stride.iter().any(|&s| s < 0) {
        return Err(cx.bad(format!("size {size:?} and stride {stride:?} do not describe a view")));
    }
    let layout = storage::input_layout(cx, "self");
    let source = storage::view_of(cx, x, &layout)
        .map_err(|reason| cx.bad(format!("reads the memory of `self`, whose layout is not known: {reason}")))?;
    let offset = args.int_or("storage_offset", source.offset)?;
    if offset < 0 {
        return Err(cx.bad(format!("storage offset {offset} is negative")));
    }
    let count = size
        .iter()
        .try_fold(1i64, |acc, &s| acc.checked_mul(s))
        .filter(|&count| count <= MAX_VIEW_ELEMENTS)
        .ok_or_else(|| cx.bad(format!("a view of sizes {size:?} has too many elements")))?;
    if count > 0 {
        // The last element read: PyTorch requires it inside the storage.
        let last = size
            .iter()
            .zip(&stride)
            .try_fold(offset, |acc, (&s, &st)| (s - 1).checked_mul(st).and_then(|step| acc.checked_add(step)));
        match last {
            Some(last) if last < source.storage_len => {}
            _ => {
                return Err(cx.bad(format!(
                    "sizes {size:?}, strides {stride:?} and offset {offset} reach past the storage of {} elements",
                    source.storage_len
                )));
            }
        }
    }
    let view = storage::View { sizes: size.clone(), strides: stride, offset, ..source };
    let flat = cx.reshape(view.base, Shape::from_static(&[view.storage_len]))?;
    if count == 0 {
        let empty = cx.slice(flat, &[0], &[0], &[1])?;
        return tensor(cx.reshape(empty, Shape::from_static(&size))?);
    }
    if view.is_contiguous() {
        // A run of consecutive elements (the usual restride after a reduction): a slice.
        let run = cx.slice(flat, &[offset], &[offset + count], &[1])?;
        return tensor(cx.reshape(run, Shape::from_static(&size))?);
    }
    let positions = storage::positions(cx, &view)?;
    let positions = cx.reshape(positions, Shape::from_static(&[count]))?;
    let taken = gather_dim(cx, flat, 0, positions)?;
    tensor(cx.reshape(taken, Shape::from_static(&size))?)
}

/// `unfold(self, dimension, size, step)`: windows of `size` every `step` along `dimension`,
/// which becomes the window count, with a new last dim holding each window.
pub(super) fn unfold(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let rank = cx.rank(x);
    let dim = cx.norm_dim(args.int("dimension")?, rank)?;
    let (size, step) = (args.int("size")?, args.int("step")?);
    let length = if rank == 0 { 1 } else { cx.static_dim(x, dim, "unfold")? };
    if size < 0 || size > length || step < 1 {
        return Err(cx.bad(format!("cannot take windows of {size} every {step} from a dim of {length}")));
    }
    if rank == 0 {
        // A scalar unfolds to its `size` (0 or 1) elements, a rank-1 result as in PyTorch.
        let one = cx.reshape(x, Shape::from_static(&[1]))?;
        return tensor(cx.slice(one, &[0], &[size], &[1])?);
    }
    let count = (length - size) / step + 1;
    cx.table(&[count, size], "unfold")?;
    let positions: Vec<Scalar> = (0..count).flat_map(|w| (0..size).map(move |i| Scalar::Int(w * step + i))).collect();
    let positions =
        cx.literal(Literal::from_scalars(ttpu_ir::DType::I64, &[count * size], &positions).expect("one each"));
    let taken = gather_dim(cx, x, dim, positions)?;
    let mut dims = cx.static_dims(x, "unfold")?.to_vec();
    dims[dim] = count;
    dims.insert(dim + 1, size);
    let split = cx.reshape(taken, Shape::from_static(&dims))?;
    let rank = dims.len();
    let perm: Vec<i64> = (0..rank as i64).filter(|&d| d != dim as i64 + 1).chain([dim as i64 + 1]).collect();
    tensor(cx.transpose(split, &perm)?)
}

/// `reflection_pad{1,2,3}d` (`reflect`) and `replication_pad{1,2,3}d` (edge copies): the last
/// `n` dims gathered at constant source indices; `padding` pairs run from the last dim backwards.
pub(super) fn index_pad(cx: &mut Cx<'_>, args: &Args, n: usize, reflect: bool) -> Result<Imported> {
    let mut x = args.tensor("self")?;
    let padding = args.ints("padding")?;
    let sizes = cx.static_dims(x, "padding")?;
    let rank = sizes.len();
    if padding.len() != 2 * n || (rank != n + 1 && rank != n + 2) {
        return Err(cx.bad(format!(
            "padding {padding:?} needs {} values and a tensor of rank {} or {}",
            2 * n,
            n + 1,
            n + 2
        )));
    }
    for pair in 0..n {
        let dim = rank - 1 - pair;
        let (low, high) = (padding[2 * pair], padding[2 * pair + 1]);
        let size = sizes[dim];
        cx.table(&[low.max(0).saturating_add(high.max(0)).saturating_add(size)], "padding")?;
        if reflect && (low >= size || high >= size) {
            return Err(cx.bad(format!("reflection padding {low}, {high} must be below the dim's size {size}")));
        }
        if size == 0 || (low == 0 && high == 0) {
            continue;
        }
        let sources: Vec<Scalar> = (-low..size + high)
            .map(|i| {
                let j = if reflect {
                    if i < 0 {
                        -i
                    } else if i >= size {
                        2 * (size - 1) - i
                    } else {
                        i
                    }
                } else {
                    i.clamp(0, size - 1)
                };
                Scalar::Int(j)
            })
            .collect();
        let count = sources.len() as i64;
        let positions =
            cx.literal(Literal::from_scalars(ttpu_ir::DType::I64, &[count], &sources).expect("one index each"));
        x = gather_dim(cx, x, dim, positions)?;
    }
    tensor(x)
}

/// PyTorch's name of a dtype in its messages (`Float`, `Long`).
fn torch_name(dtype: ttpu_ir::DType) -> &'static str {
    use ttpu_ir::DType;
    match dtype {
        DType::F64 => "Double",
        DType::F32 => "Float",
        DType::F16 => "Half",
        DType::BF16 => "BFloat16",
        DType::I64 => "Long",
        DType::I32 => "Int",
        DType::I16 => "Short",
        DType::I8 => "Char",
        DType::U8 => "Byte",
        DType::U16 => "UInt16",
        DType::U32 => "UInt32",
        DType::U64 => "UInt64",
        DType::Bool => "Bool",
        DType::C32 => "ComplexHalf",
        DType::C64 => "ComplexFloat",
        DType::C128 => "ComplexDouble",
    }
}

/// `view.dtype`: the same bytes read as another dtype. Of equal element sizes it is elementwise;
/// otherwise the last dim holds the bytes, so its size scales by the size ratio (a rank-0 tensor, a
/// last dim the ratio does not divide, are refused with PyTorch's messages). The IR's bitcast
/// splits or joins a trailing dim of parts, so the last dim is folded into or out of it.
/// `bool` has no bit width in StableHLO: it goes through `u8` by value (PyTorch stores it as
/// one byte of 0 or 1, so a `u8`/`i8` byte reads back as `!= 0`).
pub(super) fn view_dtype(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    use ttpu_ir::DType;
    let x = args.tensor("self")?;
    let Some(to) = args.opt_dtype("dtype")? else { return Err(args.bad("`dtype` must be given")) };
    let from = cx.dtype(x);
    if from == to {
        return tensor(x);
    }
    let (from_size, to_size) = (from.byte_size(), to.byte_size());
    let names = format!("to view {} as {} (different element sizes)", torch_name(from), torch_name(to));
    let shape = cx.shape(x);
    let rank = shape.rank();
    if from_size != to_size && rank == 0 {
        return Err(cx.bad(format!("self.dim() cannot be 0 {names}")));
    }
    // Work in bytes' integer types where bool is involved.
    let source = if from.is_bool() { cx.convert(x, DType::U8)? } else { x };
    let target = if to.is_bool() { DType::U8 } else { to };
    let viewed = if from_size == to_size {
        cx.bitcast_convert(source, target)?
    } else if to_size < from_size {
        // [.., n] -> [.., n, ratio] -> [.., n * ratio].
        let ratio = (from_size / to_size) as i64;
        let parts = cx.bitcast_convert(source, target)?;
        let last = match &shape[rank - 1] {
            Dim::Static(size) => Dim::Static(
                size.checked_mul(ratio).ok_or_else(|| cx.bad(format!("the last dim {size} overflows {names}")))?,
            ),
            _ => return Err(cx.bad(format!("the last dim must be static {names}, found {shape}"))),
        };
        let mut dims: Vec<Dim> = shape.dims().to_vec();
        dims[rank - 1] = last;
        cx.reshape(parts, dims.into_iter().collect())?
    } else {
        // [.., n] -> [.., n / ratio, ratio] -> [.., n / ratio].
        let ratio = (to_size / from_size) as i64;
        let size = match &shape[rank - 1] {
            Dim::Static(size) => *size,
            _ => return Err(cx.bad(format!("the last dim must be static {names}, found {shape}"))),
        };
        if size % ratio != 0 {
            return Err(cx.bad(format!("self.size(-1) must be divisible by {ratio} {names}, but got {size}")));
        }
        let mut dims: Vec<Dim> = shape.dims().to_vec();
        dims[rank - 1] = Dim::Static(size / ratio);
        dims.push(Dim::Static(ratio));
        let grouped = cx.reshape(source, dims.into_iter().collect())?;
        cx.bitcast_convert(grouped, target)?
    };
    tensor(if to.is_bool() { cx.convert(viewed, DType::Bool)? } else { viewed })
}
