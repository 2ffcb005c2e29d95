//! Reinterpreted bits and unrolled linear algebra from inline programs: result types follow
//! PyTorch's annotations, and what PyTorch refuses (or ttpu cannot unroll) is refused with a
//! message naming the reason. Values are checked against PyTorch by the `view_dtype`,
//! `sign_bits`, `linalg_*`, `conv_tbc`, `trilinear` and `rrelu_eval` op cases.

mod common;

use common::{check, try_import};
use ttpu_fx::ImportOptions;
use ttpu_ir::Op;

/// The message of importing `line` (which must fail) over `params`.
fn refused(params: &[(&str, &str)], line: &str) -> String {
    try_import(params, &[line], &["out"], &ImportOptions::default()).expect_err(line).to_string()
}

/// The message of importing the first result of the multi-output `call` (which must fail).
fn refused_first(params: &[(&str, &str)], ty: &str, call: &str) -> String {
    let body = [format!("r = torch.ops.{call}"), format!("out: \"{ty}\" = r[0]")];
    let body: Vec<&str> = body.iter().map(String::as_str).collect();
    try_import(params, &body, &["out"], &ImportOptions::default()).expect_err(call).to_string()
}

#[test]
fn view_dtype_scales_the_last_dim() {
    let x = ("x", "f32[3, 4]");
    check(&[x], "i32[3, 4]", "aten.view.dtype(x, torch.int32)");
    check(&[x], "i16[3, 8]", "aten.view.dtype(x, torch.int16)");
    check(&[x], "u8[3, 16]", "aten.view.dtype(x, torch.uint8)");
    check(&[x], "f64[3, 2]", "aten.view.dtype(x, torch.float64)");
    check(&[("b", "b8[2, 4]")], "i32[2, 1]", "aten.view.dtype(b, torch.int32)");
    check(&[("u", "u8[2, 2]")], "b8[2, 2]", "aten.view.dtype(u, torch.bool)");
    check(&[("s", "f32[]")], "i32[]", "aten.view.dtype(s, torch.int32)");
}

