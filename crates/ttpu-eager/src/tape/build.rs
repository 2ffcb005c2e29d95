//! How each [`TapeOp`] becomes IR: one replay per op, run on a compile-cache miss and, once per
//! signature, by the type memo (which is how recording checks an op).
//!
//! Promotion and broadcasting become explicit `convert` and `broadcast_in_dim` nodes here, by the
//! same code every time. Math the IR has no primitive for is composed from primitives following
//! PyTorch's CPU kernels (GELU's erf and tanh forms, max-subtracted softmax, Python's remainder,
//! the variance around the mean); `erf` itself is `ttpu_ir::composite::erf`, the one the `.fx`
//! importer uses too, so both frontends compute the same bits. Math that PyTorch's kernels run in
//! `f32` for `f16`/`bf16` ("opmath") runs in `f32` here too and is rounded once at the end.

use smallvec::SmallVec;
use ttpu_ir::{
    BinaryOp, CompareDirection, DType, DotDims, GatherDims, GraphBuilder, Literal, ReduceKind, Scalar, Shape,
    TensorType, UnaryOp, ValueId,
};

use ttpu_torch::decomp::{self, Gelu};
use ttpu_torch::graph;
use ttpu_torch::promote::opmath;

use super::{Bits, FloatFn, TapeOp};
use crate::promote::{Priority, broadcast_shapes, promote_types, result_type, scalar_dtype, static_dims};
use crate::{Error, Result};

/// How `torch.matmul` treats its operands: vectors become one-row or one-column matrices, and
/// dims before the last two are batch dims that broadcast.
pub(crate) struct MatmulPlan {
    pub(crate) lhs_matrix: SmallVec<[i64; 4]>,
    pub(crate) rhs_matrix: SmallVec<[i64; 4]>,
    pub(crate) lhs_full: SmallVec<[i64; 4]>,
    pub(crate) rhs_full: SmallVec<[i64; 4]>,
    pub(crate) batch_rank: i64,
    pub(crate) result_dims: SmallVec<[i64; 4]>,
}

impl MatmulPlan {
    /// The plan for operands of `lhs` and `rhs` dims; `None` when they do not multiply.
    pub(crate) fn of(lhs: &[i64], rhs: &[i64]) -> Option<MatmulPlan> {
        if lhs.is_empty() || rhs.is_empty() {
            return None;
        }
        let lhs_matrix: SmallVec<[i64; 4]> = if lhs.len() == 1 { smallvec::smallvec![1, lhs[0]] } else { lhs.into() };
        let rhs_matrix: SmallVec<[i64; 4]> = if rhs.len() == 1 { smallvec::smallvec![rhs[0], 1] } else { rhs.into() };
        let (lhs_batch, lhs_mk) = lhs_matrix.split_at(lhs_matrix.len() - 2);
        let (rhs_batch, rhs_kn) = rhs_matrix.split_at(rhs_matrix.len() - 2);
        if lhs_mk[1] != rhs_kn[0] {
            return None;
        }
        let batch = broadcast_shapes(&Shape::from_static(lhs_batch), &Shape::from_static(rhs_batch)).ok()?;
        let batch = static_dims(&batch);
        let mut result_dims = batch.clone();
        // The dim a vector operand gained is dropped from the result again.
        if lhs.len() > 1 {
            result_dims.push(lhs_mk[0]);
        }
        if rhs.len() > 1 {
            result_dims.push(rhs_kn[1]);
        }
        let lhs_full = batch.iter().chain(lhs_mk).copied().collect();
        let rhs_full = batch.iter().chain(rhs_kn).copied().collect();
        Some(MatmulPlan { batch_rank: batch.len() as i64, lhs_full, rhs_full, result_dims, lhs_matrix, rhs_matrix })
    }
}

