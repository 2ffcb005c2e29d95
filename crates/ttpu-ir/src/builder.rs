//! `GraphBuilder`: the only way to add nodes, one method per op.
//!
//! Every method runs the op's inference, so a value without a type cannot exist. Methods return
//! [`InferError`] when the operands do not fit; frontends wrap it with their own location.

use smallvec::SmallVec;

use crate::infer::{InferError, infer};
use crate::{
    BinaryOp, Collective, CompareDirection, ConvDims, DType, Dim, DotDims, GatherDims, Graph, Literal, Loc, Op,
    ReduceKind, RngAlgorithm, ScatterDims, Shape, TensorType, UnaryOp, ValueId, Window,
};

/// Builds a [`Graph`] node by node.
#[derive(Debug, Default)]
pub struct GraphBuilder {
    graph: Graph,
    loc: Loc,
}

type Built = Result<ValueId, InferError>;

impl GraphBuilder {
    /// A builder for an empty graph.
    pub fn new() -> GraphBuilder {
        GraphBuilder::default()
    }

    /// A builder that appends to `graph`.
    pub fn from_graph(graph: Graph) -> GraphBuilder {
        GraphBuilder { graph, loc: Loc::default() }
    }

    /// Sets the location given to every node built from now on.
    pub fn set_loc(&mut self, loc: Loc) {
        self.loc = loc;
    }

    /// The location given to the nodes built next.
    pub fn loc(&self) -> &Loc {
        &self.loc
    }

    /// The graph so far.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The graph so far, for declaring symbols.
    pub fn graph_mut(&mut self) -> &mut Graph {
        &mut self.graph
    }

    /// The type of `value`.
    pub fn ty(&self, value: ValueId) -> &TensorType {
        self.graph.ty(value)
    }

    /// Appends a graph input.
    pub fn input(&mut self, ty: TensorType, name: Option<String>) -> ValueId {
        self.graph.add_input(ty, name)
    }

    /// Sets the outputs and returns the graph.
    pub fn finish(mut self, outputs: &[ValueId]) -> Graph {
        self.graph.outputs = outputs.into();
        self.graph
    }

    /// Appends `op` on `operands`, inferring its single result type. An op of several results
    /// (`while`) goes through [`GraphBuilder::op_results`].
    pub fn op(&mut self, op: Op, operands: &[ValueId]) -> Built {
        if matches!(op, Op::While(_)) {
            return Err(InferError {
                op: op.mnemonic(),
                message: "has one result per operand; use `op_results`".into(),
            });
        }
        if let Op::Kernel(kernel) = &op
            && kernel.results.len() != 1
        {
            return Err(InferError {
                op: op.mnemonic(),
                message: format!("`{}` has {} results; use `op_results`", kernel.name, kernel.results.len()),
            });
        }
        Ok(self.op_results(op, operands)?[0])
    }

    /// Appends `op` on `operands`, inferring every result type; returns the results in order.
    pub fn op_results(&mut self, op: Op, operands: &[ValueId]) -> Result<SmallVec<[ValueId; 1]>, InferError> {
        if let Some(unknown) = operands.iter().find(|value| value.index_usize() >= self.graph.value_count()) {
            return Err(InferError { op: op.mnemonic(), message: format!("operand {unknown} is not in this graph") });
        }
        let result_types = {
            let types: SmallVec<[&TensorType; 4]> = operands.iter().map(|&value| self.graph.ty(value)).collect();
            infer(&op, &types)?
        };
        let node = self.graph.push_node(op, operands, result_types, self.loc.clone());
        Ok(self.graph.node(node).results.clone())
    }

