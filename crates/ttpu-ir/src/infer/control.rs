//! Control flow (`while`) and user kernels: the ops of several results.

use smallvec::SmallVec;

use super::{InferError, fail};
use crate::{DType, Graph, Op, TensorType, WhileLoop};

/// How deeply loops may nest. Passes walk a loop's graphs recursively; a bound keeps hostile input
/// from exhausting the stack (every loop is checked when it is built, so deeper ones never exist).
pub const MAX_LOOP_NESTING: usize = 32;

/// How many loops nest inside `graph` (0 for a graph without loops).
fn loop_depth(graph: &Graph) -> usize {
    graph
        .nodes()
        .filter_map(|(_, node)| match &node.op {
            Op::While(inner) => Some(1 + loop_depth(&inner.cond).max(loop_depth(&inner.body))),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// `while`: the state is the operands; `cond` maps it to one `bool[]` and `body` maps it to a
/// state of the same types, so the results have the operands' types.
pub(super) fn while_loop(
    op: &Op,
    while_loop: &WhileLoop,
    operand_types: &[&TensorType],
) -> Result<SmallVec<[TensorType; 1]>, InferError> {
    if operand_types.is_empty() {
        return fail(op, "a loop needs at least one state value");
    }
    let state: SmallVec<[TensorType; 1]> = operand_types.iter().map(|&ty| ty.clone()).collect();
    let inputs = |graph: &Graph| -> Vec<TensorType> { graph.inputs.iter().map(|&v| graph.ty(v).clone()).collect() };
    let outputs = |graph: &Graph| -> Vec<TensorType> { graph.outputs.iter().map(|&v| graph.ty(v).clone()).collect() };
    let show = |types: &[TensorType]| types.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
    for (name, graph) in [("cond", &while_loop.cond), ("body", &while_loop.body)] {
        if inputs(graph)[..] != state[..] {
            return fail(op, format!("the state is ({}) but `{name}` takes ({})", show(&state), show(&inputs(graph))));
        }
    }
    if outputs(&while_loop.body)[..] != state[..] {
        return fail(
            op,
            format!("the state is ({}) but `body` returns ({})", show(&state), show(&outputs(&while_loop.body))),
        );
    }
    let depth = loop_depth(&while_loop.cond).max(loop_depth(&while_loop.body));
    if depth >= MAX_LOOP_NESTING {
        return fail(op, format!("loops nest more than {MAX_LOOP_NESTING} deep"));
    }
    let predicate = outputs(&while_loop.cond);
    if predicate[..] != [TensorType::scalar(DType::Bool)] {
        return fail(op, format!("`cond` must return one bool[], found ({})", show(&predicate)));
    }
    Ok(state)
}

/// `kernel`: the operands must have the kernel's input types, one for one, and the results are
/// its result types. Every type is static: a kernel's module is compiled as written.
pub(super) fn kernel(
    op: &Op,
    kernel: &crate::Kernel,
    operand_types: &[&TensorType],
) -> Result<SmallVec<[TensorType; 1]>, InferError> {
    if kernel.results.is_empty() {
        return fail(op, format!("`{}` has no results", kernel.name));
    }
    if operand_types.len() != kernel.inputs.len() {
        return fail(
            op,
            format!("`{}` takes {} operands, found {}", kernel.name, kernel.inputs.len(), operand_types.len()),
        );
    }
    for (index, (&found, expected)) in operand_types.iter().zip(&kernel.inputs).enumerate() {
        if found != expected {
            return fail(op, format!("`{}` operand {index} is {found}, the kernel takes {expected}", kernel.name));
        }
    }
    if let Some(ty) = kernel.inputs.iter().chain(&kernel.results).find(|ty| !ty.shape.is_static()) {
        return fail(op, format!("`{}` has the symbolic type {ty}; kernel types are static", kernel.name));
    }
    Ok(kernel.results.iter().cloned().collect())
}
