//! Error paths, options and determinism of `lower`.

mod common;

use std::sync::Arc;

use common::{at, input, lower};
use ttpu_ir::{
    BinaryOp, DType, Dim, EntityId, GraphBuilder, Literal, ReduceKind, Scalar, Shape, SymbolRange, TensorType, UnaryOp,
    ValueId,
};
use ttpu_stablehlo::Error;

#[test]
fn symbolic_dims_are_refused_with_the_value_and_its_type() {
    let mut b = GraphBuilder::new();
    let s77: Arc<str> = b.graph_mut().symbols.declare("s77", SymbolRange { min: 2, max: None });
    let ty = TensorType::new(DType::F32, Shape([Dim::Sym(s77), Dim::Static(16)].into_iter().collect()));
    let x = b.input(ty, Some("x".into()));
    let y = b.unary(UnaryOp::Tanh, x).unwrap();
    let error = ttpu_stablehlo::lower(&b.finish(&[y])).unwrap_err();
    assert!(matches!(error, Error::DynamicDims { .. }), "{error:?}");
    assert_eq!(
        error.to_string(),
        "value %0 has the symbolic type f32[s77, 16]: give the symbols values, or lower shape-polymorphic"
    );
}

#[test]
fn a_symbol_no_input_carries_cannot_be_computed() {
    // `s1` sizes only an intermediate (a reshape target), never an input dim.
    let mut b = GraphBuilder::new();
    let s0: Arc<str> = b.graph_mut().symbols.declare("s0", SymbolRange { min: 2, max: None });
    let s1: Arc<str> = b.graph_mut().symbols.declare("s1", SymbolRange { min: 2, max: None });
    let product = Dim::Sym(s0.clone()).checked_mul(&Dim::Sym(s1.clone())).unwrap();
    let x = b.input(TensorType::new(DType::F32, Shape([product].into_iter().collect())), Some("x".into()));
    let split = b.reshape(x, Shape([Dim::Sym(s0), Dim::Sym(s1)].into_iter().collect())).unwrap();
    let options = ttpu_stablehlo::LowerOptions { shape_polymorphic: true, ..Default::default() };
    let error = ttpu_stablehlo::lower_with(&b.finish(&[split]), &options).unwrap_err();
    assert_eq!(
        error.to_string(),
        "symbol `s0` is not the size of any input dim, so the module cannot compute it at run time"
    );
}

#[test]
fn invalid_graphs_are_refused_before_mlir_sees_them() {
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::F32, &[2]);
    let mut graph = b.finish(&[x]);
    graph.outputs.push(<ValueId as EntityId>::new(7));
    let error = ttpu_stablehlo::lower(&graph).unwrap_err();
    assert!(matches!(error, Error::InvalidGraph(_)), "{error:?}");
}

/// A graph touching most builders, for byte-for-byte comparisons.
fn mixed_graph() -> ttpu_ir::Graph {
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::F32, &[4, 8]);
    let mut value = x;
    for step in 0..20 {
        at(&mut b, &format!("node_{step}"), "aten.mul.Tensor @ model.fx:1");
        let constant = b.constant(Literal::splat(DType::F32, &[4, 8], Scalar::Float(step as f64 * 0.5)));
        let product = b.binary(BinaryOp::Multiply, value, constant).unwrap();
        value = b.unary(UnaryOp::Tanh, product).unwrap();
    }
    let total = b.reduce(value, ReduceKind::Sum, &[1]).unwrap();
    b.finish(&[value, total])
}

#[test]
fn lowering_is_deterministic() {
    let graph = mixed_graph();
    let first = lower(&graph);
    assert_eq!(first, lower(&graph));
    let options = ttpu_stablehlo::LowerOptions { debug_locations: true, ..Default::default() };
    assert_eq!(
        ttpu_stablehlo::lower_with(&graph, &options).unwrap(),
        ttpu_stablehlo::lower_with(&graph, &options).unwrap()
    );
    // Contexts are per call, so concurrent lowerings cannot interfere.
    let texts: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4).map(|_| scope.spawn(|| lower(&graph))).collect();
        handles.into_iter().map(|handle| handle.join().unwrap()).collect()
    });
    assert!(texts.iter().all(|text| *text == first));
}

#[test]
fn locations_are_left_out_unless_asked_for() {
    let graph = mixed_graph();
    assert!(!lower(&graph).contains("loc("));
    let options = ttpu_stablehlo::LowerOptions { debug_locations: true, ..Default::default() };
    let text = ttpu_stablehlo::lower_with(&graph, &options).unwrap();
    assert!(text.contains(r#"loc("node_19"(#loc"#), "{text}");
    assert!(text.contains(r#"loc("aten.mul.Tensor @ model.fx:1")"#), "{text}");
}

#[test]
fn big_constants_keep_every_byte() {
    let mut b = GraphBuilder::new();
    let values: Vec<Scalar> = (0..4096).map(|index| Scalar::Float(f64::from(index) * 0.25 - 7.0)).collect();
    let literal = Literal::from_scalars(DType::BF16, &[64, 64], &values).unwrap();
    let constant = b.constant(literal.clone());
    let text = lower(&b.finish(&[constant]));
    // MLIR prints large dense data as one hex string of the raw bytes.
    let hex: String = literal.bytes().iter().map(|byte| format!("{byte:02X}")).collect();
    assert!(text.contains(&format!("dense<\"0x{hex}\"> : tensor<64x64xbf16>")), "{text}");
}

#[test]
fn complex32_keeps_half_parts_and_refuses_what_cannot() {
    // Arithmetic rounds both parts to half: real, imag, two converts each, complex.
    let mut b = GraphBuilder::new();
    let z = input(&mut b, "z", DType::C32, &[3]);
    let sum = b.binary(BinaryOp::Add, z, z).unwrap();
    let moved = b.reshape(sum, Shape::from_static(&[1, 3])).unwrap();
    let text = lower(&b.finish(&[moved]));
    assert!(text.contains("tensor<3xcomplex<f32>>"), "{text}");
    assert_eq!(text.matches("\"stablehlo.convert\"").count(), 4, "one rounding, after the add only: {text}");
    assert_eq!(text.matches("\"stablehlo.complex\"").count(), 1, "{text}");

    let mut b = GraphBuilder::new();
    let z = input(&mut b, "z", DType::C32, &[4]);
    let spectrum = b.fft(z, ttpu_ir::FftType::Fft, &[4]).unwrap();
    let error = ttpu_stablehlo::lower(&b.finish(&[spectrum])).unwrap_err();
    assert_eq!(
        error.to_string(),
        "`fft` of complex32 is not supported: PyTorch's CPU has no half FFT and CUDA's computes in half precision, \
         which a complex64 FFT rounded afterwards does not reproduce"
    );
}
