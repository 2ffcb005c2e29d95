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
//!
//! This file holds the tape and the memo; `build.rs` holds how each [`TapeOp`] becomes IR.

mod build;

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::Arc;

use smallvec::SmallVec;
use ttpu_ir::{
    BinaryOp, CompareDirection, DType, Graph, GraphBuilder, ReduceKind, Scalar, TensorType, UnaryOp, ValueId,
};

pub(crate) use self::build::MatmulPlan;
use crate::{Error, Result};
use ttpu_runtime::FxHasher;

/// Where a pending value comes from: an input buffer by index, a host value by index (data the
/// program receives packed, see [`Tape::hosts`]), or a result of a step (the step's index, then
/// the result's: every op but [`TapeOp::Call`] has one result).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Slot {
    Input(u32),
    Host(u32),
    Step(u32, u32),
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
///
/// Attributes that follow from the operands' types (the result dtype of a promotion, whether an
/// optional operand is present when it is the last one) are derived while building, not stored,
/// so one op on other dtypes is one signature more, not one variant more.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum TapeOp {
    /// A tensor of `dims` filled with `value`.
    Full { dtype: DType, value: Bits, dims: SmallVec<[i64; 4]> },
    /// `start + step * i` for `i` in `0..count`, computed in `i64` for an integer `dtype` (the
    /// bounds then hold integers) and in `f64` for a float one, then converted to `dtype`.
    Arange { dtype: DType, start: Bits, step: Bits, count: i64 },
    /// Operands (or the operand and `scalar`) promoted to `dtype`, broadcast, then combined.
    Binary { op: BinaryOp, dtype: DType, scalar: Option<Bits> },
    /// Like `Binary`, comparing; the result is bool.
    Compare { direction: CompareDirection, dtype: DType, scalar: Option<Bits> },
    /// Python's remainder (the sign of the divisor) of the operands, or of the operand and
    /// `scalar`, promoted and broadcast like `Binary`.
    Remainder { scalar: Option<Bits> },
    /// The operand limited to `[min, max]` (either bound may be absent), after PyTorch's promotion
    /// with the bounds as Python numbers.
    Clamp { min: Option<Bits>, max: Option<Bits> },
    /// `value` where the bool mask (operand 1) is set and the operand elsewhere, both broadcast.
    MaskedFill { value: Bits },
    /// A float function of the operand: integer and bool operands are computed as `f32`, and
    /// `f16`/`bf16` in `f32` and rounded once, as PyTorch's CPU kernels do.
    FloatUnary(FloatFn),
    /// `op` on the operand as it is.
    Unary(UnaryOp),
    /// -1, 0 or 1 by the operand's sign, in its dtype, as PyTorch computes it.
    Sign,
    /// `max(x, 0)`.
    Relu,
    /// Elementwise conversion.
    Convert(DType),
    /// `select(pred, on_true, on_false)` with the branches promoted to `dtype`, all broadcast.
    Where { dtype: DType },
    /// `torch.matmul` on operands promoted to `dtype`.
    Matmul { dtype: DType },
    /// `input @ weight^T`, plus the bias when there is a third operand, all promoted to one dtype.
    Linear,
    /// A reduction over `axes` in `dtype`; `mean` divides by the count, `keep` keeps size-1 dims.
    Reduce { kind: ReduceKind, axes: SmallVec<[i64; 4]>, dtype: DType, mean: bool, keep: bool },
    /// The first index of the maximum (`kind` max) or minimum along `axis`, or of the flattened
    /// operand when `axis` is `None`; NaN counts as the extreme. The result is `i64`.
    ArgExtreme { kind: ReduceKind, axis: Option<usize>, keep: bool },
    /// The variance over `axes` with Bessel's `correction`, or its square root when `sqrt`.
    Variance { axes: SmallVec<[i64; 4]>, correction: Bits, keep: bool, sqrt: bool },
    /// Softmax along `axis`, or its logarithm when `log`.
    Softmax { axis: i64, log: bool },
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
    /// Operands of one shape joined along a new dim `axis`, promoted to one dtype.
    Stack { axis: usize },
    /// The operand broadcast to `dims`.
    BroadcastTo(SmallVec<[i64; 4]>),
    /// Slices of the operand along `axis` at the positions held by the 1-D index (operand 1).
    IndexSelect { axis: usize },
    /// `torch.gather`: `out[p] = x[p with p[axis] = index[p]]`, shaped like the index (operand 1).
    Gather { axis: usize },
    /// Rows of the weight matrix (operand 0) at the indices (operand 1).
    Embedding,
    /// A graph called on the operands (inlined), one result per output of the graph.
    Call(CallGraph),
    /// A collective across the replicas of the program (see `Device::replicas`).
    Collective(ttpu_ir::Collective),
}

