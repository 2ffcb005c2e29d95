//! The tape: pending work as a list of tensor-level ops, built into IR only when it must compile.
//!
//! Recording an op appends one compact [`Step`] (the op as the user called it, with its
//! attributes, and its operands' slots) instead of building IR nodes; the result's type lives in
//! the tensor. A warm
//! read then needs no IR at all: the program's key is its tape ([`Tape::structure_hash`] and an
//! exact comparison), and only a compile-cache miss replays the tape through
//! `ttpu_ir::GraphBuilder` ([`Tape::to_graph`]) to fuse, lower and compile it. Broadcasting and
//! type promotion become explicit IR nodes during that replay, by the same code every time, so a
//! tape always builds the same graph.
//!
//! Result types come from the same replay: [`TypeMemo`] builds an op once per signature (op,
//! attributes, operand types) in a scratch builder, which also checks it, and keeps the type. The
//! graph builder stays the one place that knows how ops infer types and what makes them invalid.
//! Types are interned per device, so a signature is found by pointer, without hashing shapes.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::Arc;

use smallvec::SmallVec;
use ttpu_ir::{
    BinaryOp, CompareDirection, DType, DotDims, Graph, GraphBuilder, Literal, ReduceKind, Scalar, Shape, TensorType,
    UnaryOp, ValueId,
};

use crate::cache::FxHasher;
use crate::promote::{broadcast_shapes, static_dims};
use crate::{Error, Result};

/// Where a pending value comes from: an input buffer or the result of a step, by index.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Slot {
    Input(u32),
    Step(u32),
}

/// A scalar attribute, compared and hashed by its bits: `-0.0` and `0.0`, or two NaN payloads,
/// are different programs.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Bits(pub(crate) Scalar);

impl PartialEq for Bits {
    fn eq(&self, other: &Bits) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Bits {}

impl Hash for Bits {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key().hash(state);
    }
}

impl Bits {
    fn key(self) -> (u8, u64) {
        match self.0 {
            Scalar::Float(value) => (0, value.to_bits()),
            Scalar::Int(value) => (1, value as u64),
            Scalar::Bool(value) => (2, u64::from(value)),
        }
    }
}

/// One tensor-level op with the attributes its IR needs beyond its operands' types.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum TapeOp {
    /// A tensor of `dims` filled with `value`.
    Full { dtype: DType, value: Bits, dims: SmallVec<[i64; 4]> },
    /// Operands (or the operand and `scalar`) promoted to `dtype`, broadcast, then combined.
    Binary { op: BinaryOp, dtype: DType, scalar: Option<Bits> },
    /// Like `Binary`, comparing; the result is bool.
    Compare { direction: CompareDirection, dtype: DType, scalar: Option<Bits> },
    /// The operand converted to `dtype` (a float type), then `op`.
    FloatUnary { op: UnaryOp, dtype: DType },
    /// `op` on the operand as it is.
    Unary(UnaryOp),
    /// `max(x, 0)`.
    Relu,
    /// Elementwise conversion.
    Convert(DType),
    /// `select(pred, on_true, on_false)` with the branches promoted to `dtype`, all broadcast.
    Where { dtype: DType },
    /// `torch.matmul` on operands promoted to `dtype`.
    Matmul { dtype: DType },
    /// A reduction over `axes` in `dtype`; `mean` divides by the count, `keep` keeps size-1 dims.
    Reduce { kind: ReduceKind, axes: SmallVec<[i64; 4]>, dtype: DType, mean: bool, keep: bool },
    /// Softmax along `axis`.
    Softmax { axis: i64 },
    /// Layer norm over the trailing `normalized_rank` dims; operands are `x`, then the weight and
    /// bias that are present.
    LayerNorm { normalized_rank: usize, eps: Bits, has_weight: bool },
    /// The same elements in `dims`.
    Reshape(SmallVec<[i64; 4]>),
    /// Dims reordered.
    Transpose(SmallVec<[i64; 4]>),
    /// `start..end` step `step` along `axis` (bounds already clamped).
    Slice { axis: usize, start: i64, end: i64, step: i64 },
    /// Operands joined along `axis` after promotion to `dtype`.
    Cat { axis: usize, dtype: DType },
    /// The operand broadcast to `dims`.
    BroadcastTo(SmallVec<[i64; 4]>),
}