#[test]
fn view_dtype_refuses_what_pytorch_refuses() {
    let message = refused(&[("s", "f32[]")], r#"out: "f16[2]" = torch.ops.aten.view.dtype(s, torch.float16)"#);
    assert!(message.ends_with("self.dim() cannot be 0 to view Float as Half (different element sizes)"), "{message}");
    let message = refused(&[("x", "f32[3]")], r#"out: "f64[1]" = torch.ops.aten.view.dtype(x, torch.float64)"#);
    assert!(
        message.ends_with(
            "self.size(-1) must be divisible by 2 to view Float as Double (different element sizes), but got 3"
        ),
        "{message}"
    );
}

#[test]
fn signbit_reads_the_bits() {
    let module = common::import(&[("x", "f64[4]")], &["out: \"b8[4]\" = torch.ops.aten.signbit.default(x)"], &["out"]);
    let bitcasts = module.graph.nodes().filter(|(_, node)| node.op == Op::BitcastConvert(ttpu_ir::DType::I64)).count();
    assert_eq!(bitcasts, 1, "the sign bit is read from the i64 bits");
}

#[test]
fn linear_algebra_gives_pytorchs_types() {
    let body = [
        "det = torch.ops.aten._linalg_det.default(a)",
        "d: \"f32[2]\" = det[0]",
        "lu: \"f32[2, 3, 3]\" = det[1]",
        "pivots: \"i32[2, 3]\" = det[2]",
        "solve = torch.ops.aten._linalg_solve_ex.default(a, v)",
        "x: \"f32[2, 3]\" = solve[0]",
        "info: \"i32[2]\" = solve[3]",
        "inv = torch.ops.aten.linalg_inv_ex.default(a)",
        "inverse: \"f32[2, 3, 3]\" = inv[0]",
        "chol = torch.ops.aten.linalg_cholesky_ex.default(a, upper = True)",
        "u: \"f32[2, 3, 3]\" = chol[0]",
        "tri: \"f32[2, 3, 4]\" = torch.ops.aten.linalg_solve_triangular.default(a, b, upper = False)",
    ];
    let module = common::import(
        &[("a", "f32[2, 3, 3]"), ("v", "f32[2, 3]"), ("b", "f32[3, 4]")],
        &body,
        &["d", "lu", "pivots", "x", "info", "inverse", "u", "tri"],
    );
    assert_eq!(module.graph.outputs.len(), 8);
}

#[test]
fn linear_algebra_takes_symbolic_batch_dims() {
    let body = [
        "det = torch.ops.aten._linalg_det.default(a)",
        "d: \"f32[s0]\" = det[0]",
        "pivots: \"i32[s0, 3]\" = det[2]",
        "solve = torch.ops.aten.linalg_solve_ex.default(a, b)",
        "x: \"f32[s0, 3, 2]\" = solve[0]",
        "info: \"i32[s0]\" = solve[1]",
    ];
    let source = common::program(
        &[("a", "f32[s0, 3, 3]"), ("b", "f32[s0, 3, 2]")],
        &body,
        &["d", "pivots", "x", "info"],
        "{s0: VR[1, 64]}",
    );
    let module =
        ttpu_fx::load(&source, "inline.fx", &ImportOptions::default()).unwrap_or_else(|error| panic!("{error}"));
    ttpu_ir::verify(&module.graph).unwrap_or_else(|error| panic!("{error}"));
    let message = refused_first(&[("a", "f32[3, s0, s0]")], "f32[3]", "aten._linalg_det.default(a)");
    assert!(message.contains("the matrix size must be static to unroll the factorization"), "{message}");
}

#[test]
fn linear_algebra_refuses_what_it_cannot_unroll() {
    let message = refused_first(&[("a", "f32[65, 65]")], "f32[]", "aten._linalg_det.default(a)");
    assert!(message.contains("65x65 matrices exceed the 64x64 that ttpu unrolls"), "{message}");
    let message = refused_first(&[("a", "f32[2, 3]")], "f32[]", "aten._linalg_det.default(a)");
    assert!(message.ends_with("A must be batches of square matrices, but they are 2 by 3 matrices"), "{message}");
    let message = refused_first(&[("a", "i64[3, 3]")], "i64[]", "aten._linalg_det.default(a)");
    assert!(message.contains("expected a float32 or float64 tensor"), "{message}");
    let message =
        refused_first(&[("a", "f32[3, 3]")], "f32[3, 3]", "aten.linalg_inv_ex.default(a, check_errors = True)");
    assert!(message.contains("check_errors=True raises when a matrix is singular"), "{message}");
    let message = refused_first(
        &[("a", "f32[3, 3]"), ("v", "f32[3]")],
        "f32[3]",
        "aten._linalg_solve_ex.default(a, v, left = False)",
    );
    assert!(message.contains("Vector broadcasting of the left hand side is not supported for left=False"), "{message}");
    let message = refused(
        &[("a", "f32[3, 3]"), ("b", "f32[4, 2]")],
        r#"out: "f32[3, 2]" = torch.ops.aten.linalg_solve_triangular.default(a, b, upper = True)"#,
    );
    assert!(message.contains("Incompatible shapes of A and B"), "{message}");
}

#[test]
fn tail_ops_refuse_bad_arguments() {
    let message = refused(
        &[("x", "f32[5, 2, 3]"), ("w", "f32[2, 4, 6]"), ("b", "f32[6]")],
        r#"out: "f32[4, 2, 6]" = torch.ops.aten.conv_tbc.default(x, w, b)"#,
    );
    assert!(
        message.ends_with("Input dim 2 (input channels) is not == dim 1 in the weight tensor (3 vs 4)"),
        "{message}"
    );
    let message = refused(
        &[("x", "f32[2, 3]"), ("w", "f32[4, 3, 5]"), ("y", "f32[2, 5]")],
        r#"out: "f32[2, 4]" = torch.ops.aten._trilinear.default(x, w, y, [1, 3], [0], [1, 2], [2, 3], 4)"#,
    );
    assert!(message.ends_with("unroll_dim must be in [0,3], found 4"), "{message}");
}

#[test]
fn rrelu_in_training_draws_its_slopes_once() {
    // The slopes are random (see `random_ops.rs` of the ttpu crate for distributions); here the
    // graph draws once and returns the slopes as the noise.
    let body = [
        "r = torch.ops.aten.rrelu_with_noise_functional.default(x, n, 0.1, 0.3, True)",
        "out: \"f32[4]\" = r[0]",
        "noise: \"f32[4]\" = r[1]",
    ];
    let module = common::import(&[("x", "f32[4]"), ("n", "f32[4]")], &body, &["out", "noise"]);
    let draws = module.graph.nodes().filter(|(_, node)| matches!(node.op, Op::RngBitGenerator { .. })).count();
    assert_eq!(draws, 1);
}