/// A graph that steps call: its inputs are a step's operands, its outputs the step's results.
/// Compared by identity first, then by structure; its hash is computed once.
#[derive(Clone, Debug)]
pub struct CallGraph {
    graph: Arc<Graph>,
    hash: u64,
}

impl CallGraph {
    /// `graph` as a callable step; every input and output must have static dims.
    pub fn new(graph: Graph) -> Result<CallGraph> {
        let types = graph.inputs.iter().chain(&graph.outputs).map(|&value| graph.ty(value));
        if let Some(ty) = types.clone().find(|ty| ty.shape.as_static().is_none()) {
            return Err(Error::CallOperands { message: format!("a called graph has the symbolic type {ty}") });
        }
        let mut hasher = FxHasher::default();
        graph.hash(&mut hasher);
        Ok(CallGraph { hash: hasher.finish(), graph: Arc::new(graph) })
    }

    /// The graph.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }
}

impl PartialEq for CallGraph {
    fn eq(&self, other: &CallGraph) -> bool {
        Arc::ptr_eq(&self.graph, &other.graph) || (self.hash == other.hash && self.graph == other.graph)
    }
}

impl Eq for CallGraph {}

impl Hash for CallGraph {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.hash.hash(state);
    }
}

/// A float function of one tensor (see [`TapeOp::FloatUnary`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum FloatFn {
    /// An IR op: `exp`, `log`, `tanh`, `sigmoid`, `sqrt`, `rsqrt`, `sin`, `cos`, `log1p`, `expm1`.
    Unary(UnaryOp),
    /// The error function, through `ttpu_ir::composite::erf`.
    Erf,
    /// `1 / x`.
    Reciprocal,
    /// `x/2 * (1 + erf(x/√2))`.
    Gelu,
    /// GELU's tanh approximation, `x/2 * (1 + tanh(√(2/π) * (x + 0.044715 x³)))`.
    GeluTanh,
    /// `x * sigmoid(x)`.
    Silu,
}

/// One recorded op: what it is and what it reads. Its result type follows from those; the
/// tensor it made holds it.
#[derive(Clone, Debug)]
pub(crate) struct Step {
    pub(crate) op: TapeOp,
    pub(crate) operands: SmallVec<[Slot; 3]>,
}

/// Recorded work: input types, host value types, steps in recording order, and (for a program)
/// the outputs.
///
/// Host values (small data from the host: Python numbers a frontend passes as tensors, random
/// keys) are not uploaded one by one: a program receives them packed, one vector per dtype in
/// order of first appearance after its buffer inputs, and slices each out. Their types are part
/// of the program, their values are not.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tape {
    pub(crate) inputs: Vec<Arc<TensorType>>,
    pub(crate) hosts: Vec<Arc<TensorType>>,
    pub(crate) steps: Vec<Step>,
    pub(crate) outputs: Vec<Slot>,
}

impl Tape {
    /// Empties the tape, keeping its memory for the next recording.
    pub(crate) fn clear(&mut self) {
        self.inputs.clear();
        self.hosts.clear();
        self.steps.clear();
        self.outputs.clear();
    }

    pub(crate) fn add_host(&mut self, ty: Arc<TensorType>) -> Slot {
        self.hosts.push(ty);
        Slot::Host(index_u32(self.hosts.len() - 1))
    }

    /// The packed host inputs of this program: `(dtype, host indices in order)` per dtype, in order
    /// of first appearance.
    pub(crate) fn host_groups(&self) -> Vec<(ttpu_ir::DType, Vec<usize>)> {
        let mut groups: Vec<(ttpu_ir::DType, Vec<usize>)> = Vec::new();
        for (index, ty) in self.hosts.iter().enumerate() {
            match groups.iter_mut().find(|(dtype, _)| *dtype == ty.dtype) {
                Some((_, members)) => members.push(index),
                None => groups.push((ty.dtype, vec![index])),
            }
        }
        groups
    }

    pub(crate) fn add_input(&mut self, ty: Arc<TensorType>) -> Slot {
        self.inputs.push(ty);
        Slot::Input(index_u32(self.inputs.len() - 1))
    }

    /// Appends a step and returns its index.
    pub(crate) fn push(&mut self, op: TapeOp, operands: SmallVec<[Slot; 3]>) -> u32 {
        self.steps.push(Step { op, operands });
        index_u32(self.steps.len() - 1)
    }