impl TapeOp {
    /// Appends the op's IR to `builder`, reading `operands`, and returns its results: one for
    /// every op but a call.
    pub(crate) fn build_results(
        &self,
        builder: &mut GraphBuilder,
        operands: &[ValueId],
    ) -> Result<SmallVec<[ValueId; 1]>> {
        match self {
            TapeOp::Call(call) => Ok(builder.inline(call.graph(), operands)?.into_iter().collect()),
            op => Ok(smallvec::smallvec![op.build(builder, operands)?]),
        }
    }

    /// Appends the op's IR to `builder`, reading `operands`, and returns its result.
    pub(crate) fn build(&self, builder: &mut GraphBuilder, operands: &[ValueId]) -> Result<ValueId> {
        let operand = |index: usize| {
            operands.get(index).copied().ok_or_else(|| Error::internal(format!("{self:?} is missing operand {index}")))
        };
        match self {
            TapeOp::Full { dtype, value, dims } => {
                let scalar = builder.constant(Literal::scalar(*dtype, value.0));
                Ok(builder.broadcast_in_dim(scalar, &[], Shape::from_static(dims))?)
            }
            TapeOp::Arange { dtype, start, step, count } => {
                let compute = if dtype.is_float() { DType::F64 } else { DType::I64 };
                let shape = Shape::from_static(&[*count]);
                let positions = builder.iota(TensorType::new(compute, shape.clone()), 0)?;
                let step = splat(builder, compute, step.0, &shape)?;
                let start = splat(builder, compute, start.0, &shape)?;
                let offsets = builder.binary(BinaryOp::Multiply, step, positions)?;
                let values = builder.binary(BinaryOp::Add, start, offsets)?;
                convert(builder, values, *dtype)
            }
            TapeOp::Binary { op, dtype, scalar } => {
                let (lhs, rhs) = elementwise_operands(builder, operands, *dtype, *scalar)?;
                Ok(builder.binary(*op, lhs, rhs)?)
            }
            TapeOp::Compare { direction, dtype, scalar } => {
                let (lhs, rhs) = elementwise_operands(builder, operands, *dtype, *scalar)?;
                Ok(builder.compare(*direction, lhs, rhs)?)
            }
            TapeOp::Remainder { scalar } => {
                let dtype = promoted(builder, operands, scalar.iter());
                let (lhs, rhs) = elementwise_operands(builder, operands, opmath(dtype), *scalar)?;
                let res = decomp::python_remainder(builder, lhs, rhs)?;
                convert(builder, res, dtype)
            }
            TapeOp::Clamp { min, max } => {
                let x = operand(0)?;
                let dtype = promoted(builder, &[x], min.iter().chain(max.iter()));
                let mut res = convert(builder, x, dtype)?;
                let shape = builder.ty(res).shape.clone();
                // Raising to `min` first, then lowering to `max`, gives `max` when `min > max`, as
                // PyTorch does; both propagate NaN.
                for (bound, op) in [(min, BinaryOp::Maximum), (max, BinaryOp::Minimum)] {
                    if let Some(bound) = bound {
                        let bound = splat(builder, dtype, bound.0, &shape)?;
                        res = builder.binary(op, res, bound)?;
                    }
                }
                Ok(res)
            }
            TapeOp::MaskedFill { value } => {
                let (x, mask) = (operand(0)?, operand(1)?);
                let shape = broadcast_shapes(&builder.ty(x).shape, &builder.ty(mask).shape)?;
                let dtype = builder.ty(x).dtype;
                let x = broadcast_to(builder, x, &shape)?;
                let mask = broadcast_to(builder, mask, &shape)?;
                let fill = splat(builder, dtype, value.0, &shape)?;
                Ok(builder.select(mask, fill, x)?)
            }
            TapeOp::FloatUnary(function) => {
                let x = operand(0)?;
                let dtype = builder.ty(x).dtype;
                let out = if dtype.is_float() { dtype } else { DType::F32 };
                let x = convert(builder, x, opmath(out))?;
                let res = function.build(builder, x)?;
                convert(builder, res, out)
            }
            TapeOp::Sign => {
                // PyTorch's kernel computes `(0 < x) - (x < 0)`: NaN and -0.0 give +0.0, where
                // StableHLO's `sign` keeps them, and unsigned types (which `sign` refuses) work.
                let x = operand(0)?;
                let TensorType { dtype, shape } = builder.ty(x).clone();
                let zero = splat(builder, dtype, Scalar::Int(0), &shape)?;
                let positive = builder.compare(CompareDirection::Gt, x, zero)?;
                let negative = builder.compare(CompareDirection::Lt, x, zero)?;
                let positive = builder.convert(positive, dtype)?;
                let negative = builder.convert(negative, dtype)?;
                Ok(builder.binary(BinaryOp::Subtract, positive, negative)?)
            }
            TapeOp::Unary(op) => Ok(builder.unary(*op, operand(0)?)?),
            TapeOp::Relu => {
                let x = operand(0)?;
                let ty = builder.ty(x).clone();
                let zero = splat(builder, ty.dtype, Scalar::Int(0), &ty.shape)?;
                Ok(builder.binary(BinaryOp::Maximum, x, zero)?)
            }
            TapeOp::Convert(dtype) => Ok(builder.convert(operand(0)?, *dtype)?),
            TapeOp::Where { dtype } => {
                let (pred, on_true, on_false) = (operand(0)?, operand(1)?, operand(2)?);
                let shape = broadcast_shapes(&builder.ty(pred).shape, &builder.ty(on_true).shape)?;
                let shape = broadcast_shapes(&shape, &builder.ty(on_false).shape)?;
                let pred = cast(builder, pred, DType::Bool, &shape)?;
                let on_true = cast(builder, on_true, *dtype, &shape)?;
                let on_false = cast(builder, on_false, *dtype, &shape)?;
                Ok(builder.select(pred, on_true, on_false)?)
            }
            TapeOp::Matmul { dtype } => {
                let (lhs, rhs) = (operand(0)?, operand(1)?);
                let plan = MatmulPlan::of(&static_dims(&builder.ty(lhs).shape), &static_dims(&builder.ty(rhs).shape))
                    .ok_or_else(|| Error::internal("matmul recorded on operands that do not multiply"))?;
                let lhs = convert(builder, lhs, *dtype)?;
                let rhs = convert(builder, rhs, *dtype)?;
                let lhs = builder.reshape(lhs, Shape::from_static(&plan.lhs_matrix))?;
                let rhs = builder.reshape(rhs, Shape::from_static(&plan.rhs_matrix))?;
                let lhs = broadcast_to(builder, lhs, &Shape::from_static(&plan.lhs_full))?;
                let rhs = broadcast_to(builder, rhs, &Shape::from_static(&plan.rhs_full))?;
                let batch: SmallVec<[i64; 4]> = (0..plan.batch_rank).collect();
                let dims = DotDims {
                    lhs_batch: batch.clone(),
                    rhs_batch: batch,
                    lhs_contracting: smallvec::smallvec![plan.batch_rank + 1],
                    rhs_contracting: smallvec::smallvec![plan.batch_rank],
                };
                let product = builder.dot_general(lhs, rhs, dims)?;
                reshape_if_needed(builder, product, &plan.result_dims)
            }
            TapeOp::Linear => {
                let (input, weight) = (operand(0)?, operand(1)?);
                let dtype = operands.iter().map(|&value| builder.ty(value).dtype).reduce(promote_types);
                let dtype = dtype.ok_or_else(|| Error::internal("linear recorded without operands"))?;
                let (input_rank, weight_rank) = (builder.ty(input).rank() as i64, builder.ty(weight).rank() as i64);
                let input = convert(builder, input, dtype)?;
                let weight = convert(builder, weight, dtype)?;
                // Contracting the last dims of both multiplies by `weight^T` without a transpose;
                // the result is the input's leading dims, then the weight's rows.
                let dims = DotDims {
                    lhs_batch: SmallVec::new(),
                    rhs_batch: SmallVec::new(),
                    lhs_contracting: smallvec::smallvec![input_rank - 1],
                    rhs_contracting: smallvec::smallvec![weight_rank - 1],
                };
                let product = builder.dot_general(input, weight, dims)?;
                match operands.get(2) {
                    Some(&bias) => {
                        let shape = builder.ty(product).shape.clone();
                        let bias = cast(builder, bias, dtype, &shape)?;
                        Ok(builder.binary(BinaryOp::Add, product, bias)?)
                    }
                    None => Ok(product),
                }
            }
            TapeOp::Reduce { kind, axes, dtype, mean, keep } => {
                let x = operand(0)?;
                let dims = static_dims(&builder.ty(x).shape);
                let value = convert(builder, x, *dtype)?;
                let mut res = builder.reduce(value, *kind, axes)?;
                if *mean {
                    let count: i64 = axes.iter().filter_map(|&axis| dims.get(axis as usize)).product();
                    let reduced_shape = builder.ty(res).shape.clone();
                    let divisor = splat(builder, *dtype, Scalar::Int(count), &reduced_shape)?;
                    res = builder.binary(BinaryOp::Divide, res, divisor)?;
                }
                if *keep { reshape_if_needed(builder, res, &keep_dims(&dims, axes)) } else { Ok(res) }
            }
            TapeOp::ArgExtreme { kind, axis, keep } => {
                let x = operand(0)?;
                let dims = static_dims(&builder.ty(x).shape);
                match axis {
                    Some(axis) if !dims.is_empty() => arg_extreme(builder, x, *axis, *kind, *keep),
                    // A flattened tensor (or a rank-0 one, whose only dim PyTorch allows is 0 or
                    // -1) is one dim; the result has every dim of size 1, or none.
                    _ => {
                        let flat = reshape_if_needed(builder, x, &[dims.iter().product::<i64>()])?;
                        let index = arg_extreme(builder, flat, 0, *kind, false)?;
                        let ones: SmallVec<[i64; 4]> =
                            if *keep { smallvec::smallvec![1; dims.len()] } else { SmallVec::new() };
                        reshape_if_needed(builder, index, &ones)
                    }
                }
            }
            TapeOp::Variance { axes, correction, keep, sqrt } => {
                let x = operand(0)?;
                let rank = builder.ty(x).rank();
                let dims = axes
                    .iter()
                    .map(|&axis| usize::try_from(axis).ok().filter(|&axis| axis < rank))
                    .collect::<Option<Vec<usize>>>()
                    .ok_or_else(|| Error::internal(format!("variance over {axes:?} of a rank-{rank} tensor")))?;
                Ok(decomp::var_mean(builder, x, &dims, correction.0.as_f64(), *keep, *sqrt)?.0)
            }
            TapeOp::Softmax { axis, log } => {
                let x = operand(0)?;
                let axis = usize::try_from(*axis).map_err(|_| Error::internal(format!("softmax along {axis}")))?;
                let dtype = builder.ty(x).dtype;
                Ok(decomp::softmax(builder, x, axis, *log, dtype)?)
            }
            TapeOp::LayerNorm { normalized_rank, eps, has_weight } => {
                let x = operand(0)?;
                let mut params = operands[1..].iter().copied();
                let weight = if *has_weight { params.next() } else { None };
                let bias = params.next();
                Ok(decomp::layer_norm(builder, x, *normalized_rank, weight, bias, eps.0)?.out)
            }
            TapeOp::Reshape(dims) => Ok(builder.reshape(operand(0)?, Shape::from_static(dims))?),
            TapeOp::Transpose(order) => Ok(builder.transpose(operand(0)?, order)?),
            TapeOp::Slice { axis, start, end, step } => {
                let x = operand(0)?;
                let dims = static_dims(&builder.ty(x).shape);
                let mut starts: SmallVec<[i64; 4]> = smallvec::smallvec![0; dims.len()];
                let mut limits = dims.clone();
                let mut strides: SmallVec<[i64; 4]> = smallvec::smallvec![1; dims.len()];
                if *axis >= dims.len() {
                    return Err(Error::internal(format!(
                        "slice of dim {axis} recorded on a rank-{} tensor",
                        dims.len()
                    )));
                }
                starts[*axis] = *start;
                limits[*axis] = *end;
                strides[*axis] = *step;
                Ok(builder.slice(x, &starts, &limits, &strides)?)
            }
            TapeOp::Cat { axis, dtype } => {
                let converted =
                    operands.iter().map(|&value| convert(builder, value, *dtype)).collect::<Result<Vec<_>>>()?;
                Ok(builder.concatenate(&converted, *axis as i64)?)
            }
            TapeOp::Stack { axis } => {
                let dtype = operands.iter().map(|&value| builder.ty(value).dtype).reduce(promote_types);
                let dtype = dtype.ok_or_else(|| Error::internal("stack recorded without operands"))?;
                let mut parts = Vec::with_capacity(operands.len());
                for &value in operands {
                    let mut dims = static_dims(&builder.ty(value).shape);
                    if *axis > dims.len() {
                        return Err(Error::internal(format!("stack at dim {axis} of rank-{} tensors", dims.len())));
                    }
                    dims.insert(*axis, 1);
                    let value = convert(builder, value, dtype)?;
                    parts.push(builder.reshape(value, Shape::from_static(&dims))?);
                }
                Ok(builder.concatenate(&parts, *axis as i64)?)
            }
            TapeOp::BroadcastTo(dims) => broadcast_to(builder, operand(0)?, &Shape::from_static(dims)),
            TapeOp::IndexSelect { axis } => {
                let (x, index) = (operand(0)?, operand(1)?);
                let sizes = static_dims(&builder.ty(x).shape);
                if *axis >= sizes.len() {
                    return Err(Error::internal(format!(
                        "index_select of dim {axis} of a rank-{} tensor",
                        sizes.len()
                    )));
                }
                let index = convert(builder, index, DType::I64)?;
                // A rank-0 index selects one slice, kept as a dim of size 1, as in PyTorch.
                let count: i64 = static_dims(&builder.ty(index).shape).iter().product();
                let index = reshape_if_needed(builder, index, &[count])?;
                let mut slice_sizes = sizes.clone();
                slice_sizes[*axis] = 1;
                let dims = GatherDims {
                    // The other dims stay in place; the index's one dim lands where `axis` was.
                    offset_dims: (0..sizes.len() as i64).filter(|&dim| dim != *axis as i64).collect(),
                    collapsed_slice_dims: smallvec::smallvec![*axis as i64],
                    operand_batching_dims: SmallVec::new(),
                    start_indices_batching_dims: SmallVec::new(),
                    start_index_map: smallvec::smallvec![*axis as i64],
                    index_vector_dim: 1,
                    slice_sizes,
                    indices_are_sorted: false,
                };
                Ok(builder.gather(x, index, dims)?)
            }
            TapeOp::Gather { axis } => {
                let (x, index) = (operand(0)?, operand(1)?);
                let index = convert(builder, index, DType::I64)?;
                let index_dims = static_dims(&builder.ty(index).shape);
                let rank = index_dims.len();
                // Each position's full coordinates in the input: the index's value along `axis`,
                // the position's own coordinate along every other dim.
                let mut point_dims = index_dims.clone();
                point_dims.push(1);
                let mut columns = Vec::with_capacity(rank);
                for dim in 0..rank {
                    let coordinate = if dim == *axis {
                        index
                    } else {
                        builder.iota(TensorType::new(DType::I64, Shape::from_static(&index_dims)), dim as i64)?
                    };
                    columns.push(builder.reshape(coordinate, Shape::from_static(&point_dims))?);
                }
                let points = match columns.as_slice() {
                    [single] => *single,
                    _ => builder.concatenate(&columns, rank as i64)?,
                };
                let dims = GatherDims {
                    offset_dims: SmallVec::new(),
                    collapsed_slice_dims: (0..rank as i64).collect(),
                    operand_batching_dims: SmallVec::new(),
                    start_indices_batching_dims: SmallVec::new(),
                    start_index_map: (0..rank as i64).collect(),
                    index_vector_dim: rank as i64,
                    slice_sizes: smallvec::smallvec![1; rank],
                    indices_are_sorted: false,
                };
                Ok(builder.gather(x, points, dims)?)
            }
            TapeOp::Call(_) => Err(Error::internal("a call has results, not a result")),
            TapeOp::Collective(collective) => Ok(builder.collective(collective.clone(), operand(0)?)?),
            TapeOp::Embedding => {
                let (weight, indices) = (operand(0)?, operand(1)?);
                let width = static_dims(&builder.ty(weight).shape).get(1).copied();
                let width =
                    width.ok_or_else(|| Error::internal("embedding recorded on a weight that is not a matrix"))?;
                let indices = convert(builder, indices, DType::I64)?;
                let rank = builder.ty(indices).rank() as i64;
                let dims = GatherDims {
                    offset_dims: smallvec::smallvec![rank],
                    collapsed_slice_dims: smallvec::smallvec![0],
                    operand_batching_dims: SmallVec::new(),
                    start_indices_batching_dims: SmallVec::new(),
                    start_index_map: smallvec::smallvec![0],
                    index_vector_dim: rank,
                    slice_sizes: smallvec::smallvec![1, width],
                    indices_are_sorted: false,
                };
                Ok(builder.gather(weight, indices, dims)?)
            }
        }
    }
}

