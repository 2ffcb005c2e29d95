//! Snapshot tests: one small graph per op family, lowered to StableHLO text.
//!
//! The snapshots are the contract with XLA's StableHLO parser: every attribute name and format in
//! them was checked against the StableHLO spec and dialect definitions, and `execute.rs` compiles
//! the same graphs with the XLA CPU plugin.

mod common;

use common::{at, graphs, input, lower};
use ttpu_ir::{BinaryOp, DType, GraphBuilder, Literal, ReduceKind, Scalar, UnaryOp};

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
