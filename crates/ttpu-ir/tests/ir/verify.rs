//! The verifier and `Graph::compact`.

use std::sync::Arc;

use ttpu_ir::text::{parse, print};
use ttpu_ir::{
    BinaryOp, DType, Dim, EntityId, GraphBuilder, Literal, Loc, ReduceKind, Scalar, Shape, SymbolRange, TensorType,
    UnaryOp, ValueId, verify,
};

use crate::common::{conv2d, embedding_gather, f32s, ty};

/// A small model touching most op families, built through the builder.
fn model() -> ttpu_ir::Graph {
    let mut b = GraphBuilder::new();
    let batch = b.graph_mut().symbols.declare("s0", SymbolRange { min: 1, max: Some(64) });
    let ids = b.input(
        TensorType::new(DType::I64, Shape([Dim::Sym(batch), Dim::Static(5)].into_iter().collect())),
        Some("ids".into()),
    );
    let table = b.input(f32s(&[10, 4]), Some("embed.weight".into()));
    let image = b.input(f32s(&[1, 3, 8, 8]), Some("image".into()));
    let kernel = b.input(f32s(&[4, 3, 3, 3]), Some("conv.weight".into()));
    b.set_loc(Loc { name: Some("embedding".into()), origin: Some("aten.embedding.default @ model.fx:1".into()) });
    let embedded = b.gather(table, ids, embedding_gather(2, 4)).unwrap();
    b.set_loc(Loc { name: Some("sum".into()), origin: None });
    let summed = b.reduce(embedded, ReduceKind::Sum, &[1]).unwrap();
    b.set_loc(Loc::default());
    let activated = b.unary(UnaryOp::Tanh, summed).unwrap();
    let conv = b.convolution(image, kernel, conv2d([1, 1], [(1, 1), (1, 1)], [1, 1], [1, 1])).unwrap();
    let half = b.constant(Literal::splat(DType::F32, &[1, 4, 8, 8], Scalar::Float(0.5)));
    let scaled = b.binary(BinaryOp::Multiply, conv, half).unwrap();
    let flat = b.reshape(scaled, Shape::from_static(&[256])).unwrap();
    b.finish(&[activated, flat])
}

#[test]
fn builder_graphs_verify() {
    let graph = model();
    assert_eq!(verify(&graph), Ok(()));
    assert_eq!(parse(&print(&graph)).as_ref(), Ok(&graph));
}

#[test]
fn parser_rejects_wrong_stored_types() {
    let text = "graph @main(%0: f32[2, 3] \"x\") -> (f32[3, 2]) {\n  %1: f32[2, 3] = transpose(%0) {permutation = [1, 0]}\n  return %1\n}\n";
    assert_eq!(parse(text).unwrap_err().to_string(), "2:3: %1 is typed f32[2, 3] but `transpose` infers f32[3, 2]");
}

#[test]
fn verify_reports_every_problem() {
    let mut b = GraphBuilder::new();
    let undeclared = TensorType::new(DType::F32, Shape([Dim::Sym(Arc::from("s9"))].into_iter().collect()));
    let x = b.input(undeclared.clone(), None);
    let y = b.input(undeclared, None);
    let sum = b.binary(BinaryOp::Add, x, y).unwrap();
    let mut graph = b.finish(&[sum]);
    graph.outputs.push(<ValueId as EntityId>::new(17));
    let errors = verify(&graph).unwrap_err();
    assert_eq!(
        errors.0,
        [
            "input %0 uses undeclared symbol `s9`",
            "input %1 uses undeclared symbol `s9`",
            "%2 uses undeclared symbol `s9`",
            "output %17 is not defined",
        ]
    );
    assert!(errors.to_string().starts_with("the graph is invalid: input %0 uses undeclared symbol `s9`; "));
}

#[test]
fn verify_rejects_corrupted_inputs() {
    let mut b = GraphBuilder::new();
    let x = b.input(f32s(&[2]), None);
    let y = b.unary(UnaryOp::Negate, x).unwrap();
    let mut graph = b.finish(&[y]);
    // Claim a node result is an input.
    graph.inputs.push(y);
    assert_eq!(verify(&graph).unwrap_err().0, ["input 1 (%1) is not defined as that input"]);
}

#[test]
fn compact_removes_dead_nodes_and_renumbers() {
    let mut b = GraphBuilder::new();
    let x = b.input(f32s(&[2, 3]), Some("x".into()));
    let dead = b.unary(UnaryOp::Exponential, x).unwrap();
    let _dead_user = b.binary(BinaryOp::Add, dead, dead).unwrap();
    // An input declared after some nodes: compact puts inputs first.
    let y = b.input(f32s(&[2, 3]), Some("y".into()));
    b.set_loc(Loc { name: Some("add".into()), origin: Some("aten.add.Tensor @ m.fx:3".into()) });
    let live = b.binary(BinaryOp::Add, x, y).unwrap();
    b.set_loc(Loc::default());
    let _unused_input = b.input(ty(DType::I32, &[]), Some("unused".into()));
    let _dead_after = b.reduce(live, ReduceKind::Max, &[0]).unwrap();
    let mut graph = b.finish(&[live, x]);
    assert_eq!(graph.node_count(), 4);
    assert_eq!(graph.value_count(), 7);

    let before = print(&graph);
    graph.compact();
    assert_eq!(verify(&graph), Ok(()));
    assert_eq!(graph.node_count(), 1);
    assert_eq!(graph.value_count(), 4);
    assert_eq!(graph.inputs.len(), 3);
    assert_eq!(graph.value(graph.inputs[2]).name.as_deref(), Some("unused"));
    assert!(graph.is_input(graph.inputs[2]) && graph.is_input(graph.outputs[1]));
    assert!(!graph.is_input(graph.outputs[0]));
    assert_eq!(graph.use_counts(), [2, 1, 0, 1]);
    let after = print(&graph);
    assert_eq!(
        after,
        "graph @main(%0: f32[2, 3] \"x\", %1: f32[2, 3] \"y\", %2: i32[] \"unused\") -> (f32[2, 3], f32[2, 3]) {\n  \
         %3: f32[2, 3] = add(%0, %1)  # add: aten.add.Tensor @ m.fx:3\n  \
         return %3, %0\n\
         }\n"
    );
    assert_ne!(before, after);
    // Compacted graphs are dense in print order, so they survive the text round trip exactly.
    assert_eq!(parse(&after), Ok(graph.clone()));
    let mut again = graph.clone();
    again.compact();
    assert_eq!(again, graph);
}
