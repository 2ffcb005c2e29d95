//! Loops in decompositions: a graph of its own for a `while`'s condition or body, built with the
//! same context. Decompositions whose step count the data decides (a series summed until it
//! converges, a factorization whose pivots choose the next column) run as one IR `while` rather
//! than unrolled to a bound.

use ttpu_ir::{Graph, GraphBuilder, TensorType, ValueId};

use crate::ctx::Cx;
use crate::error::Result;

/// A graph with inputs of `types` and the outputs `build` returns. `build` runs on `cx` with the
/// new graph in place of the enclosing one, which is put back either way; values of the
/// enclosing graph reach the loop only as its state.
pub(super) fn loop_graph(
    cx: &mut Cx<'_>,
    types: &[TensorType],
    build: impl FnOnce(&mut Cx<'_>, &[ValueId]) -> Result<Vec<ValueId>>,
) -> Result<Graph> {
    let mut inner = GraphBuilder::new();
    inner.graph_mut().symbols = cx.b.graph().symbols.clone();
    inner.set_loc(cx.b.loc().clone());
    let inputs: Vec<ValueId> = types.iter().map(|ty| inner.input(ty.clone(), None)).collect();
    let outer = std::mem::replace(&mut cx.b, inner);
    let outputs = build(cx, &inputs);
    let inner = std::mem::replace(&mut cx.b, outer);
    Ok(inner.finish(&outputs?))
}
