//! The public API: rule names, the report, limits and errors.

use ttpu_fuse::{Error, FuseOptions, StopReason, fuse, rule_names};
use ttpu_ir::{DType, Graph, GraphBuilder, TensorType};

const CHAIN: &str = "graph @main(%0: f32[4, 8] \"x\") -> (f32[4, 8]) {
  %1: f32[8, 4] = transpose(%0) {permutation = [1, 0]}
  %2: f32[4, 8] = transpose(%1) {permutation = [1, 0]}
  %3: f32[4, 8] = negate(%2)
  %4: f32[4, 8] = negate(%3)
  return %4
}
";

#[test]
fn rule_names_are_unique_kebab_case_and_fast_math_only_adds() {
    let exact = rule_names(false);
    let all = rule_names(true);
    assert!(all.starts_with(&exact));
    assert!(all.len() > exact.len());
    for name in &all {
        assert!(name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'), "{name}");
        assert_eq!(all.iter().filter(|other| *other == name).count(), 1, "{name} appears twice");
    }
    for fast in ["reassoc-add-const", "reassoc-mul-const", "div-const-reciprocal"] {
        assert!(!exact.contains(&fast) && all.contains(&fast), "{fast}");
    }
}

#[test]
fn report_summarises_the_run() {
    let graph = ttpu_ir::text::parse(CHAIN).expect("valid IR");
    let (fused, report) = fuse(&graph, &FuseOptions::default()).expect("fuses");
    assert_eq!(fused.node_count(), 0);
    assert_eq!(report.stop_reason, StopReason::Saturated);
    assert_eq!((report.ops_before, report.ops_after), (4, 0));
    assert_eq!(report.rules_fired, vec![("neg-neg", 1), ("transpose-transpose", 1)]);
    assert_eq!(
        report.to_string(),
        format!(
            "fuse: 4 -> 0 ops, cost {} -> 0; {} iterations (saturated); e-nodes 5 -> {}, e-classes 5 -> {}\n\
             rules fired: neg-neg x1, transpose-transpose x1",
            report.cost_before, report.iterations, report.enodes_after, report.eclasses_after
        )
    );
}

/// A splat that is also an output: moving `exponential` before the broadcast adds a node (the
/// broadcast stays for the output) but computes one element instead of six, so the graph is cheaper.
const SHARED_SPLAT: &str = "graph @main(%0: f32[2, 3] \"x\") -> (f32[2, 3], f32[2, 3]) {
  %1: f32[] = constant() {value = dense<1.0>}
  %2: f32[2, 3] = broadcast_in_dim(%1) {dims = []}
  %3: f32[2, 3] = exponential(%2)
  return %2, %3
}
";

#[test]
fn cost_decides_not_op_count_and_never_rises() {
    let graph = ttpu_ir::text::parse(SHARED_SPLAT).expect("valid IR");
    let (_, report) = fuse(&graph, &FuseOptions::default()).expect("fuses");
    assert_eq!((report.ops_before, report.ops_after), (3, 4));
    assert!(report.cost_after < report.cost_before, "{report}");
}

#[test]
fn limits_stop_the_run_and_still_give_a_valid_graph() {
    let graph = ttpu_ir::text::parse(CHAIN).expect("valid IR");
    let options = FuseOptions { iter_limit: 1, ..FuseOptions::default() };
    let (fused, report) = fuse(&graph, &options).expect("fuses");
    ttpu_ir::verify(&fused).expect("valid output");
    assert_eq!(report.iterations, 1);
    let options = FuseOptions { node_limit: 1, ..FuseOptions::default() };
    let (fused, report) = fuse(&graph, &options).expect("fuses");
    ttpu_ir::verify(&fused).expect("valid output");
    assert_eq!(report.stop_reason, StopReason::NodeLimit(1));
}

#[test]
fn an_invalid_graph_is_refused() {
    let mut builder = GraphBuilder::new();
    let x = builder.input(TensorType::from_static(DType::F32, &[2]), None);
    let y = builder.input(TensorType::from_static(DType::F32, &[2]), None);
    let other = builder.finish(&[x, y]);
    let mut graph = Graph::new();
    graph.outputs = other.outputs.clone();
    let error = fuse(&graph, &FuseOptions::default()).expect_err("outputs are undefined");
    assert!(matches!(error, Error::InvalidInput(_)));
    assert_eq!(
        error.to_string(),
        "cannot fuse an invalid graph: the graph is invalid: output %0 is not defined; output %1 is not defined"
    );
}

#[test]
fn random_bit_generators_merge_only_with_equal_states() {
    // Two generators with different states give different bits and must both survive, with fast
    // math too; two with the same state (and attributes) give the same bits and may merge.
    let graph = ttpu_ir::text::parse(
        "graph @main() -> (u64[4], u64[4], u64[4]) {
  %0: u64[2] = constant() {value = dense<[1, 2]>}
  %1: u64[2] = constant() {value = dense<[1, 3]>}
  %2: u64[4] = rng_bit_generator(%0) {algorithm = THREE_FRY}
  %3: u64[4] = rng_bit_generator(%1) {algorithm = THREE_FRY}
  %4: u64[4] = rng_bit_generator(%0) {algorithm = THREE_FRY}
  %5: u64[4] = xor(%2, %3)
  %6: u64[4] = xor(%2, %4)
  return %5, %6, %3
}
",
    )
    .expect("valid IR");
    for fast_math in [false, true] {
        let options = FuseOptions { fast_math, ..FuseOptions::default() };
        let (fused, _) = fuse(&graph, &options).expect("fuses");
        let generators: Vec<_> =
            fused.nodes().filter(|(_, node)| node.op.mnemonic() == "rng_bit_generator").map(|(_, node)| node).collect();
        assert_eq!(generators.len(), 2, "{}", ttpu_ir::text::print(&fused));
        assert_ne!(generators[0].operands[0], generators[1].operands[0]);
        ttpu_ir::verify(&fused).expect("verifies");
    }
}
