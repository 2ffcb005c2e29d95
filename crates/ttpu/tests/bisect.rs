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

#[test]
fn pytorchs_intermediate_values_are_a_second_reference() {
    let intermediates = read_safetensors(&common::fixtures_dir().join("intermediates/gpt2_block.safetensors")).unwrap();
    let options = BisectOptions { intermediates: Some(intermediates.clone()), ..BisectOptions::default() };
    let clean = run("gpt2_block", &options);
    assert_eq!((clean.first.clone(), clean.first_from_pytorch.clone()), (None, None));
    assert!(clean.compared_with_pytorch >= 40, "{} nodes compared with PyTorch", clean.compared_with_pytorch);
    let transform: ttpu::bisect::Transform = Arc::new(|graph| Ok(scale_node(graph, "gelu", 1.01)));
    let faulty = run("gpt2_block", &BisectOptions { transform: Some(transform), ..options });
    assert_eq!(faulty.first_from_pytorch.map(|departure| departure.node).as_deref(), Some("gelu"));
    // A value of the wrong shape is an error naming the node, never a silent skip.
    let mut wrong = intermediates;
    wrong.insert("gelu".into(), ttpu::HostTensor::new(ttpu::DType::F32, vec![1], vec![0; 4]).unwrap());
    let (source, path, weights, inputs) = data("gpt2_block");
    let options = BisectOptions { intermediates: Some(wrong), ..BisectOptions::default() };
    let error = bisect(common::session(), &source, &path, &weights, &inputs, &options).unwrap_err();
    assert_eq!(error.to_string(), "bisect: PyTorch's value of `gelu` is f32[1], the node is f32[2, 8, 128]");
}

#[test]
fn the_cli_prints_the_node_its_line_and_the_error() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_ttpu"))
        .args(["parity", "--bisect", "fixtures/gpt2_block/model.fx", "--no-cache"])
        .args([
            "--weights",
            "fixtures/gpt2_block/weights.safetensors",
            "--inputs",
            "fixtures/gpt2_block/inputs.safetensors",
        ])
        .args(["--intermediates", "fixtures/intermediates/gpt2_block.safetensors"])
        .current_dir(&root)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.starts_with("bisect (rtol 1e-3, atol 1e-4): "), "{stdout}");
    assert!(stdout.contains("nodes of the optimized program compared with an unfused f64 evaluation"), "{stdout}");
    assert!(stdout.contains("  no node departs from the f64 evaluation\n"), "{stdout}");
    assert!(stdout.contains("  no node departs from PyTorch's values\n"), "{stdout}");
    // Tolerances too tight for f32 rounding: the first rounded node is reported, exit code 1.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_ttpu"))
        .args(["parity", "--bisect", "fixtures/mlp/model.fx", "--no-cache", "--rtol", "0", "--atol", "0"])
        .args(["--weights", "fixtures/mlp/weights.safetensors", "--inputs", "fixtures/mlp/inputs.safetensors"])
        .current_dir(&root)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("  first node departing from the f64 evaluation: `"), "{stdout}");
    assert!(stdout.contains(" @ fixtures/mlp/model.fx:"), "{stdout}");
    assert!(stdout.contains("max abs "), "{stdout}");
}