impl FloatFn {
    /// The function of `x`, a float tensor in the dtype it is computed in.
    fn build(self, builder: &mut GraphBuilder, x: ValueId) -> Result<ValueId> {
        let TensorType { dtype, shape } = builder.ty(x).clone();
        match self {
            FloatFn::Unary(op) => Ok(builder.unary(op, x)?),
            FloatFn::Erf => Ok(ttpu_ir::composite::erf(builder, x)?),
            FloatFn::Reciprocal => {
                let one = splat(builder, dtype, Scalar::Int(1), &shape)?;
                Ok(builder.binary(BinaryOp::Divide, one, x)?)
            }
            FloatFn::Gelu => Ok(decomp::gelu(builder, x, Gelu::Exact)?),
            FloatFn::GeluTanh => Ok(decomp::gelu(builder, x, Gelu::Tanh)?),
            FloatFn::Silu => {
                let sigmoid = builder.unary(UnaryOp::Logistic, x)?;
                Ok(builder.binary(BinaryOp::Multiply, x, sigmoid)?)
            }
        }
    }
}

/// PyTorch's result dtype of `operands` and of `scalars` taken as Python numbers.
fn promoted<'a>(builder: &GraphBuilder, operands: &[ValueId], scalars: impl Iterator<Item = &'a Bits>) -> DType {
    let mut parts: SmallVec<[(DType, Priority); 4]> = operands
        .iter()
        .map(|&value| {
            let ty = builder.ty(value);
            (ty.dtype, Priority::of_rank(ty.rank()))
        })
        .collect();
    parts.extend(scalars.map(|scalar| (scalar_dtype(scalar.0), Priority::Wrapped)));
    result_type(&parts)
}

