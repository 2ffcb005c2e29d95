//! The extraction cost: bytes moved plus flops, per dtype.
//!
//! A node costs the bytes it reads and writes, plus an estimate of its arithmetic, plus one so that
//! fewer ops win ties. A splat constant costs one element, since lowering keeps one value. Symbolic
//! dims count as [`SYMBOL_SIZE`]. When some input is resident (`FuseOptions::resident_inputs`), a
//! node whose operands are all resident (weights and constants, at least one weight) costs only
//! the one: the driver runs it once, at load, so the cost is what every call pays. Costs add up the operand trees with saturating arithmetic, so the
//! cost is monotonic in every operand and [`Cost::INFINITE`] is a real ceiling, never a wrap-around.

use egg::{CostFunction, Id, Language};
use smallvec::SmallVec;
use ttpu_ir::{BinaryOp, Dim, Graph, Op, TensorType, UnaryOp, infer};

use crate::analysis::FuseGraph;
use crate::lang::{FNode, Head};

/// The size assumed for a symbolic dim.
const SYMBOL_SIZE: u64 = 64;

/// A saturating cost; `INFINITE` absorbs everything added to it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Cost(u64);

impl Cost {
    /// The ceiling: never chosen over a finite cost.
    pub(crate) const INFINITE: Cost = Cost(u64::MAX);

    fn add(self, other: Cost) -> Cost {
        Cost(self.0.saturating_add(other.0))
    }
}

fn elements(ty: &TensorType) -> u64 {
    ty.shape.dims().iter().fold(1u64, |acc, dim| {
        let size = match dim {
            Dim::Static(size) => u64::try_from(*size).unwrap_or(0),
            Dim::Sym(_) | Dim::Expr(_) => SYMBOL_SIZE,
        };
        acc.saturating_mul(size)
    })
}

fn bytes(ty: &TensorType) -> u64 {
    elements(ty).saturating_mul(ty.dtype.byte_size() as u64)
}

/// Flops per result element of an elementwise op.
fn unary_flops(op: UnaryOp) -> u64 {
    match op {
        UnaryOp::Abs | UnaryOp::Negate | UnaryOp::Sign | UnaryOp::Not | UnaryOp::IsFinite => 1,
        UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::RoundNearestEven | UnaryOp::RoundNearestAfz => 1,
        _ => 8,
    }
}

/// Facts about one operand of a node, for [`done_once`].
#[derive(Clone, Copy)]
struct OperandFacts<'a> {
    /// Computed from weights and constants alone.
    resident: bool,
    /// Reads a weight.
    weighty: bool,
    /// A broadcast (which stays per call).
    expanded: bool,
    ty: &'a TensorType,
}

