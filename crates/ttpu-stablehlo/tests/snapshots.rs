//! Snapshot tests: one small graph per op family, lowered to StableHLO text.
//!
//! The snapshots are the contract with XLA's StableHLO parser: every attribute name and format in
//! them was checked against the StableHLO spec and dialect definitions, and `execute.rs` compiles
//! the same graphs with the XLA CPU plugin.

mod common;

use common::{at, graphs, input, lower};
use std::sync::Arc;

use ttpu_ir::{
    BinaryOp, DType, Dim, GraphBuilder, Literal, ReduceKind, Scalar, Shape, SymbolRange, TensorType, UnaryOp,
};

#[test]
fn unary_ops() {
    insta::assert_snapshot!(lower(&graphs::unary_ops()));
}

#[test]
fn binary_ops() {
    insta::assert_snapshot!(lower(&graphs::binary_ops()));
}

#[test]
fn compare_select_clamp_convert() {
    insta::assert_snapshot!(lower(&graphs::compare_select_clamp_convert()));
}

#[test]
fn layout_ops() {
    insta::assert_snapshot!(lower(&graphs::layout_ops()));
}

#[test]
fn dot_general() {
    insta::assert_snapshot!(lower(&graphs::dot_general()));
}

#[test]
fn reduce() {
    insta::assert_snapshot!(lower(&graphs::reduce()));
}

#[test]
fn reduce_window() {
    insta::assert_snapshot!(lower(&graphs::reduce_window()));
}

#[test]
fn convolution() {
    insta::assert_snapshot!(lower(&graphs::convolution()));
}

#[test]
fn gather_and_scatter() {
    insta::assert_snapshot!(lower(&graphs::gather_and_scatter()));
}

#[test]
fn constants_of_every_dtype() {
    insta::assert_snapshot!(lower(&graphs::constants_of_every_dtype()));
}

#[test]
fn iota() {
    insta::assert_snapshot!(lower(&graphs::iota()));
}

#[test]
fn rng_bit_generator() {
    insta::assert_snapshot!(lower(&graphs::rng_bit_generator()));
}

/// Symbolic sizes computed at run time: a compound reshape target, a broadcast and an iota of
/// symbolic shape, slices to a symbolic limit and to the end of a symbolic dim with a stride
/// (a floor division), and a size read back as a value.
#[test]
fn shape_polymorphic_module() {
    let mut b = GraphBuilder::new();
    let s0: Arc<str> = b.graph_mut().symbols.declare("s0", SymbolRange { min: 2, max: Some(64) });
    let s1: Arc<str> = b.graph_mut().symbols.declare("s1", SymbolRange { min: 1, max: Some(16) });
    let (d0, d1) = (Dim::Sym(s0), Dim::Sym(s1));
    let shape = |dims: &[Dim]| Shape(dims.iter().cloned().collect());
    let x = b.input(TensorType::new(DType::F32, shape(&[d0.clone(), d1.clone(), Dim::Static(4)])), Some("x".into()));
    let mask = input(&mut b, "mask", DType::F32, &[16, 16]);
    let merged = d0.checked_mul(&d1).unwrap();
    let flat = b.reshape(x, shape(&[merged, Dim::Static(4)])).unwrap();
    let scalar = b.constant(Literal::scalar(DType::F32, Scalar::Float(1.0)));
    let ones = b.broadcast_in_dim(scalar, &[], shape(&[d0.clone(), d1.clone(), Dim::Static(4)])).unwrap();
    let sum = b.binary(BinaryOp::Add, x, ones).unwrap();
    let positions = b.iota(TensorType::new(DType::I64, shape(std::slice::from_ref(&d1))), 0).unwrap();
    let window = b.slice_to(mask, &[0, 0], &[d1.clone(), d1.clone()], &[1, 1]).unwrap();
    let every_other = b.slice_to(x, &[1, 0, 0], &[d0, d1, Dim::Static(4)], &[2, 1, 1]).unwrap();
    let size = b.dim_size(x, 1).unwrap();
    let options = ttpu_stablehlo::LowerOptions { shape_polymorphic: true, ..Default::default() };
    let graph = b.finish(&[flat, sum, positions, window, every_other, size]);
    insta::assert_snapshot!(ttpu_stablehlo::lower_with(&graph, &options).unwrap());
}

#[test]
fn debug_locations_name_the_fx_node() {
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::F32, &[3]);
    at(&mut b, "relu", "aten.relu.default @ model.fx:9");
    let zero = b.constant(Literal::splat(DType::F32, &[3], Scalar::Float(0.0)));
    let relu = b.binary(BinaryOp::Maximum, x, zero).unwrap();
    b.set_loc(ttpu_ir::Loc { name: Some("sum".into()), origin: None });
    let total = b.reduce(relu, ReduceKind::Sum, &[0]).unwrap();
    let options = ttpu_stablehlo::LowerOptions { debug_locations: true, ..Default::default() };
    insta::assert_snapshot!(ttpu_stablehlo::lower_with(&b.finish(&[relu, total]), &options).unwrap());
}

#[test]
fn generic_form_prints_func_generically() {
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::F32, &[3]);
    let y = b.unary(UnaryOp::Exponential, x).unwrap();
    let options = ttpu_stablehlo::LowerOptions { generic: true, ..Default::default() };
    insta::assert_snapshot!(ttpu_stablehlo::lower_with(&b.finish(&[y, x]), &options).unwrap());
}

#[test]
fn graph_without_nodes_or_inputs() {
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::I8, &[2]);
    insta::assert_snapshot!(lower(&b.finish(&[x, x])));
    insta::assert_snapshot!(lower(&GraphBuilder::new().finish(&[])));
}