/// One recorded op: what it is and what it reads. Its result type follows from those; the
/// tensor it made holds it.
#[derive(Clone, Debug)]
pub(crate) struct Step {
    pub(crate) op: TapeOp,
    pub(crate) operands: SmallVec<[Slot; 3]>,
}

/// Recorded work: input types, steps in recording order, and (for a program) the outputs.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tape {
    pub(crate) inputs: Vec<Arc<TensorType>>,
    pub(crate) steps: Vec<Step>,
    pub(crate) outputs: Vec<Slot>,
}

impl Tape {
    /// Empties the tape, keeping its memory for the next recording.
    pub(crate) fn clear(&mut self) {
        self.inputs.clear();
        self.steps.clear();
        self.outputs.clear();
    }

    pub(crate) fn add_input(&mut self, ty: Arc<TensorType>) -> Slot {
        self.inputs.push(ty);
        Slot::Input(index_u32(self.inputs.len() - 1))
    }

    pub(crate) fn push(&mut self, op: TapeOp, operands: SmallVec<[Slot; 3]>) -> Slot {
        self.steps.push(Step { op, operands });
        Slot::Step(index_u32(self.steps.len() - 1))
    }

    /// The inputs and steps that `outputs` need.
    pub(crate) fn needed(&self, outputs: &[Slot]) -> Needed {
        let mut needed = Needed { inputs: vec![false; self.inputs.len()], steps: vec![false; self.steps.len()] };
        for &slot in outputs {
            needed.mark(slot);
        }
        // Recording order is topological: one backward walk sees every user before its operands.
        for index in (0..self.steps.len()).rev() {
            if needed.steps[index] {
                for &operand in &self.steps[index].operands {
                    needed.mark(operand);
                }
            }
        }
        needed
    }

    /// The needed part as a program returning `outputs`, its inputs renumbered densely; also
    /// returns which of this tape's inputs it reads, in order.
    pub(crate) fn extract(&self, needed: &Needed, outputs: &[Slot]) -> Result<(Tape, Vec<usize>)> {
        let mut program = Tape::default();
        let mut input_map = vec![None; self.inputs.len()];
        let mut used_inputs = Vec::new();
        for (index, ty) in self.inputs.iter().enumerate() {
            if needed.inputs[index] {
                input_map[index] = Some(program.add_input(Arc::clone(ty)));
                used_inputs.push(index);
            }
        }
        let mut step_map = vec![None; self.steps.len()];
        let map = |input_map: &[Option<Slot>], step_map: &[Option<Slot>], slot: Slot| {
            let mapped = match slot {
                Slot::Input(index) => input_map.get(index as usize).copied().flatten(),
                Slot::Step(index) => step_map.get(index as usize).copied().flatten(),
            };
            mapped.ok_or_else(|| Error::internal(format!("{slot:?} used before it was recorded")))
        };
        for (index, step) in self.steps.iter().enumerate() {
            if !needed.steps[index] {
                continue;
            }
            let operands = step.operands.iter().map(|&slot| map(&input_map, &step_map, slot)).collect::<Result<_>>()?;
            step_map[index] = Some(program.push(step.op.clone(), operands));
        }
        program.outputs = outputs.iter().map(|&slot| map(&input_map, &step_map, slot)).collect::<Result<Vec<_>>>()?;
        Ok((program, used_inputs))
    }

    /// A 64-bit hash of everything [`Tape::same_program`] compares.
    pub(crate) fn structure_hash(&self) -> u64 {
        let mut hasher = FxHasher::default();
        hasher.write_usize(self.inputs.len());
        for ty in &self.inputs {
            ty.hash(&mut hasher);
        }
        hasher.write_usize(self.steps.len());
        for step in &self.steps {
            step.op.hash(&mut hasher);
            step.operands.hash(&mut hasher);
        }
        self.outputs.hash(&mut hasher);
        hasher.finish()
    }

