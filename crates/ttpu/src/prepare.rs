//! Weight-only work done once, when weights are bound: a graph is split into a *preparation*
//! program, which reads only resident weights, and the per-call program, which reads the
//! preparation's results as extra inputs.
//!
//! A node is prepared when every operand is a resident weight, an earlier prepared value, a
//! constant, an iota or a broadcast of such values, at least one depends on a weight, and the node
//! does not grow data: broadcasts (and iotas and constants, which read nothing) stay in the
//! per-call program, where XLA fuses them into their users instead of reading a materialized
//! copy, and the preparation makes its own copy of those it reads. Layout changes, converts,
//! reshapes and arithmetic on weights (a convolution kernel turned to the layout the kernel
//! reads, a kernel times its folded batch-norm scale broadcast along the output features) are
//! prepared. The per-call program keeps the original inputs in their order (so aliases and
//! argument lists stay as they are) and takes the prepared values it reads after them.

use std::collections::HashMap;

use ttpu_fx::{InputRole, ModelSignature, OutputRole};
use ttpu_ir::{ConvDims, Graph, GraphBuilder, Op, ValueDef, ValueId};

use crate::error::{Error, Result};

/// A graph split by [`split`].
#[derive(Clone, Debug)]
pub(crate) struct WeightSplit {
    /// The preparation: its inputs are the weights at `prep_inputs` of the original graph, its
    /// outputs the prepared values, in the order the per-call program takes them.
    pub(crate) prep: Graph,
    /// For each input of `prep`, its index among the original graph's inputs.
    pub(crate) prep_inputs: Vec<usize>,
    /// The per-call program: the original inputs, then one input per output of `prep`.
    pub(crate) main: Graph,
}

/// Per input, whether it is a weight that stays the same from call to call: a parameter, buffer
/// or lifted constant that no call mutates.
pub(crate) fn resident_inputs(signature: &ModelSignature) -> Vec<bool> {
    let mutated = |key: &str| {
        signature.outputs.iter().any(|output| output.role == OutputRole::BufferMutation && output.key == key)
    };
    signature
        .inputs
        .iter()
        .map(|input| match input.role {
            InputRole::UserInput => false,
            InputRole::Buffer { .. } => !mutated(&input.key),
            InputRole::Parameter | InputRole::ConstantTensor => true,
        })
        .collect()
}

/// What the split knows of each value of a graph.
struct Prepared {
    /// The value is computed in the preparation (a resident weight, or a node of weight-only work).
    prepared: Vec<bool>,
    /// The preparation can make the value itself when a prepared node reads it: a constant, an
    /// iota, or a broadcast of a value it has or can make. Such values stay per call as well,
    /// where XLA fuses them into their users.
    replicable: Vec<bool>,
}

/// Marks the values of `graph` that the preparation computes, where `resident[i]` says input `i`
/// is a weight that stays the same from call to call. A node is prepared when every operand is
/// prepared or replicable, at least one depends on a weight, the node does not grow data, and a
/// node that reads a broadcast also reads a prepared value of its own result's shape (a kernel
/// times a broadcast scale is prepared; a convert of a broadcast weight would materialize the
/// expansion, so it stays per call). The optimizer's cost model (`ttpu-fuse`'s `cost.rs`) prices
/// work by the same rule.
fn mark(graph: &Graph, resident: &[bool]) -> Prepared {
    let mut prepared = vec![false; graph.value_count()];
    let mut replicable = vec![false; graph.value_count()];
    // Depends on at least one weight (and only on weights and constants).
    let mut weighty = vec![false; graph.value_count()];
    let mut expanded = vec![false; graph.value_count()];
    for (index, &input) in graph.inputs.iter().enumerate() {
        let is_resident = resident.get(index).copied().unwrap_or(false);
        prepared[input.index_usize()] = is_resident;
        weighty[input.index_usize()] = is_resident;
    }
    for (_, node) in graph.nodes() {
        let [result] = node.results[..] else { continue };
        let available =
            node.operands.iter().all(|value| prepared[value.index_usize()] || replicable[value.index_usize()]);
        let reads_weight = available && node.operands.iter().any(|value| weighty[value.index_usize()]);
        let keeps_size = !node.operands.iter().any(|value| expanded[value.index_usize()])
            || node
                .operands
                .iter()
                .any(|&value| prepared[value.index_usize()] && graph.ty(value).shape == graph.ty(result).shape);
        match node.op {
            Op::Constant(_) | Op::Iota { .. } => replicable[result.index_usize()] = true,
            Op::BroadcastInDim { .. } => {
                replicable[result.index_usize()] = available;
                weighty[result.index_usize()] = reads_weight;
                expanded[result.index_usize()] = true;
            }
            Op::Collective(_) => {}
            _ => {
                prepared[result.index_usize()] = reads_weight && keeps_size;
                weighty[result.index_usize()] = reads_weight && keeps_size;
            }
        }
    }
    Prepared { prepared, replicable }
}