    /// The inputs and steps that `outputs` need.
    pub(crate) fn needed(&self, outputs: &[Slot]) -> Needed {
        let mut needed = Needed {
            inputs: vec![false; self.inputs.len()],
            hosts: vec![false; self.hosts.len()],
            steps: vec![false; self.steps.len()],
        };
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

    /// The needed part as a program returning `outputs`, its inputs and host values renumbered
    /// densely; also returns which of this tape's inputs and host values it reads, in order.
    pub(crate) fn extract(&self, needed: &Needed, outputs: &[Slot]) -> Result<(Tape, Used)> {
        let mut program = Tape::default();
        let mut used = Used::default();
        let mut input_map = vec![None; self.inputs.len()];
        for (index, ty) in self.inputs.iter().enumerate() {
            if needed.inputs[index] {
                input_map[index] = Some(program.add_input(Arc::clone(ty)));
                used.inputs.push(index);
            }
        }
        let mut host_map = vec![None; self.hosts.len()];
        for (index, ty) in self.hosts.iter().enumerate() {
            if needed.hosts[index] {
                host_map[index] = Some(program.add_host(Arc::clone(ty)));
                used.hosts.push(index);
            }
        }
        let mut step_map = vec![None; self.steps.len()];
        let map = |step_map: &[Option<Slot>], slot: Slot| {
            let mapped = match slot {
                Slot::Input(index) => input_map.get(index as usize).copied().flatten(),
                Slot::Host(index) => host_map.get(index as usize).copied().flatten(),
                Slot::Step(index, result) => match step_map.get(index as usize).copied().flatten() {
                    Some(Slot::Step(step, _)) => Some(Slot::Step(step, result)),
                    _ => None,
                },
            };
            mapped.ok_or_else(|| Error::internal(format!("{slot:?} used before it was recorded")))
        };
        for (index, step) in self.steps.iter().enumerate() {
            if !needed.steps[index] {
                continue;
            }
            let operands = step.operands.iter().map(|&slot| map(&step_map, slot)).collect::<Result<_>>()?;
            step_map[index] = Some(Slot::Step(program.push(step.op.clone(), operands), 0));
        }
        program.outputs = outputs.iter().map(|&slot| map(&step_map, slot)).collect::<Result<Vec<_>>>()?;
        Ok((program, used))
    }

    /// A 64-bit hash of everything [`Tape::same_program`] compares.
    pub(crate) fn structure_hash(&self) -> u64 {
        let mut hasher = FxHasher::default();
        hasher.write_usize(self.inputs.len());
        for ty in &self.inputs {
            ty.hash(&mut hasher);
        }
        hasher.write_usize(self.hosts.len());
        for ty in &self.hosts {
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
            && self.hosts.len() == other.hosts.len()
            && self.steps.len() == other.steps.len()
            && self.outputs == other.outputs
            && self.inputs.iter().zip(&other.inputs).all(|(a, b)| Arc::ptr_eq(a, b) || a == b)
            && self.hosts.iter().zip(&other.hosts).all(|(a, b)| Arc::ptr_eq(a, b) || a == b)
            && self.steps.iter().zip(&other.steps).all(|(a, b)| a.operands == b.operands && a.op == b.op)
    }

    /// The program as IR: each step replayed through a graph builder.
    pub(crate) fn to_graph(&self) -> Result<Graph> {
        let mut builder = GraphBuilder::new();
        let inputs: Vec<ValueId> = self.inputs.iter().map(|ty| builder.input(TensorType::clone(ty), None)).collect();
        // Each host value is sliced out of its dtype's packed input.
        let mut hosts: Vec<Option<ValueId>> = vec![None; self.hosts.len()];
        for (dtype, members) in self.host_groups() {
            let sizes: Vec<i64> = members.iter().map(|&index| element_count_of(&self.hosts[index])).collect();
            let total = sizes.iter().sum::<i64>();
            let packed = builder.input(TensorType::new(dtype, ttpu_ir::Shape::from_static(&[total])), None);
            let mut offset = 0;
            for (&index, &size) in members.iter().zip(&sizes) {
                let part = builder.slice(packed, &[offset], &[offset + size], &[1])?;
                hosts[index] = Some(builder.reshape(part, self.hosts[index].shape.clone())?);
                offset += size;
            }
        }
        let mut results: Vec<SmallVec<[ValueId; 1]>> = Vec::with_capacity(self.steps.len());
        let value = |results: &[SmallVec<[ValueId; 1]>], slot: Slot| {
            let value = match slot {
                Slot::Input(index) => inputs.get(index as usize),
                Slot::Host(index) => hosts.get(index as usize).and_then(Option::as_ref),
                Slot::Step(index, result) => results.get(index as usize).and_then(|values| values.get(result as usize)),
            };
            value.copied().ok_or_else(|| Error::internal(format!("{slot:?} used before it was recorded")))
        };
        for step in &self.steps {
            let operands =
                step.operands.iter().map(|&slot| value(&results, slot)).collect::<Result<SmallVec<[_; 3]>>>()?;
            results.push(step.op.build_results(&mut builder, &operands)?);
        }
        let outputs = self.outputs.iter().map(|&slot| value(&results, slot)).collect::<Result<Vec<_>>>()?;
        Ok(builder.finish(&outputs))
    }
}

/// Which inputs, host values and steps of a tape some outputs need.
pub(crate) struct Needed {
    inputs: Vec<bool>,
    hosts: Vec<bool>,
    steps: Vec<bool>,
}

/// Which inputs and host values of a tape a program extracted from it reads, in order.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Used {
    pub(crate) inputs: Vec<usize>,
    pub(crate) hosts: Vec<usize>,
}

/// The number of elements of a static type (a host value's: its data has that many).
fn element_count_of(ty: &TensorType) -> i64 {
    ty.shape.as_static().map_or(0, |dims| dims.iter().product())
}

impl Needed {
    fn mark(&mut self, slot: Slot) {
        match slot {
            Slot::Input(index) => self.inputs[index as usize] = true,
            Slot::Host(index) => self.hosts[index as usize] = true,
            Slot::Step(index, _) => self.steps[index as usize] = true,
        }
    }

