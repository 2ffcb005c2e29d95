//! Lowering speed: an empty graph (the fixed cost: MLIR context, module, verify, print), a small
//! MLP-like graph, and a chain of 1,000 elementwise nodes.

use criterion::{Criterion, criterion_group, criterion_main};
use ttpu_ir::{BinaryOp, DType, DotDims, Graph, GraphBuilder, Literal, ReduceKind, Scalar, TensorType, UnaryOp};

/// `x -> tanh(x * c_k + x)` repeated: `4 * steps` nodes (the splat `c_k` is one).
fn elementwise_chain(steps: usize) -> Graph {
    let mut b = GraphBuilder::new();
    let x = b.input(TensorType::from_static(DType::F32, &[32, 128]), Some("x".into()));
    let mut value = x;
    for step in 0..steps {
        let constant = b.constant(Literal::splat(DType::F32, &[32, 128], Scalar::Float(step as f64 * 1e-3)));
        let product = b.binary(BinaryOp::Multiply, value, constant).expect("same types");
        let sum = b.binary(BinaryOp::Add, product, x).expect("same types");
        value = b.unary(UnaryOp::Tanh, sum).expect("float operand");
    }
    b.finish(&[value])
}

/// `sum(relu(x @ w^T + b), 1)`.
fn small_graph() -> Graph {
    let mut b = GraphBuilder::new();
    let x = b.input(TensorType::from_static(DType::F32, &[4, 16]), Some("x".into()));
    let w = b.input(TensorType::from_static(DType::F32, &[8, 16]), Some("w".into()));
    let dims = DotDims {
        lhs_contracting: [1].into_iter().collect(),
        rhs_contracting: [1].into_iter().collect(),
        ..DotDims::default()
    };
    let product = b.dot_general(x, w, dims).expect("matching dims");
    let bias = b.constant(Literal::splat(DType::F32, &[4, 8], Scalar::Float(0.5)));
    let shifted = b.binary(BinaryOp::Add, product, bias).expect("same types");
    let zero = b.constant(Literal::splat(DType::F32, &[4, 8], Scalar::Float(0.0)));
    let relu = b.binary(BinaryOp::Maximum, shifted, zero).expect("same types");
    let total = b.reduce(relu, ReduceKind::Sum, &[1]).expect("valid dims");
    b.finish(&[total])
}

fn lower(c: &mut Criterion) {
    let empty = GraphBuilder::new().finish(&[]);
    c.bench_function("lower/empty", |bench| bench.iter(|| ttpu_stablehlo::lower(&empty).expect("lowers")));
    let small = small_graph();
    c.bench_function("lower/small_6_nodes", |bench| bench.iter(|| ttpu_stablehlo::lower(&small).expect("lowers")));
    let chain = elementwise_chain(250);
    assert_eq!(chain.node_count(), 1000);
    c.bench_function("lower/elementwise_1000_nodes", |bench| {
        bench.iter(|| ttpu_stablehlo::lower(&chain).expect("lowers"))
    });
}

criterion_group!(benches, lower);
criterion_main!(benches);