/// Splits `graph`, where `resident[i]` says input `i` is a weight that stays the same from call
/// to call; `None` when no node would be prepared.
pub(crate) fn split(graph: &Graph, resident: &[bool]) -> Result<Option<WeightSplit>> {
    let bug = |message: String| Error::Bug { message };
    let Prepared { prepared, replicable } = mark(graph, resident);
    let is_input = |value: ValueId| matches!(graph.value(value).def, ValueDef::Input(_));
    if !graph.nodes().any(|(_, node)| node.results.iter().any(|&result| prepared[result.index_usize()])) {
        return Ok(None);
    }

    let mut prep = GraphBuilder::new();
    prep.graph_mut().symbols = graph.symbols.clone();
    let mut main = GraphBuilder::new();
    main.graph_mut().symbols = graph.symbols.clone();
    let mut in_prep: HashMap<ValueId, ValueId> = HashMap::new();
    let mut in_main: HashMap<ValueId, ValueId> = HashMap::new();
    let mut prep_inputs = Vec::new();
    for (index, &input) in graph.inputs.iter().enumerate() {
        let data = graph.value(input);
        in_main.insert(input, main.input(data.ty.clone(), data.name.clone()));
        if prepared[input.index_usize()] {
            in_prep.insert(input, prep.input(data.ty.clone(), data.name.clone()));
            prep_inputs.push(index);
        }
    }
    // Values of the original graph that the per-call program reads from the preparation.
    let mut prep_outputs: Vec<ValueId> = Vec::new();
    let mut from_prep = |value: ValueId,
                         main: &mut GraphBuilder,
                         in_main: &mut HashMap<ValueId, ValueId>,
                         in_prep: &HashMap<ValueId, ValueId>|
     -> Result<ValueId> {
        if let Some(&found) = in_main.get(&value) {
            return Ok(found);
        }
        let produced = *in_prep.get(&value).ok_or_else(|| bug(format!("{value} is in neither program")))?;
        prep_outputs.push(produced);
        let added = main.input(graph.ty(value).clone(), None);
        in_main.insert(value, added);
        Ok(added)
    };
    let is_prepared = |node: &ttpu_ir::Node| node.results.len() == 1 && prepared[node.results[0].index_usize()];
    // Values the per-call program reads: the outputs and the operands of the per-call nodes that
    // compute them. A broadcast that only prepared nodes read is not among them, so neither it
    // nor the prepared value it reads goes to the per-call program.
    let mut live = vec![false; graph.value_count()];
    for output in &graph.outputs {
        live[output.index_usize()] = true;
    }
    let nodes: Vec<&ttpu_ir::Node> = graph.nodes().map(|(_, node)| node).collect();
    for node in nodes.iter().rev() {
        if !is_prepared(node) && node.results.iter().any(|result| live[result.index_usize()]) {
            for operand in &node.operands {
                live[operand.index_usize()] = true;
            }
        }
    }
    for node in nodes {
        if is_prepared(node) {
            let mut operands = Vec::with_capacity(node.operands.len());
            for &operand in &node.operands {
                operands.push(replicate(graph, operand, &replicable, &mut prep, &mut in_prep)?);
            }
            prep.set_loc(node.loc.clone());
            let result = prep.op(node.op.clone(), &operands).map_err(|error| bug(error.to_string()))?;
            in_prep.insert(node.results[0], result);
            continue;
        }
        if !node.results.iter().any(|result| live[result.index_usize()]) {
            continue;
        }
        let mut operands = Vec::with_capacity(node.operands.len());
        for &operand in &node.operands {
            operands.push(from_prep(operand, &mut main, &mut in_main, &in_prep)?);
        }
        main.set_loc(node.loc.clone());
        let results = main.op_results(node.op.clone(), &operands).map_err(|error| bug(error.to_string()))?;
        for (&old, &new) in node.results.iter().zip(&results) {
            in_main.insert(old, new);
        }
    }
    let mut outputs = Vec::with_capacity(graph.outputs.len());
    for &output in &graph.outputs {
        outputs.push(from_prep(output, &mut main, &mut in_main, &in_prep)?);
    }
    debug_assert!(graph.inputs.iter().all(|&input| is_input(input)));
    let mut prep = prep.finish(&prep_outputs);
    prep.compact();
    let mut main = main.finish(&outputs);
    main.compact();
    Ok(Some(WeightSplit { prep, prep_inputs, main }))
}

