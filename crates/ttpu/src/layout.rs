//! Channels-last activations between convolutions.
//!
//! PyTorch programs keep images as `[batch, channels, spatial...]`. XLA's CPU convolutions read
//! and write `[batch, spatial..., channels]`, so in a program that keeps PyTorch's layout XLA
//! puts a transpose (a copy of the whole activation) before and after every convolution: on
//! ResNet-18 at 224x224 those copies are a large part of the time. This pass writes the
//! convolutions channels-last and carries that layout through what follows them (elementwise
//! ops, including batch norm's and the residual additions, pooling windows, padding, and
//! reductions over the spatial dims), so the data is transposed once where it enters the
//! convolution region and once where a value leaves it for an op that needs PyTorch's layout.
//!
//! Every op keeps its numbers: the same elements meet in the same ops, only their places in
//! memory differ (a reduction over several dims may add in another order, as XLA is free to
//! anyway).

use ttpu_ir::{ConvDims, Graph, GraphBuilder, Op, ValueId, Window};

use crate::error::{Error, Result};

/// `[0, 2, 3, ..., 1]`: PyTorch's channels-first layout to channels-last, for rank `rank`.
fn to_last(rank: usize) -> Vec<i64> {
    let mut order: Vec<i64> = vec![0];
    order.extend(2..rank as i64);
    order.push(1);
    order
}

/// `[0, rank - 1, 1, ..., rank - 2]`: channels-last back to channels-first.
fn from_last(rank: usize) -> Vec<i64> {
    let mut order: Vec<i64> = vec![0, rank as i64 - 1];
    order.extend(1..rank as i64 - 1);
    order
}

/// A convolution in PyTorch's layout: batch 0, features 1, spatial 2.. for input and output.
fn channels_first(dims: &ConvDims) -> bool {
    let spatial: Vec<i64> = (2..dims.input_spatial.len() as i64 + 2).collect();
    dims.input_batch == 0
        && dims.input_feature == 1
        && dims.input_spatial.as_slice() == spatial.as_slice()
        && dims.output_batch == 0
        && dims.output_feature == 1
        && dims.output_spatial.as_slice() == spatial.as_slice()
}

/// `values` permuted: element `i` of the result is `values[order[i]]`.
fn permuted<T: Copy>(values: &[T], order: &[i64]) -> Vec<T> {
    order.iter().map(|&dim| values[dim as usize]).collect()
}

/// The two layouts one value of the original graph may have in the new one.
#[derive(Clone, Copy, Default)]
struct Forms {
    /// As in the original graph.
    first: Option<ValueId>,
    /// Channels-last (`transpose(first, to_last)`).
    last: Option<ValueId>,
}

struct Pass<'g> {
    graph: &'g Graph,
    builder: GraphBuilder,
    forms: Vec<Forms>,
}