    /// Appends the nodes of `graph` with its inputs bound to `args` (one per input, of the input's
    /// type) and returns the values of its outputs: a call of `graph`, inlined. Each node is built
    /// again, so inference checks it here too; locations are kept.
    pub fn inline(&mut self, graph: &Graph, args: &[ValueId]) -> Result<SmallVec<[ValueId; 4]>, InferError> {
        let mismatch = |message: String| InferError { op: "inline", message };
        if args.len() != graph.inputs.len() {
            return Err(mismatch(format!("{} arguments for {} inputs", args.len(), graph.inputs.len())));
        }
        let mut values: Vec<Option<ValueId>> = vec![None; graph.value_count()];
        for (&input, &arg) in graph.inputs.iter().zip(args) {
            if arg.index_usize() >= self.graph.value_count() || self.graph.ty(arg) != graph.ty(input) {
                return Err(mismatch(format!(
                    "argument {arg} does not have the type {} of its input",
                    graph.ty(input)
                )));
            }
            values[input.index_usize()] = Some(arg);
        }
        let lookup = |values: &[Option<ValueId>], value: ValueId| {
            values[value.index_usize()].ok_or_else(|| mismatch(format!("{value} is used before it is defined")))
        };
        let saved = std::mem::take(&mut self.loc);
        for (_, node) in graph.nodes() {
            let operands =
                node.operands.iter().map(|&value| lookup(&values, value)).collect::<Result<SmallVec<[_; 4]>, _>>();
            self.loc = node.loc.clone();
            let results = operands.and_then(|operands| self.op_results(node.op.clone(), &operands));
            let results = match results {
                Ok(results) => results,
                Err(error) => {
                    self.loc = saved;
                    return Err(error);
                }
            };
            for (&old, new) in node.results.iter().zip(results) {
                values[old.index_usize()] = Some(new);
            }
        }
        self.loc = saved;
        graph.outputs.iter().map(|&value| lookup(&values, value)).collect()
    }

    /// `while(state)`: runs `body` on the state while `cond` of it holds; the final state.
    pub fn while_loop(
        &mut self,
        cond: Graph,
        body: Graph,
        state: &[ValueId],
    ) -> Result<SmallVec<[ValueId; 1]>, InferError> {
        self.op_results(Op::While(Box::new(crate::WhileLoop { cond, body })), state)
    }

    /// A call of the user kernel `kernel` on `operands` (of its input types): its results.
    pub fn kernel(
        &mut self,
        kernel: std::sync::Arc<crate::Kernel>,
        operands: &[ValueId],
    ) -> Result<SmallVec<[ValueId; 1]>, InferError> {
        self.op_results(Op::Kernel(kernel), operands)
    }

    /// A constant tensor.
    pub fn constant(&mut self, literal: Literal) -> ValueId {
        self.op(Op::Constant(literal), &[]).expect("a constant always has a type")
    }

    /// The positions that stably sort `operand` along `dimension`.
    pub fn argsort(&mut self, operand: ValueId, dimension: i64, descending: bool) -> Built {
        self.op(Op::ArgSort { dimension, descending }, &[operand])
    }

    /// The size of dim `dimension` of `operand`, as an `i64` scalar.
    pub fn dim_size(&mut self, operand: ValueId, dimension: i64) -> Built {
        self.op(Op::DimSize(dimension), &[operand])
    }

    /// A collective across the replicas of a replicated program.
    pub fn collective(&mut self, collective: Collective, operand: ValueId) -> Built {
        self.op(Op::Collective(collective), &[operand])
    }

    /// `iota` counting along `dimension`.
    pub fn iota(&mut self, ty: TensorType, dimension: i64) -> Built {
        self.op(Op::Iota { dimension, dtype: ty.dtype, shape: ty.shape }, &[])
    }

    /// An elementwise unary op.
    pub fn unary(&mut self, op: UnaryOp, operand: ValueId) -> Built {
        self.op(Op::Unary(op), &[operand])
    }

    /// An elementwise binary op on operands of one type.
    pub fn binary(&mut self, op: BinaryOp, lhs: ValueId, rhs: ValueId) -> Built {
        self.op(Op::Binary(op), &[lhs, rhs])
    }

    /// An elementwise comparison.
    pub fn compare(&mut self, direction: CompareDirection, lhs: ValueId, rhs: ValueId) -> Built {
        self.op(Op::Compare(direction), &[lhs, rhs])
    }

    /// `select(pred, on_true, on_false)`.
    pub fn select(&mut self, pred: ValueId, on_true: ValueId, on_false: ValueId) -> Built {
        self.op(Op::Select, &[pred, on_true, on_false])
    }

    /// `clamp(min, operand, max)`.
    pub fn clamp(&mut self, min: ValueId, operand: ValueId, max: ValueId) -> Built {
        self.op(Op::Clamp, &[min, operand, max])
    }

    /// Elementwise conversion.
    pub fn convert(&mut self, operand: ValueId, dtype: DType) -> Built {
        self.op(Op::Convert(dtype), &[operand])
    }

    /// Reinterprets the bits of `operand` as `dtype` (see [`Op::BitcastConvert`] for the shape).
    pub fn bitcast_convert(&mut self, operand: ValueId, dtype: DType) -> Built {
        self.op(Op::BitcastConvert(dtype), &[operand])
    }

