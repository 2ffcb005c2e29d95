//! `GraphBuilder::inline`: a graph called on values of another, node by node.

use ttpu_ir::{BinaryOp, DType, GraphBuilder, Shape, TensorType, UnaryOp, text};

fn f32s(dims: &[i64]) -> TensorType {
    TensorType::new(DType::F32, Shape::from_static(dims))
}

/// `tanh(x + y)` over two `f32[2, 3]`, returning the sum too.
fn callee() -> ttpu_ir::Graph {
    let mut b = GraphBuilder::new();
    let x = b.input(f32s(&[2, 3]), None);
    let y = b.input(f32s(&[2, 3]), None);
    let sum = b.binary(BinaryOp::Add, x, y).unwrap();
    let tanh = b.unary(UnaryOp::Tanh, sum).unwrap();
    b.finish(&[tanh, sum])
}

#[test]
fn an_inlined_graph_reads_its_arguments_and_returns_its_outputs() {
    let callee = callee();
    let mut b = GraphBuilder::new();
    let a = b.input(f32s(&[2, 3]), None);
    let c = b.input(f32s(&[2, 3]), None);
    let first = b.inline(&callee, &[a, c]).unwrap();
    let second = b.inline(&callee, &[first[0], a]).unwrap();
    let graph = b.finish(&[second[0], first[1]]);
    assert_eq!(
        text::print(&graph),
        "graph @main(%0: f32[2, 3], %1: f32[2, 3]) -> (f32[2, 3], f32[2, 3]) {\n  \
         %2: f32[2, 3] = add(%0, %1)\n  \
         %3: f32[2, 3] = tanh(%2)\n  \
         %4: f32[2, 3] = add(%3, %0)\n  \
         %5: f32[2, 3] = tanh(%4)\n  \
         return %5, %2\n}\n"
    );
    ttpu_ir::verify(&graph).unwrap();
}

#[test]
fn arguments_must_match_the_inputs_in_count_and_type() {
    let callee = callee();
    let mut b = GraphBuilder::new();
    let a = b.input(f32s(&[2, 3]), None);
    let wide = b.input(f32s(&[4, 3]), None);
    assert_eq!(b.inline(&callee, &[a]).unwrap_err().to_string(), "`inline`: 1 arguments for 2 inputs");
    assert_eq!(
        b.inline(&callee, &[a, wide]).unwrap_err().to_string(),
        "`inline`: argument %1 does not have the type f32[2, 3] of its input"
    );
    assert_eq!(b.graph().node_count(), 0, "a refused call adds nothing");
}