/// The first index along `axis` of the maximum (`kind` max) or minimum of `x`, as `i64`, keeping
/// `axis` with size 1 when `keep`. NaN counts as the extreme, as in PyTorch: the reduction
/// propagates it, and NaN positions count as hits.
fn arg_extreme(builder: &mut GraphBuilder, x: ValueId, axis: usize, kind: ReduceKind, keep: bool) -> Result<ValueId> {
    let TensorType { dtype, shape } = builder.ty(x).clone();
    let dims = static_dims(&shape);
    let size = *dims.get(axis).ok_or_else(|| Error::internal(format!("arg extreme of dim {axis} of {shape}")))?;
    let kept_dims = keep_dims(&dims, &[axis as i64]);
    let mut extreme = builder.reduce(x, kind, &[axis as i64])?;
    let is_nan = if dtype.is_float() { Some(builder.compare(CompareDirection::Ne, x, x)?) } else { None };
    if let Some(is_nan) = is_nan {
        // `reduce` max and min may skip NaN; with a NaN in the row the extreme is NaN.
        let any_nan = builder.reduce(is_nan, ReduceKind::Or, &[axis as i64])?;
        let reduced_shape = builder.ty(extreme).shape.clone();
        let nan = splat(builder, dtype, Scalar::Float(f64::NAN), &reduced_shape)?;
        extreme = builder.select(any_nan, nan, extreme)?;
    }
    let extreme = reshape_if_needed(builder, extreme, &kept_dims)?;
    let extreme = broadcast_to(builder, extreme, &shape)?;
    let mut hit = builder.compare(CompareDirection::Eq, x, extreme)?;
    if let Some(is_nan) = is_nan {
        hit = builder.binary(BinaryOp::Or, hit, is_nan)?;
    }
    let positions = builder.iota(TensorType::new(DType::I64, shape.clone()), axis as i64)?;
    // Misses get the position past the end, so the minimum is the first hit.
    let beyond = splat(builder, DType::I64, Scalar::Int(size), &shape)?;
    let candidates = builder.select(hit, positions, beyond)?;
    let index = builder.reduce(candidates, ReduceKind::Min, &[axis as i64])?;
    if keep { reshape_if_needed(builder, index, &kept_dims) } else { Ok(index) }
}

