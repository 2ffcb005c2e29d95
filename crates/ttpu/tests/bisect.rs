//! The accuracy mode: fixtures without a fault report none; a planted fault (a rewrite that
//! scales one node's value after the optimizer) is found at that node, with its `.fx` line, and
//! PyTorch's intermediate values serve as a second reference.

mod common;

use std::sync::Arc;

use ttpu::bisect::{BisectOptions, Bisection, bisect};
use ttpu::{TensorMap, read_safetensors};
use ttpu_ir::{BinaryOp, Graph, GraphBuilder, Literal, Scalar, ValueId};

fn data(name: &str) -> (String, String, TensorMap, TensorMap) {
    let dir = common::fixtures_dir().join(name);
    let source = std::fs::read_to_string(dir.join("model.fx")).unwrap();
    let weights = match dir.join("weights.safetensors") {
        path if path.is_file() => read_safetensors(&path).unwrap(),
        _ => TensorMap::new(),
    };
    let inputs = read_safetensors(&dir.join("inputs.safetensors")).unwrap();
    (source, common::relative_model_path(name), weights, inputs)
}

fn run(name: &str, options: &BisectOptions) -> Bisection {
    let (source, path, weights, inputs) = data(name);
    bisect(common::session(), &source, &path, &weights, &inputs, options).unwrap()
}

/// The graph with the value of `.fx` node `node` (its last IR value) scaled by `factor` for every
/// use after it: a wrong op at that node.
fn scale_node(graph: &Graph, node: &str, factor: f64) -> Graph {
    let target = graph
        .nodes()
        .filter(|(_, each)| each.loc.name.as_deref() == Some(node) && each.results.len() == 1)
        .last()
        .map(|(_, each)| each.results[0])
        .unwrap_or_else(|| panic!("no node `{node}` after the optimizer"));
    let mut b = GraphBuilder::new();
    b.graph_mut().symbols = graph.symbols.clone();
    let mut map: Vec<Option<ValueId>> = vec![None; graph.value_count()];
    for &input in &graph.inputs {
        let data = graph.value(input);
        map[input.index_usize()] = Some(b.input(data.ty.clone(), data.name.clone()));
    }
    for (_, each) in graph.nodes() {
        b.set_loc(each.loc.clone());
        let operands: Vec<ValueId> = each.operands.iter().map(|value| map[value.index_usize()].unwrap()).collect();
        let results = b.op_results(each.op.clone(), &operands).unwrap();
        for (&old, new) in each.results.iter().zip(results) {
            map[old.index_usize()] = Some(new);
        }
        if each.results.first() == Some(&target) {
            let value = map[target.index_usize()].unwrap();
            let ty = b.ty(value).clone();
            let dims = ty.shape.as_static().unwrap();
            let scale = b.constant(Literal::splat(ty.dtype, &dims, Scalar::Float(factor)));
            map[target.index_usize()] = Some(b.binary(BinaryOp::Multiply, value, scale).unwrap());
        }
    }
    let outputs: Vec<ValueId> = graph.outputs.iter().map(|value| map[value.index_usize()].unwrap()).collect();
    b.finish(&outputs)
}

#[test]
fn models_without_a_fault_report_none() {
    for (name, at_least) in [("mlp", 6), ("gpt2_block", 40), ("cnn", 10)] {
        let found = run(name, &BisectOptions::default());
        assert_eq!(found.first, None, "{name}");
        assert!(found.compared >= at_least, "{name}: {} nodes compared", found.compared);
    }
}

#[test]
fn a_planted_fault_is_found_at_its_node_with_its_line() {
    for (name, node) in [("mlp", "relu"), ("gpt2_block", "_softmax"), ("gpt2_block", "gelu"), ("cnn", "relu")] {
        let node_name = node.to_owned();
        let transform: ttpu::bisect::Transform = Arc::new(move |graph| Ok(scale_node(graph, &node_name, 1.01)));
        let found = run(name, &BisectOptions { transform: Some(transform), ..BisectOptions::default() });
        let first = found.first.unwrap_or_else(|| panic!("{name}: no departure found"));
        assert_eq!(first.node, node, "{name}");
        let (source, path, _, _) = data(name);
        let line = first.line.expect("a line") as usize;
        let text = source.lines().nth(line - 1).unwrap();
        assert!(text.contains(&format!("{node}: ")), "{name}: line {line} is `{text}`");
        assert!(first.origin.ends_with(&format!("@ {path}:{line}")), "{}", first.origin);
        assert!(first.parity.max_rel > 5e-3 && first.parity.max_rel < 2e-2, "{:?}", first.parity);
    }
}

#[test]
fn a_fault_below_the_tolerance_is_not_reported() {
    let transform: ttpu::bisect::Transform = Arc::new(|graph| Ok(scale_node(graph, "relu", 1.0 + 1e-5)));
    let found = run("mlp", &BisectOptions { transform: Some(transform), ..BisectOptions::default() });
    assert_eq!(found.first, None);
}