    /// Whether two programs are the same computation: same input types, step for step the same
    /// op and attributes reading the same slots, same outputs. Result types follow from those.
    pub(crate) fn same_program(&self, other: &Tape) -> bool {
        self.inputs.len() == other.inputs.len()
            && self.steps.len() == other.steps.len()
            && self.outputs == other.outputs
            && self.inputs.iter().zip(&other.inputs).all(|(a, b)| Arc::ptr_eq(a, b) || a == b)
            && self.steps.iter().zip(&other.steps).all(|(a, b)| a.operands == b.operands && a.op == b.op)
    }

    /// The program as IR: each step replayed through a graph builder.
    pub(crate) fn to_graph(&self) -> Result<Graph> {
        let mut builder = GraphBuilder::new();
        let inputs: Vec<ValueId> = self.inputs.iter().map(|ty| builder.input(TensorType::clone(ty), None)).collect();
        let mut results: Vec<ValueId> = Vec::with_capacity(self.steps.len());
        let value = |results: &[ValueId], slot: Slot| {
            let value = match slot {
                Slot::Input(index) => inputs.get(index as usize),
                Slot::Step(index) => results.get(index as usize),
            };
            value.copied().ok_or_else(|| Error::internal(format!("{slot:?} used before it was recorded")))
        };
        for step in &self.steps {
            let operands =
                step.operands.iter().map(|&slot| value(&results, slot)).collect::<Result<SmallVec<[_; 3]>>>()?;
            results.push(step.op.build(&mut builder, &operands)?);
        }
        let outputs = self.outputs.iter().map(|&slot| value(&results, slot)).collect::<Result<Vec<_>>>()?;
        Ok(builder.finish(&outputs))
    }
}

/// Which inputs and steps of a tape some outputs need.
pub(crate) struct Needed {
    inputs: Vec<bool>,
    steps: Vec<bool>,
}

impl Needed {
    fn mark(&mut self, slot: Slot) {
        match slot {
            Slot::Input(index) => self.inputs[index as usize] = true,
            Slot::Step(index) => self.steps[index as usize] = true,
        }
    }

    /// Whether every input and step is needed: the tape is the program as it stands.
    pub(crate) fn is_everything(&self) -> bool {
        self.inputs.iter().chain(&self.steps).all(|&needed| needed)
    }
}

fn index_u32(index: usize) -> u32 {
    // A tape runs long before four billion steps (the pending limit), so this never saturates in
    // practice; saturating keeps it panic-free.
    u32::try_from(index).unwrap_or(u32::MAX)
}

/// Result types by signature (op, attributes, operand types), so that recording an op whose
/// signature was seen before builds nothing.
///
/// Types are interned: every tensor type of a device is one `Arc` per distinct type, so a
/// signature is looked up by the addresses of its operand types, without hashing shapes. The
/// memo holds the `Arc`s it was given, so an address it knows is never reused for another type.
#[derive(Default)]
pub(crate) struct TypeMemo {
    /// Entries by signature hash; a bucket holds more than one only when signatures collide.
    signatures: HashMap<u64, SmallVec<[Signature; 1]>, BuildHasherDefault<FxHasher>>,
    signature_count: usize,
    interned: HashMap<TensorType, Arc<TensorType>, BuildHasherDefault<FxHasher>>,
}

struct Signature {
    op: TapeOp,
    operands: SmallVec<[Arc<TensorType>; 3]>,
    result: Arc<TensorType>,
}

/// Signatures and types kept before the memo starts over: enough for any steady workload, and a
/// bound for programs whose shapes keep changing.
const MEMO_CAPACITY: usize = 4096;

impl TypeMemo {
    /// The one `Arc` of this type.
    pub(crate) fn intern(&mut self, ty: TensorType) -> Arc<TensorType> {
        if let Some(interned) = self.interned.get(&ty) {
            return Arc::clone(interned);
        }
        if self.interned.len() >= MEMO_CAPACITY {
            // Starting over only costs sharing: types interned before stay valid `Arc`s.
            self.interned.clear();
        }
        let interned = Arc::new(ty.clone());
        self.interned.insert(ty, Arc::clone(&interned));
        interned
    }