    /// Whether every input and step is needed: the tape is the program as it stands.
    pub(crate) fn is_everything(&self) -> bool {
        self.inputs.iter().chain(&self.hosts).chain(&self.steps).all(|&needed| needed)
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
    /// The result types of a [`TapeOp::Call`] on operands of `operand_types`, checked against the
    /// graph's inputs.
    pub(crate) fn call_types(
        &mut self,
        call: &CallGraph,
        operand_types: &[&Arc<TensorType>],
    ) -> Result<SmallVec<[Arc<TensorType>; 1]>> {
        let graph = call.graph();
        if operand_types.len() != graph.inputs.len() {
            return Err(Error::CallOperands {
                message: format!("a graph of {} inputs called on {} operands", graph.inputs.len(), operand_types.len()),
            });
        }
        for (index, (&input, ty)) in graph.inputs.iter().zip(operand_types).enumerate() {
            if graph.ty(input) != &***ty {
                return Err(Error::CallOperands {
                    message: format!("operand {index} is {ty}, not {}", graph.ty(input)),
                });
            }
        }
        Ok(graph.outputs.iter().map(|&output| self.intern(graph.ty(output).clone())).collect())
    }

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

#[cfg(test)]
mod tests {
    use ttpu_ir::Shape;

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
        let sum = Slot::Step(tape.push(add(None), smallvec::smallvec![x_slot, y_slot]), 0);
        let tanh = TapeOp::FloatUnary(FloatFn::Unary(UnaryOp::Tanh));
        memo.result_type(&tanh, &[&sum_ty]).unwrap();
        let out = Slot::Step(tape.push(tanh, smallvec::smallvec![sum]), 0);
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
        other_op.steps[1].op = TapeOp::FloatUnary(FloatFn::Unary(UnaryOp::Exponential));
        let mut wider = base.clone();
        wider.inputs[0] = f32s(&mut memo, &[4, 3]);
        let mut more_outputs = base.clone();
        more_outputs.outputs.push(Slot::Step(0, 0));
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
        let dead = Slot::Step(tape.push(add(Some(1.0)), smallvec::smallvec![unused]), 0);
        let live = Slot::Step(tape.push(add(Some(2.0)), smallvec::smallvec![input]), 0);
        let needed = tape.needed(&[live]);
        assert!(!needed.is_everything());
        let (program, used) = tape.extract(&needed, &[live]).unwrap();
        assert_eq!(used, Used { inputs: vec![1], hosts: vec![] });
        assert_eq!(program.inputs.len(), 1);
        assert_eq!(program.steps.len(), 1);
        assert_eq!(program.steps[0].operands.as_slice(), &[Slot::Input(0)]);
        assert_eq!(program.steps[0].op, add(Some(2.0)));
        assert_eq!(program.outputs, vec![Slot::Step(0, 0)]);
        assert!(tape.needed(&[dead, live]).is_everything());
    }
}
