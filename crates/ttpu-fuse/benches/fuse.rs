//! Time of one `fuse` run (load, saturate, extract, rebuild, verify) on a generated 10,000-node
//! graph of elementwise chains, transposes, reshapes, broadcasts and constants.
//!
//! The number is the optimizer's cost per model compile; it should stay well under a second. It
//! catches rules whose search grows faster than the graph, and runs that stop saturating.

use criterion::{Criterion, criterion_group, criterion_main};
use ttpu_fuse::{FuseOptions, fuse};
use ttpu_ir::{BinaryOp, DType, Graph, GraphBuilder, Literal, Scalar, Shape, TensorType, UnaryOp, ValueId};

/// A graph of `target` nodes: a chain that cycles through patterns the rules rewrite (and some they
/// must leave alone), with occasional joins back to earlier values.
fn generated_graph(target: usize) -> Graph {
    let shape = Shape::from_static(&[16, 32]);
    let mut builder = GraphBuilder::new();
    let x = builder.input(TensorType::new(DType::F32, shape.clone()), Some("x".into()));
    let mut values: Vec<ValueId> = vec![x];
    let mut current = x;
    let mut step = 0usize;
    while builder.graph().node_count() < target {
        let b = &mut builder;
        let splat = |b: &mut GraphBuilder, value: f64| {
            let scalar = b.constant(Literal::scalar(DType::F32, Scalar::Float(value)));
            b.broadcast_in_dim(scalar, &[], shape.clone()).expect("scalar broadcasts")
        };
        current = match step % 8 {
            0 => {
                let one = splat(b, 1.0);
                b.binary(BinaryOp::Multiply, current, one).expect("same types")
            }
            1 => {
                let t = b.transpose(current, &[1, 0]).expect("rank 2");
                let e = b.unary(UnaryOp::Tanh, t).expect("float");
                b.transpose(e, &[1, 0]).expect("rank 2")
            }
            2 => {
                let flat = b.reshape(current, Shape::from_static(&[512])).expect("same count");
                let other = b.reshape(flat, Shape::from_static(&[32, 16])).expect("same count");
                b.reshape(other, shape.clone()).expect("same count")
            }
            3 => {
                let c = splat(b, 0.5);
                b.binary(BinaryOp::Add, current, c).expect("same types")
            }
            4 => {
                let n = b.unary(UnaryOp::Negate, current).expect("float");
                b.unary(UnaryOp::Negate, n).expect("float")
            }
            5 => {
                let earlier = values[values.len() / 2];
                b.binary(BinaryOp::Maximum, current, earlier).expect("same types")
            }
            6 => {
                let wide = b.convert(current, DType::F64).expect("convert");
                b.convert(wide, DType::F32).expect("convert")
            }
            _ => b.unary(UnaryOp::Exponential, current).expect("float"),
        };
        values.push(current);
        step += 1;
    }
    builder.finish(&[current])
}

fn bench_fuse(c: &mut Criterion) {
    let graph = generated_graph(10_000);
    let options = FuseOptions::default();
    let (_, report) = fuse(&graph, &options).expect("the generated graph fuses");
    println!("{report}");
    let mut group = c.benchmark_group("fuse");
    group.sample_size(10);
    group.bench_function("generated_10k_nodes", |bench| bench.iter(|| fuse(&graph, &options).expect("fuses")));
    group.finish();
}

criterion_group!(benches, bench_fuse);
criterion_main!(benches);