    /// The result type of `op` on operands of `operand_types`; builds the op in a scratch graph
    /// (checking it) the first time the signature is seen.
    pub(crate) fn result_type(&mut self, op: &TapeOp, operand_types: &[&Arc<TensorType>]) -> Result<Arc<TensorType>> {
        let mut hasher = FxHasher::default();
        op.hash(&mut hasher);
        for ty in operand_types {
            hasher.write_usize(Arc::as_ptr(ty) as usize);
        }
        let hash = hasher.finish();
        let same_operands = |known: &[Arc<TensorType>]| {
            known.len() == operand_types.len() && known.iter().zip(operand_types).all(|(a, b)| Arc::ptr_eq(a, b))
        };
        if let Some(bucket) = self.signatures.get(&hash)
            && let Some(signature) =
                bucket.iter().find(|signature| signature.op == *op && same_operands(&signature.operands))
        {
            return Ok(Arc::clone(&signature.result));
        }
        let mut builder = GraphBuilder::new();
        let values: SmallVec<[ValueId; 3]> =
            operand_types.iter().map(|ty| builder.input(TensorType::clone(ty), None)).collect();
        let result = op.build(&mut builder, &values)?;
        let result = self.intern(builder.ty(result).clone());
        if self.signature_count >= MEMO_CAPACITY {
            self.signatures.clear();
            self.signature_count = 0;
        }
        let operands = operand_types.iter().map(|ty| Arc::clone(ty)).collect();
        let signature = Signature { op: op.clone(), operands, result: Arc::clone(&result) };
        self.signatures.entry(hash).or_default().push(signature);
        self.signature_count += 1;
        Ok(result)
    }
}

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
            TapeOp::Binary { op, dtype, scalar } => {
                let (lhs, rhs) = elementwise_operands(builder, operands, *dtype, *scalar)?;
                Ok(builder.binary(*op, lhs, rhs)?)
            }
            TapeOp::Compare { direction, dtype, scalar } => {
                let (lhs, rhs) = elementwise_operands(builder, operands, *dtype, *scalar)?;
                Ok(builder.compare(*direction, lhs, rhs)?)
            }
            TapeOp::FloatUnary { op, dtype } => {
                let value = convert(builder, operand(0)?, *dtype)?;
                Ok(builder.unary(*op, value)?)
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
            TapeOp::Softmax { axis } => {
                let x = operand(0)?;
                let shape = builder.ty(x).shape.clone();
                let kept_dims = keep_dims(&static_dims(&shape), &[*axis]);
                let max = builder.reduce(x, ReduceKind::Max, &[*axis])?;
                let max = reshape_if_needed(builder, max, &kept_dims)?;
                let max = broadcast_to(builder, max, &shape)?;
                let shifted = builder.binary(BinaryOp::Subtract, x, max)?;
                let exp = builder.unary(UnaryOp::Exponential, shifted)?;
                let sum = builder.reduce(exp, ReduceKind::Sum, &[*axis])?;
                let sum = reshape_if_needed(builder, sum, &kept_dims)?;
                let sum = broadcast_to(builder, sum, &shape)?;
                Ok(builder.binary(BinaryOp::Divide, exp, sum)?)
            }
            TapeOp::LayerNorm { normalized_rank, eps, has_weight } => {
                let x = operand(0)?;
                let TensorType { dtype, shape } = builder.ty(x).clone();
                let dims = static_dims(&shape);
                let first = dims.len().saturating_sub(*normalized_rank);
                let axes: SmallVec<[i64; 4]> = (first as i64..dims.len() as i64).collect();
                let kept_dims = keep_dims(&dims, &axes);
                let kept_shape = Shape::from_static(&kept_dims);
                let count: i64 = dims[first..].iter().product();
                let mean_of = |builder: &mut GraphBuilder, value: ValueId| -> Result<ValueId> {
                    let sum = builder.reduce(value, ReduceKind::Sum, &axes)?;
                    let sum = reshape_if_needed(builder, sum, &kept_dims)?;
                    let divisor = splat(builder, dtype, Scalar::Int(count), &kept_shape)?;
                    let mean = builder.binary(BinaryOp::Divide, sum, divisor)?;
                    broadcast_to(builder, mean, &shape)
                };
                let mean = mean_of(builder, x)?;
                let centered = builder.binary(BinaryOp::Subtract, x, mean)?;
                let squared = builder.binary(BinaryOp::Multiply, centered, centered)?;
                let variance = mean_of(builder, squared)?;
                let eps = splat(builder, dtype, eps.0, &shape)?;
                let shifted = builder.binary(BinaryOp::Add, variance, eps)?;
                let inv_std = builder.unary(UnaryOp::Rsqrt, shifted)?;
                let mut res = builder.binary(BinaryOp::Multiply, centered, inv_std)?;
                let mut params = operands[1..].iter();
                if *has_weight && let Some(&weight) = params.next() {
                    let weight = cast(builder, weight, dtype, &shape)?;
                    res = builder.binary(BinaryOp::Multiply, res, weight)?;
                }
                if let Some(&bias) = params.next() {
                    let bias = cast(builder, bias, dtype, &shape)?;
                    res = builder.binary(BinaryOp::Add, res, bias)?;
                }
                Ok(res)
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
            TapeOp::BroadcastTo(dims) => broadcast_to(builder, operand(0)?, &Shape::from_static(dims)),
        }
    }
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
    if builder.ty(value).dtype == dtype { Ok(value) } else { Ok(builder.convert(value, dtype)?) }
}