/// The two operands of an elementwise op (the second may be a scalar attribute), promoted to
/// `dtype` and broadcast to their common shape.
fn elementwise_operands(
    builder: &mut GraphBuilder,
    operands: &[ValueId],
    dtype: DType,
    scalar: Option<Bits>,
) -> Result<(ValueId, ValueId)> {
    let missing = || Error::internal("an elementwise op recorded without its operands");
    let lhs = *operands.first().ok_or_else(missing)?;
    let rhs = match scalar {
        Some(value) => builder.constant(Literal::scalar(dtype, value.0)),
        None => *operands.get(1).ok_or_else(missing)?,
    };
    let shape = broadcast_shapes(&builder.ty(lhs).shape, &builder.ty(rhs).shape)?;
    let lhs = cast(builder, lhs, dtype, &shape)?;
    let rhs = cast(builder, rhs, dtype, &shape)?;
    Ok((lhs, rhs))
}

/// `dims` with every axis in `axes` set to 1.
fn keep_dims(dims: &[i64], axes: &[i64]) -> SmallVec<[i64; 4]> {
    dims.iter().enumerate().map(|(index, &size)| if axes.contains(&(index as i64)) { 1 } else { size }).collect()
}

/// `value` converted to `dtype` (no node when it already has it).
fn convert(builder: &mut GraphBuilder, value: ValueId, dtype: DType) -> Result<ValueId> {
    Ok(graph::convert(builder, value, dtype)?)
}

/// `value` broadcast to `shape`, aligned on the right (no node when it already has it).
fn broadcast_to(builder: &mut GraphBuilder, value: ValueId, shape: &Shape) -> Result<ValueId> {
    Ok(graph::broadcast_to(builder, value, shape)?)
}

/// `value` converted to `dtype` and broadcast to `shape`.
fn cast(builder: &mut GraphBuilder, value: ValueId, dtype: DType, shape: &Shape) -> Result<ValueId> {
    let converted = convert(builder, value, dtype)?;
    broadcast_to(builder, converted, shape)
}

/// `value` reshaped to `dims` (no node when it already has them).
fn reshape_if_needed(builder: &mut GraphBuilder, value: ValueId, dims: &[i64]) -> Result<ValueId> {
    if static_dims(&builder.ty(value).shape).as_slice() == dims {
        return Ok(value);
    }
    Ok(builder.reshape(value, Shape::from_static(dims))?)
}

/// A tensor of `shape` whose every element is `value`, as a scalar constant broadcast.
fn splat(builder: &mut GraphBuilder, dtype: DType, value: Scalar, shape: &Shape) -> Result<ValueId> {
    Ok(graph::splat(builder, dtype, value, shape)?)
}