/// The value `value` in the preparation: found there, or (a constant, an iota or a broadcast the
/// preparation can make) copied in with the replicable values it reads, first to last.
fn replicate(
    graph: &Graph,
    value: ValueId,
    replicable: &[bool],
    prep: &mut GraphBuilder,
    in_prep: &mut HashMap<ValueId, ValueId>,
) -> Result<ValueId> {
    let bug = |message: String| Error::Bug { message };
    // The chain of replicable producers from `value` down to one the preparation has (or a leaf).
    let mut chain = Vec::new();
    let mut next = value;
    while !in_prep.contains_key(&next) {
        if !replicable[next.index_usize()] {
            return Err(bug(format!("{next} is neither prepared nor replicable")));
        }
        let producer = graph.producer(next).ok_or_else(|| bug(format!("{next} has no node")))?;
        chain.push(producer);
        match producer.operands[..] {
            [] => break,
            [operand] => next = operand,
            _ => return Err(bug(format!("a replicable `{}` reads several values", producer.op.mnemonic()))),
        }
    }
    for producer in chain.into_iter().rev() {
        let operands: Vec<ValueId> = producer.operands.iter().map(|operand| in_prep[operand]).collect();
        prep.set_loc(producer.loc.clone());
        let copy = prep.op(producer.op.clone(), &operands).map_err(|error| bug(error.to_string()))?;
        in_prep.insert(producer.results[0], copy);
    }
    in_prep.get(&value).copied().ok_or_else(|| bug(format!("{value} was not copied")))
}