/// `value` broadcast to `shape`, aligned on the right (no node when it already has it).
fn broadcast_to(builder: &mut GraphBuilder, value: ValueId, shape: &Shape) -> Result<ValueId> {
    let operand_rank = builder.ty(value).rank();
    if builder.ty(value).shape == *shape {
        return Ok(value);
    }
    let offset = shape
        .rank()
        .checked_sub(operand_rank)
        .ok_or_else(|| Error::internal(format!("broadcast of rank {operand_rank} to {shape}")))?
        as i64;
    let dims: SmallVec<[i64; 4]> = (0..operand_rank as i64).map(|index| index + offset).collect();
    Ok(builder.broadcast_in_dim(value, &dims, shape.clone())?)
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
    let scalar = builder.constant(Literal::scalar(dtype, value));
    broadcast_to(builder, scalar, shape)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(memo: &mut TypeMemo, dims: &[i64]) -> Arc<TensorType> {
        memo.intern(TensorType::new(DType::F32, Shape::from_static(dims)))
    }

    fn add(scalar: Option<f64>) -> TapeOp {
        TapeOp::Binary { op: BinaryOp::Add, dtype: DType::F32, scalar: scalar.map(|value| Bits(Scalar::Float(value))) }
    }

    /// `tanh(x + y)` with `x: f32[2, 3]` and `y: f32[3]`, returned.
    fn broadcast_add_tanh(memo: &mut TypeMemo) -> Tape {
        let (x, y) = (f32s(memo, &[2, 3]), f32s(memo, &[3]));
        let mut tape = Tape::default();
        let (x_slot, y_slot) = (tape.add_input(Arc::clone(&x)), tape.add_input(Arc::clone(&y)));
        let sum_ty = memo.result_type(&add(None), &[&x, &y]).unwrap();
        let sum = tape.push(add(None), smallvec::smallvec![x_slot, y_slot]);
        let tanh = TapeOp::FloatUnary { op: UnaryOp::Tanh, dtype: DType::F32 };
        memo.result_type(&tanh, &[&sum_ty]).unwrap();
        let out = tape.push(tanh, smallvec::smallvec![sum]);
        tape.outputs.push(out);
        tape
    }

    #[test]
    fn a_tape_builds_the_ir_of_its_ops_with_explicit_broadcasts() {
        let tape = broadcast_add_tanh(&mut TypeMemo::default());
        assert_eq!(
            ttpu_ir::text::print(&tape.to_graph().unwrap()),
            "graph @main(%0: f32[2, 3], %1: f32[3]) -> (f32[2, 3]) {\n  \
             %2: f32[2, 3] = broadcast_in_dim(%1) {dims = [1]}\n  \
             %3: f32[2, 3] = add(%0, %2)\n  \
             %4: f32[2, 3] = tanh(%3)\n  \
             return %4\n}\n"
        );
    }

    #[test]
    fn the_memo_builds_each_signature_once_and_shares_interned_types() {
        let mut memo = TypeMemo::default();
        let x = f32s(&mut memo, &[2, 3]);
        assert!(Arc::ptr_eq(&x, &f32s(&mut memo, &[2, 3])), "one Arc per distinct type");
        let first = memo.result_type(&add(Some(1.0)), &[&x]).unwrap();
        assert!(Arc::ptr_eq(&first, &x), "an elementwise result has its operand's type");
        assert_eq!(memo.signature_count, 1);
        memo.result_type(&add(Some(1.0)), &[&x]).unwrap();
        assert_eq!(memo.signature_count, 1, "a known signature builds nothing");
        // The scalar's bits are part of the signature.
        memo.result_type(&add(Some(-0.0)), &[&x]).unwrap();
        memo.result_type(&add(Some(0.0)), &[&x]).unwrap();
        assert_eq!(memo.signature_count, 3);
        let sum = TapeOp::Reduce {
            kind: ReduceKind::Sum,
            axes: smallvec::smallvec![1],
            dtype: DType::F32,
            mean: false,
            keep: true,
        };
        assert_eq!(*memo.result_type(&sum, &[&x]).unwrap(), TensorType::new(DType::F32, Shape::from_static(&[2, 1])));
    }

    #[test]
    fn an_invalid_op_fails_when_its_type_is_asked_for() {
        let mut memo = TypeMemo::default();
        let (x, y) = (f32s(&mut memo, &[2, 3]), f32s(&mut memo, &[4]));
        let error = memo.result_type(&add(None), &[&x, &y]).unwrap_err();
        assert_eq!(error.to_string(), "shapes [2, 3] and [4] cannot be broadcast: size 3 does not match size 4");
        assert_eq!(memo.signature_count, 0, "failures are not remembered");
    }

    #[test]
    fn equal_programs_hash_and_compare_alike_and_any_difference_tells_them_apart() {
        let mut memo = TypeMemo::default();
        let base = broadcast_add_tanh(&mut memo);
        let same = broadcast_add_tanh(&mut memo);
        assert!(base.same_program(&same));
        assert_eq!(base.structure_hash(), same.structure_hash());

        let mut swapped = base.clone();
        swapped.steps[0].operands.swap(0, 1);
        let mut other_op = base.clone();
        other_op.steps[1].op = TapeOp::FloatUnary { op: UnaryOp::Exponential, dtype: DType::F32 };
        let mut wider = base.clone();
        wider.inputs[0] = f32s(&mut memo, &[4, 3]);
        let mut more_outputs = base.clone();
        more_outputs.outputs.push(Slot::Step(0));
        for other in [swapped, other_op, wider, more_outputs] {
            assert!(!base.same_program(&other) && !other.same_program(&base), "{other:?}");
            assert_ne!(base.structure_hash(), other.structure_hash(), "{other:?}");
        }
    }

    #[test]
    fn extraction_keeps_the_needed_steps_and_renumbers_inputs() {
        let mut memo = TypeMemo::default();
        let x = f32s(&mut memo, &[3]);
        let mut tape = Tape::default();
        let unused = tape.add_input(Arc::clone(&x));
        let input = tape.add_input(Arc::clone(&x));
        let dead = tape.push(add(Some(1.0)), smallvec::smallvec![unused]);
        let live = tape.push(add(Some(2.0)), smallvec::smallvec![input]);
        let needed = tape.needed(&[live]);
        assert!(!needed.is_everything());
        let (program, used_inputs) = tape.extract(&needed, &[live]).unwrap();
        assert_eq!(used_inputs, vec![1]);
        assert_eq!(program.inputs.len(), 1);
        assert_eq!(program.steps.len(), 1);
        assert_eq!(program.steps[0].operands.as_slice(), &[Slot::Input(0)]);
        assert_eq!(program.steps[0].op, add(Some(2.0)));
        assert_eq!(program.outputs, vec![Slot::Step(0)]);
        assert!(tape.needed(&[dead, live]).is_everything());
    }
}