    /// The real part of a complex `operand`.
    pub fn real(&mut self, operand: ValueId) -> Built {
        self.op(Op::Real, &[operand])
    }

    /// The imaginary part of a complex `operand`.
    pub fn imag(&mut self, operand: ValueId) -> Built {
        self.op(Op::Imag, &[operand])
    }

    /// The complex number `re + i*im` of two `f32` (or `f64`) operands of one shape.
    pub fn complex(&mut self, re: ValueId, im: ValueId) -> Built {
        self.op(Op::Complex, &[re, im])
    }

    /// A Fourier transform of the trailing `length.len()` dims (see [`Op::Fft`]).
    pub fn fft(&mut self, operand: ValueId, kind: crate::FftType, length: &[i64]) -> Built {
        self.op(Op::Fft { kind, length: length.into() }, &[operand])
    }

    /// Row-major reshape.
    pub fn reshape(&mut self, operand: ValueId, shape: Shape) -> Built {
        self.op(Op::Reshape(shape), &[operand])
    }

    /// Dim permutation.
    pub fn transpose(&mut self, operand: ValueId, permutation: &[i64]) -> Built {
        self.op(Op::Transpose(permutation.into()), &[operand])
    }

    /// Broadcast with an explicit dim map.
    pub fn broadcast_in_dim(&mut self, operand: ValueId, dims: &[i64], shape: Shape) -> Built {
        self.op(Op::BroadcastInDim { dims: dims.into(), shape }, &[operand])
    }

    /// Strided slice.
    pub fn slice(&mut self, operand: ValueId, start: &[i64], limit: &[i64], strides: &[i64]) -> Built {
        let limit = limit.iter().map(|&end| Dim::Static(end)).collect();
        self.op(Op::Slice { start: start.into(), limit, strides: strides.into() }, &[operand])
    }

    /// A strided slice whose limits may be symbolic.
    pub fn slice_to(&mut self, operand: ValueId, start: &[i64], limit: &[Dim], strides: &[i64]) -> Built {
        self.op(Op::Slice { start: start.into(), limit: limit.into(), strides: strides.into() }, &[operand])
    }

    /// Concatenation along `dimension`.
    pub fn concatenate(&mut self, operands: &[ValueId], dimension: i64) -> Built {
        self.op(Op::Concatenate(dimension), operands)
    }

    /// Edge and interior padding with the scalar `value`.
    pub fn pad(&mut self, operand: ValueId, value: ValueId, low: &[i64], high: &[i64], interior: &[i64]) -> Built {
        self.op(Op::Pad { low: low.into(), high: high.into(), interior: interior.into() }, &[operand, value])
    }

    /// Generalised matrix product.
    pub fn dot_general(&mut self, lhs: ValueId, rhs: ValueId, dims: DotDims) -> Built {
        self.op(Op::DotGeneral(dims), &[lhs, rhs])
    }

    /// Reduction over `dimensions`.
    pub fn reduce(&mut self, operand: ValueId, kind: ReduceKind, dimensions: &[i64]) -> Built {
        self.op(Op::Reduce { kind, dimensions: dimensions.into() }, &[operand])
    }

    /// Sliding-window reduction.
    pub fn reduce_window(&mut self, operand: ValueId, kind: ReduceKind, window: Window) -> Built {
        self.op(Op::ReduceWindow { kind, window }, &[operand])
    }

    /// Convolution.
    pub fn convolution(&mut self, input: ValueId, kernel: ValueId, dims: ConvDims) -> Built {
        self.op(Op::Convolution(dims), &[input, kernel])
    }

    /// Gather.
    pub fn gather(&mut self, operand: ValueId, indices: ValueId, dims: GatherDims) -> Built {
        self.op(Op::Gather(dims), &[operand, indices])
    }

    /// Scatter.
    pub fn scatter(&mut self, operand: ValueId, indices: ValueId, updates: ValueId, dims: ScatterDims) -> Built {
        self.op(Op::Scatter(dims), &[operand, indices, updates])
    }

    /// Random bits of type `ty` (`u64`, static shape) from a `u64` `state`.
    pub fn rng_bit_generator(&mut self, algorithm: RngAlgorithm, state: ValueId, ty: TensorType) -> Built {
        self.op(Op::RngBitGenerator { algorithm, dtype: ty.dtype, shape: ty.shape }, &[state])
    }
}