/// Turns the kernel of every convolution whose kernel the preparation computes (a resident
/// weight, or weight-only work such as a kernel times a folded scale) to the layout XLA's CPU
/// convolutions read (spatial dims, then input features, then output features: `HWIO`), so the
/// preparation does the transpose once and no call re-lays the weights out. Other convolutions
/// are left alone.
pub(crate) fn kernels_to_spatial_major(graph: &Graph, resident: &[bool]) -> Result<Graph> {
    let bug = |message: String| Error::Bug { message };
    let prepared = mark(graph, resident).prepared;
    let mut builder = GraphBuilder::new();
    builder.graph_mut().symbols = graph.symbols.clone();
    let mut map: HashMap<ValueId, ValueId> = HashMap::new();
    for &input in &graph.inputs {
        let data = graph.value(input);
        map.insert(input, builder.input(data.ty.clone(), data.name.clone()));
    }
    let mut changed = false;
    for (_, node) in graph.nodes() {
        let operands: Vec<ValueId> = node.operands.iter().map(|operand| map[operand]).collect();
        builder.set_loc(node.loc.clone());
        let op = match &node.op {
            Op::Convolution(dims) if prepared[node.operands[1].index_usize()] => {
                let mut order: Vec<i64> = dims.kernel_spatial.to_vec();
                order.push(dims.kernel_input_feature);
                order.push(dims.kernel_output_feature);
                let identity: Vec<i64> = (0..order.len() as i64).collect();
                if order == identity {
                    node.op.clone()
                } else {
                    let spatial = dims.kernel_spatial.len() as i64;
                    let kernel = builder.transpose(operands[1], &order).map_err(|error| bug(error.to_string()))?;
                    let dims = ConvDims {
                        kernel_spatial: (0..spatial).collect(),
                        kernel_input_feature: spatial,
                        kernel_output_feature: spatial + 1,
                        ..dims.clone()
                    };
                    let results = builder
                        .op_results(Op::Convolution(dims), &[operands[0], kernel])
                        .map_err(|error| bug(error.to_string()))?;
                    map.insert(node.results[0], results[0]);
                    changed = true;
                    continue;
                }
            }
            op => op.clone(),
        };
        let results = builder.op_results(op, &operands).map_err(|error| bug(error.to_string()))?;
        for (&old, &new) in node.results.iter().zip(&results) {
            map.insert(old, new);
        }
    }
    if !changed {
        return Ok(graph.clone());
    }
    let outputs: Vec<ValueId> = graph.outputs.iter().map(|output| map[output]).collect();
    Ok(builder.finish(&outputs))
}

#[cfg(test)]
mod tests {
    use ttpu_ir::text::{parse, print};

    use super::*;