/// Whether `op` over these operands is work the driver's load-time split does once, mirroring
/// its rule: every operand is resident, one reads a weight, and a node that reads a broadcast also
/// reads a weight of its own result's type (a kernel times a broadcast scale is prepared; a
/// convert of a broadcast weight would materialize the expansion, so it stays per call). A
/// broadcast of a weight counts too: the preparation makes its own copy where it needs one, and
/// XLA fuses it into its per-call users. Collectives and loops run on every call.
fn done_once(op: &Op, operands: &[OperandFacts<'_>], result: &TensorType) -> bool {
    if operands.is_empty()
        || matches!(op, Op::Collective(_) | Op::While(_) | Op::Kernel(_))
        || !operands.iter().all(|operand| operand.resident)
        || !operands.iter().any(|operand| operand.weighty)
    {
        return false;
    }
    matches!(op, Op::BroadcastInDim { .. })
        || !operands.iter().any(|operand| operand.expanded)
        || operands.iter().any(|operand| operand.weighty && !operand.expanded && operand.ty.shape == result.shape)
}

/// The cost of `node` alone, without its operands.
fn own_cost(egraph: &FuseGraph, node: &FNode) -> Cost {
    let (op, index) = match &node.head {
        Head::Input(_) => return Cost(0),
        Head::Op(key) => (key.op(), 0),
        Head::Result(index, key) => (key.op(), *index as usize),
    };
    let operand_types: SmallVec<[&TensorType; 4]> = node.children.iter().map(|&id| &egraph[id].data.ty).collect();
    let Ok(result) = infer(op, &operand_types) else { return Cost::INFINITE };
    if egraph.analysis.prepares() && matches!(node.head, Head::Op(_)) {
        let operands: SmallVec<[OperandFacts<'_>; 4]> = node
            .children
            .iter()
            .map(|&id| {
                let data = &egraph[id].data;
                OperandFacts { resident: data.resident, weighty: data.weighty, expanded: data.expanded, ty: &data.ty }
            })
            .collect();
        if done_once(op, &operands, &result[0]) {
            return Cost(1);
        }
    }
    result.get(index).map_or(Cost::INFINITE, |result| op_cost(op, &operand_types, result))
}

/// The cost of one op with these operand and (first) result types.
fn op_cost(op: &Op, operand_types: &[&TensorType], result: &TensorType) -> Cost {
    let written = match op {
        Op::Constant(literal) if literal.len() > 1 && literal.splat_value().is_some() => {
            literal.dtype().byte_size() as u64
        }
        _ => bytes(result),
    };
    let read = operand_types.iter().fold(0u64, |acc, ty| acc.saturating_add(bytes(ty)));
    let flops = match op {
        Op::Unary(unary) => elements(result).saturating_mul(unary_flops(*unary)),
        // Division and the transcendental binary ops take several cycles per element.
        Op::Binary(BinaryOp::Divide | BinaryOp::Remainder | BinaryOp::Power | BinaryOp::Atan2) => {
            elements(result).saturating_mul(4)
        }
        Op::Binary(_) | Op::Compare(_) | Op::Select | Op::Clamp | Op::Convert(_) => elements(result),
        Op::BitcastConvert(_) | Op::Real | Op::Imag | Op::Complex => elements(result),
        // About n log2 n butterfly steps per transformed line; a rough count is enough to price it
        // above any elementwise op.
        Op::Fft { length, .. } => {
            let n: u64 = length.iter().map(|&size| u64::try_from(size).unwrap_or(1)).product();
            elements(result).saturating_mul(u64::from(64 - n.leading_zeros()).max(1)).saturating_mul(4)
        }
        Op::Reduce { .. } | Op::ReduceWindow { .. } => elements(operand_types[0]),
        Op::DotGeneral(dims) => {
            let contracted = dims.lhs_contracting.iter().fold(1u64, |acc, &dim| {
                let size = match &operand_types[0].shape[dim as usize] {
                    Dim::Static(size) => u64::try_from(*size).unwrap_or(0),
                    Dim::Sym(_) | Dim::Expr(_) => SYMBOL_SIZE,
                };
                acc.saturating_mul(size)
            });
            elements(result).saturating_mul(contracted).saturating_mul(2)
        }
        Op::Convolution(_) => elements(result).saturating_mul(elements(operand_types[1])).saturating_mul(2),
        _ => 0,
    };
    Cost(1).add(Cost(written)).add(Cost(read)).add(Cost(flops))
}

/// The cost of a whole graph, each node counted once, with inputs resident as `resident_inputs`
/// says (work on weights costs one per node, as in extraction).
///
/// Extraction adds up operand trees, so a value used twice counts twice there; this is the cost the
/// graph really has, used to check that extraction never made it more expensive.
pub(crate) fn graph_cost(graph: &Graph, resident_inputs: &[bool]) -> u64 {
    let prepares = resident_inputs.contains(&true);
    let mut facts: Vec<(bool, bool, bool)> = vec![(false, false, false); graph.value_count()];
    for (index, &input) in graph.inputs.iter().enumerate() {
        let resident = resident_inputs.get(index).copied().unwrap_or(false);
        facts[input.index_usize()] = (resident, resident, false);
    }
    graph.nodes().fold(0u64, |acc, (_, node)| {
        let operands: SmallVec<[OperandFacts<'_>; 4]> = node
            .operands
            .iter()
            .map(|&value| {
                let (resident, weighty, expanded) = facts[value.index_usize()];
                OperandFacts { resident, weighty, expanded, ty: graph.ty(value) }
            })
            .collect();
        let result = graph.ty(node.results[0]);
        // As the analysis has it: a constant is resident, a loop's results never are.
        if let [value] = node.results[..]
            && !matches!(node.op, Op::While(_) | Op::Kernel(_))
        {
            let resident = operands.iter().all(|operand| operand.resident);
            let weighty = resident && operands.iter().any(|operand| operand.weighty);
            facts[value.index_usize()] = (resident, weighty, matches!(node.op, Op::BroadcastInDim { .. }));
        }
        if prepares && done_once(&node.op, &operands, result) {
            return acc.saturating_add(1);
        }
        let operand_types: SmallVec<[&TensorType; 4]> = operands.iter().map(|operand| operand.ty).collect();
        acc.saturating_add(op_cost(&node.op, &operand_types, result).0)
    })
}

/// The cost function handed to egg's extractor.
pub(crate) struct FuseCost<'a> {
    pub(crate) egraph: &'a FuseGraph,
}

impl CostFunction<FNode> for FuseCost<'_> {
    type Cost = Cost;

    fn cost<C>(&mut self, enode: &FNode, mut costs: C) -> Cost
    where
        C: FnMut(Id) -> Cost,
    {
        enode.fold(own_cost(self.egraph, enode), |total, child| total.add(costs(child)))
    }
}