impl Pass<'_> {
    fn rank(&self, old: ValueId) -> usize {
        self.graph.ty(old).shape.rank()
    }

    fn first(&mut self, old: ValueId) -> Result<ValueId> {
        let forms = self.forms[old.index_usize()];
        if let Some(value) = forms.first {
            return Ok(value);
        }
        let last = forms.last.ok_or_else(|| bug(format!("{old} used before it is defined")))?;
        let value = self.transpose(last, &from_last(self.rank(old)))?;
        self.forms[old.index_usize()].first = Some(value);
        Ok(value)
    }

    fn last(&mut self, old: ValueId) -> Result<ValueId> {
        let forms = self.forms[old.index_usize()];
        if let Some(value) = forms.last {
            return Ok(value);
        }
        let first = forms.first.ok_or_else(|| bug(format!("{old} used before it is defined")))?;
        let value = self.transpose(first, &to_last(self.rank(old)))?;
        self.forms[old.index_usize()].last = Some(value);
        Ok(value)
    }

    fn has_last(&self, old: ValueId) -> bool {
        self.forms[old.index_usize()].last.is_some()
    }

    fn transpose(&mut self, value: ValueId, order: &[i64]) -> Result<ValueId> {
        self.builder.transpose(value, order).map_err(|error| bug(error.to_string()))
    }

    fn emit(&mut self, op: Op, operands: &[ValueId]) -> Result<ValueId> {
        let results = self.builder.op_results(op, operands).map_err(|error| bug(error.to_string()))?;
        results.first().copied().ok_or_else(|| bug("an op without results".into()))
    }

    /// Writes `node` channels-last when its operands come that way; returns whether it did.
    fn node_last(&mut self, node: &ttpu_ir::Node) -> Result<bool> {
        let Some(&result) = node.results.first() else { return Ok(false) };
        if node.results.len() != 1 {
            return Ok(false);
        }
        let rank = self.rank(result);
        let index = result.index_usize();
        match &node.op {
            Op::Convolution(dims) if channels_first(dims) && rank >= 3 => {
                let spatial: Vec<i64> = (1..rank as i64 - 1).collect();
                let last_dims = ConvDims {
                    input_batch: 0,
                    input_feature: rank as i64 - 1,
                    input_spatial: spatial.iter().copied().collect(),
                    output_batch: 0,
                    output_feature: rank as i64 - 1,
                    output_spatial: spatial.iter().copied().collect(),
                    ..dims.clone()
                };
                let input = self.last(node.operands[0])?;
                let kernel = self.first(node.operands[1])?;
                self.forms[index].last = Some(self.emit(Op::Convolution(last_dims), &[input, kernel])?);
                Ok(true)
            }
            // A transpose to PyTorch's layout of a channels-last value (a convolution written as a
            // matrix product ends that way): its channels-last form is the operand itself.
            Op::Transpose(order) if rank >= 3 && order.as_slice() == from_last(rank).as_slice() => {
                self.forms[index].last = Some(self.first(node.operands[0])?);
                Ok(true)
            }
            // And a transpose to channels-last of a value that has that form already.
            Op::Transpose(order)
                if rank >= 3 && order.as_slice() == to_last(rank).as_slice() && self.has_last(node.operands[0]) =>
            {
                self.forms[index].first = Some(self.last(node.operands[0])?);
                Ok(true)
            }
            Op::Unary(_) | Op::Binary(_) | Op::Compare(_) | Op::Select | Op::Clamp | Op::Convert(_)
                if rank >= 3 && node.operands.iter().any(|&operand| self.has_last(operand)) =>
            {
                let mut operands = Vec::with_capacity(node.operands.len());
                for &operand in &node.operands {
                    // Clamp's bounds may be scalars; every other operand has the result's shape.
                    operands.push(if self.rank(operand) == rank { self.last(operand)? } else { self.first(operand)? });
                }
                self.forms[index].last = Some(self.emit(node.op.clone(), &operands)?);
                Ok(true)
            }
            Op::ReduceWindow { kind, window } if self.has_last(node.operands[0]) => {
                let order = to_last(rank);
                let window = Window {
                    dimensions: permuted(&window.dimensions, &order).into_iter().collect(),
                    strides: permuted(&window.strides, &order).into_iter().collect(),
                    base_dilations: permuted(&window.base_dilations, &order).into_iter().collect(),
                    window_dilations: permuted(&window.window_dilations, &order).into_iter().collect(),
                    padding: permuted(&window.padding, &order).into_iter().collect(),
                };
                let operand = self.last(node.operands[0])?;
                self.forms[index].last = Some(self.emit(Op::ReduceWindow { kind: *kind, window }, &[operand])?);
                Ok(true)
            }
            Op::Pad { low, high, interior } if self.has_last(node.operands[0]) => {
                let order = to_last(rank);
                let op = Op::Pad {
                    low: permuted(low, &order).into_iter().collect(),
                    high: permuted(high, &order).into_iter().collect(),
                    interior: permuted(interior, &order).into_iter().collect(),
                };
                let operand = self.last(node.operands[0])?;
                let padding = self.first(node.operands[1])?;
                self.forms[index].last = Some(self.emit(op, &[operand, padding])?);
                Ok(true)
            }
            Op::Reduce { kind, dimensions } if self.has_last(node.operands[0]) => {
                let operand_rank = self.rank(node.operands[0]);
                let order = to_last(operand_rank);
                // Where each original dim sits channels-last.
                let mut position = vec![0i64; operand_rank];
                for (at, &dim) in order.iter().enumerate() {
                    position[dim as usize] = at as i64;
                }
                let mut reduced: Vec<i64> = dimensions.iter().map(|&dim| position[dim as usize]).collect();
                reduced.sort_unstable();
                let operand = self.last(node.operands[0])?;
                let value =
                    self.emit(Op::Reduce { kind: *kind, dimensions: reduced.iter().copied().collect() }, &[operand])?;
                // The kept dims come out in channels-last order; put them back in the original's.
                let kept: Vec<i64> = (0..operand_rank as i64).filter(|dim| !dimensions.contains(dim)).collect();
                let mut by_position = kept.clone();
                by_position.sort_by_key(|&dim| position[dim as usize]);
                let back: Vec<i64> = kept
                    .iter()
                    .map(|dim| by_position.iter().position(|other| other == dim).map_or(0, |at| at as i64))
                    .collect();
                let identity = back.iter().enumerate().all(|(at, &dim)| dim == at as i64);
                self.forms[index].first = Some(if identity { value } else { self.transpose(value, &back)? });
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

fn bug(message: String) -> Error {
    Error::Bug { message }
}

/// `graph` with its channels-first convolutions, and what follows them, channels-last; the same
/// graph when it has no such convolution.
pub(crate) fn channels_last(graph: &Graph) -> Result<Graph> {
    let convolutions = graph.nodes().any(|(_, node)| matches!(&node.op, Op::Convolution(dims) if channels_first(dims)));
    if !convolutions {
        return Ok(graph.clone());
    }
    let mut builder = GraphBuilder::new();
    builder.graph_mut().symbols = graph.symbols.clone();
    let mut forms = vec![Forms::default(); graph.value_count()];
    for &input in &graph.inputs {
        let data = graph.value(input);
        forms[input.index_usize()].first = Some(builder.input(data.ty.clone(), data.name.clone()));
    }
    let mut pass = Pass { graph, builder, forms };
    for (_, node) in graph.nodes() {
        pass.builder.set_loc(node.loc.clone());
        if pass.node_last(node)? {
            continue;
        }
        let mut operands = Vec::with_capacity(node.operands.len());
        for &operand in &node.operands {
            operands.push(pass.first(operand)?);
        }
        let results = pass.builder.op_results(node.op.clone(), &operands).map_err(|error| bug(error.to_string()))?;
        for (old, new) in node.results.iter().zip(results) {
            pass.forms[old.index_usize()].first = Some(new);
        }
    }
    let mut outputs = Vec::with_capacity(graph.outputs.len());
    for &output in &graph.outputs {
        outputs.push(pass.first(output)?);
    }
    let mut made = pass.builder.finish(&outputs);
    // Transposes made for a form nobody read.
    made.compact();
    Ok(made)
}

#[cfg(test)]
mod tests {
    use ttpu_ir::text::parse;

    use super::*;

    fn ops(graph: &Graph) -> Vec<&'static str> {
        graph.nodes().map(|(_, node)| node.op.mnemonic()).collect()
    }

    const CONV: &str = "input_batch = 0, input_feature = 1, input_spatial = [2, 3], kernel_input_feature = 1, kernel_output_feature = 0, kernel_spatial = [2, 3], output_batch = 0, output_feature = 1, output_spatial = [2, 3], strides = [1, 1], padding = [[1, 1], [1, 1]], lhs_dilation = [1, 1], rhs_dilation = [1, 1], feature_group_count = 1, batch_group_count = 1";

    #[test]
    fn two_convolutions_with_an_activation_between_transpose_only_at_the_edges() {
        let graph = parse(&format!(
            "graph @main(%0: f32[1, 4, 8, 8] \"x\", %1: f32[4, 4, 3, 3] \"k\", %2: f32[4] \"b\") -> (f32[1, 4]) {{
  %3: f32[1, 4, 8, 8] = convolution(%0, %1) {{{CONV}}}
  %4: f32[1, 4, 8, 8] = broadcast_in_dim(%2) {{dims = [1]}}
  %5: f32[1, 4, 8, 8] = add(%3, %4)
  %6: f32[1, 4, 8, 8] = tanh(%5)
  %7: f32[1, 4, 8, 8] = convolution(%6, %1) {{{CONV}}}
  %8: f32[1, 4] = reduce(%7) {{kind = max, dimensions = [2, 3]}}
  return %8
}}
"
        ))
        .unwrap();
        let made = channels_last(&graph).unwrap();
        ttpu_ir::verify(&made).unwrap();
        assert_eq!(made.signature(), graph.signature());
        let ops = ops(&made);
        // The input goes channels-last once and the bias is broadcast that way; the reduction's
        // kept dims [batch, channels] are already in order, so nothing is transposed back.
        assert_eq!(ops.iter().filter(|&&op| op == "transpose").count(), 2, "{ops:?}");
        assert_eq!(ops.iter().filter(|&&op| op == "convolution").count(), 2, "{ops:?}");
    }

    #[test]
    fn a_reduction_whose_kept_dims_change_order_is_transposed_back() {
        // Summing the batch away keeps [channels, height, width]; channels-last they come out as
        // [height, width, channels], so one transpose puts them back. Distinct sizes make a wrong
        // permutation a type error.
        let graph = parse(&format!(
            "graph @main(%0: f32[2, 4, 5, 6] \"x\", %1: f32[4, 4, 3, 3] \"k\") -> (f32[4, 5, 6]) {{
  %2: f32[2, 4, 5, 6] = convolution(%0, %1) {{{CONV}}}
  %3: f32[4, 5, 6] = reduce(%2) {{kind = sum, dimensions = [0]}}
  return %3
}}
"
        ))
        .unwrap();
        let made = channels_last(&graph).unwrap();
        ttpu_ir::verify(&made).unwrap();
        assert_eq!(made.signature(), graph.signature());
        let permutations: Vec<Vec<i64>> = made
            .nodes()
            .filter_map(|(_, node)| match &node.op {
                Op::Transpose(order) => Some(order.to_vec()),
                _ => None,
            })
            .collect();
        assert_eq!(permutations, [vec![0, 2, 3, 1], vec![2, 0, 1]]);
    }

    #[test]
    fn graphs_without_channels_first_convolutions_are_unchanged() {
        let graph = parse(
            "graph @main(%0: f32[2, 3] \"x\") -> (f32[2, 3]) {
  %1: f32[2, 3] = tanh(%0)
  return %1
}
",
        )
        .unwrap();
        assert_eq!(channels_last(&graph).unwrap(), graph);
    }
}