    /// A linear layer: the weight's transpose and the bias's convert read weights only, the
    /// bias's broadcast grows data and the product reads the input. Prepared values come in the
    /// order the per-call program first reads them.
    const LINEAR: &str = "graph @main(%0: f32[4, 3] \"w\", %1: f16[4] \"b\", %2: f32[2, 3] \"x\") -> (f32[2, 4]) {
  %3: f32[3, 4] = transpose(%0) {permutation = [1, 0]}
  %4: f32[4] = convert(%1)
  %5: f32[4] = constant() {value = dense<2.0>}
  %6: f32[4] = multiply(%4, %5)
  %7: f32[2, 4] = broadcast_in_dim(%6) {dims = [1]}
  %8: f32[2, 4] = dot_general(%2, %3) {lhs_batch = [], rhs_batch = [], lhs_contracting = [1], rhs_contracting = [0]}
  %9: f32[2, 4] = add(%8, %7)
  return %9
}
";

    #[test]
    fn weight_only_work_moves_to_the_preparation_and_broadcasts_stay() {
        let graph = parse(LINEAR).unwrap();
        let split = split(&graph, &[true, true, false]).unwrap().expect("something is prepared");
        assert_eq!(split.prep_inputs, [0, 1]);
        assert_eq!(
            print(&split.prep),
            "graph @main(%0: f32[4, 3] \"w\", %1: f16[4] \"b\") -> (f32[4], f32[3, 4]) {
  %2: f32[3, 4] = transpose(%0) {permutation = [1, 0]}
  %3: f32[4] = convert(%1)
  %4: f32[4] = constant() {value = dense<2.0>}
  %5: f32[4] = multiply(%3, %4)
  return %5, %2
}
"
        );
        assert_eq!(
            print(&split.main),
            "graph @main(%0: f32[4, 3] \"w\", %1: f16[4] \"b\", %2: f32[2, 3] \"x\", %3: f32[4], %4: f32[3, 4]) -> (f32[2, 4]) {
  %5: f32[2, 4] = broadcast_in_dim(%3) {dims = [1]}
  %6: f32[2, 4] = dot_general(%2, %4) {lhs_batch = [], rhs_batch = [], lhs_contracting = [1], rhs_contracting = [0]}
  %7: f32[2, 4] = add(%6, %5)
  return %7
}
"
        );
    }

    #[test]
    fn inputs_that_calls_change_are_not_prepared() {
        let graph = parse(LINEAR).unwrap();
        // The weight is mutated by calls (or is an input): only the bias's work is prepared.
        let bias_only = split(&graph, &[false, true, false]).unwrap().expect("the bias is prepared");
        assert_eq!(bias_only.prep_inputs, [1]);
        assert_eq!(bias_only.prep.outputs.len(), 1);
        assert!(bias_only.main.nodes().any(|(_, node)| matches!(node.op, Op::Transpose(_))));
        assert!(split(&graph, &[false, false, false]).unwrap().is_none(), "nothing reads only weights");
    }

    #[test]
    fn weight_kernels_turn_spatial_major_and_move_to_the_preparation() {
        let graph = parse(
            "graph @main(%0: f32[1, 2, 5, 5] \"x\", %1: f32[3, 2, 3, 3] \"k\") -> (f32[1, 3, 3, 3]) {
  %2: f32[1, 3, 3, 3] = convolution(%0, %1) {input_batch = 0, input_feature = 1, input_spatial = [2, 3], kernel_input_feature = 1, kernel_output_feature = 0, kernel_spatial = [2, 3], output_batch = 0, output_feature = 1, output_spatial = [2, 3], strides = [1, 1], padding = [[0, 0], [0, 0]], lhs_dilation = [1, 1], rhs_dilation = [1, 1], feature_group_count = 1, batch_group_count = 1}
  return %2
}
",
        )
        .unwrap();
        let turned = kernels_to_spatial_major(&graph, &[false, true]).unwrap();
        let halves = split(&turned, &[false, true]).unwrap().expect("the kernel's transpose is prepared");
        let (_, transpose) = halves.prep.nodes().next().unwrap();
        assert!(matches!(&transpose.op, Op::Transpose(order) if order[..] == [2, 3, 1, 0]));
        let (_, conv) = halves.main.nodes().next().unwrap();
        let Op::Convolution(dims) = &conv.op else { panic!("{}", print(&halves.main)) };
        assert_eq!(
            (dims.kernel_spatial.to_vec(), dims.kernel_input_feature, dims.kernel_output_feature),
            (vec![0, 1], 2, 3)
        );
        // A kernel that calls change is left as it is.
        assert_eq!(kernels_to_spatial_major(&graph, &[false, false]).unwrap(), graph);
    }

    /// With fast-math, an inference batch norm folds into the convolution before it: the scaled
    /// kernel is computed by the preparation (with its own copy of the scale's broadcast), and
    /// the per-call program has no multiply over the activations left, only the convolution and
    /// one broadcast add.
    #[test]
    fn folded_batch_norm_scales_are_prepared() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/cnn/model.fx");
        let source = std::fs::read_to_string(path).expect("the cnn fixture is committed");
        let fuse = ttpu_fuse::FuseOptions { fast_math: true, ..ttpu_fuse::FuseOptions::default() };
        let options = crate::CompileOptions { fuse: Some(fuse), ..crate::CompileOptions::default() };
        let module = crate::Compiler::new().import(&source, path, &options).expect("the fixture imports");
        let resident = resident_inputs(&module.signature);
        let halves = split(&module.graph, &resident).expect("splits").expect("the kernel's scale is prepared");
        let activation =
            |graph: &Graph, value: ValueId| graph.ty(value).rank() == 4 && graph.ty(value).shape[0] == 2.into();
        let per_call_scales = halves
            .main
            .nodes()
            .filter(|(_, node)| matches!(node.op, Op::Binary(ttpu_ir::BinaryOp::Multiply)))
            .filter(|(_, node)| activation(&halves.main, node.results[0]))
            .count();
        // The average pool's division by 4 becomes a product with fast-math; no other product
        // over activations is left.
        assert_eq!(per_call_scales, 1, "{}", print(&halves.main));
        let kernel_scales = halves
            .prep
            .nodes()
            .filter(|(_, node)| matches!(node.op, Op::Binary(ttpu_ir::BinaryOp::Multiply)))
            .filter(|(_, node)| halves.prep.ty(node.results[0]).shape.as_static().as_deref() == Some(&[8, 3, 3, 3][..]))
            .count();
        assert_eq!(kernel_scales, 1, "{}", print(&halves.prep));
    }
}
