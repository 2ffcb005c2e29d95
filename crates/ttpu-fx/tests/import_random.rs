//! Random ops from inline programs: result types follow PyTorch's annotations, each draw gets a
//! generator state of its own derived from the seed, and what cannot be drawn is refused with a
//! message. Their statistics are checked end to end by `crates/ttpu/tests/random_ops.rs`.

mod common;

use common::{Case, check, program, try_import};
use ttpu_fx::{Error, ImportOptions};
use ttpu_ir::{Graph, Op};

const FACTORY: &str = "device = device(type='cpu'), pin_memory = False";

#[test]
fn random_ops_give_pytorchs_types() {
    let x = ("x", "f32[3, 4]");
    let h = ("h", "f16[3, 4]");
    let rand = format!("aten.rand.default([3, 4], {FACTORY})");
    let rand_bf16 = format!("aten.rand.default([3, 4], dtype = torch.bfloat16, {FACTORY})");
    let randn = format!("aten.randn.default([2], dtype = torch.float64, {FACTORY})");
    let randint = format!("aten.randint.low(0, 10, [3, 4], {FACTORY})");
    let randint_high = format!("aten.randint.default(5, [7], {FACTORY})");
    let randperm = format!("aten.randperm.default(6, {FACTORY})");
    let randperm_i32 = format!("aten.randperm.default(6, dtype = torch.int32, {FACTORY})");
    let normal = format!("aten.normal.float_float(0.0, 2.0, [5], {FACTORY})");
    let cases: &[Case<'_>] = &[
        (&[], "f32[3, 4]", &rand),
        (&[], "bf16[3, 4]", &rand_bf16),
        (&[], "f64[2]", &randn),
        (&[x], "f32[3, 4]", "aten.rand_like.default(x, pin_memory = False)"),
        (&[h], "f16[3, 4]", "aten.randn_like.default(h, pin_memory = False)"),
        (&[], "i64[3, 4]", &randint),
        (&[], "i64[7]", &randint_high),
        (&[x], "f32[3, 4]", "aten.randint_like.low_dtype(x, 0, 10, pin_memory = False)"),
        (&[x], "i32[3, 4]", "aten.randint_like.default(x, 3, dtype = torch.int32)"),
        (&[], "i64[6]", &randperm),
        (&[], "i32[6]", &randperm_i32),
        (&[x], "f32[3, 4]", "aten.uniform.default(x, -1.0, 1.0)"),
        (&[h], "f16[3, 4]", "aten.normal_functional.default(h, 2.0, 3.0)"),
        (&[x], "f32[3, 4]", "aten.normal.Tensor_float(x)"),
        (&[x], "f32[3, 4]", "aten.normal.float_Tensor(1.0, x)"),
        (&[x, ("m", "f32[4]")], "f32[3, 4]", "aten.normal.Tensor_Tensor(m, x)"),
        (&[], "f32[5]", &normal),
        (&[h], "f16[3, 4]", "aten.bernoulli.p(h, 0.25)"),
        (&[x], "f32[3, 4]", "aten.exponential.default(x, 2.0)"),
    ];
    for (params, ty, call) in cases {
        check(params, ty, call);
    }
}

/// The generator states of `graph`, in node order, as the i64s of their bits.
fn states(graph: &Graph) -> Vec<Vec<i64>> {
    graph
        .nodes()
        .filter(|(_, node)| matches!(node.op, Op::RngBitGenerator { .. }))
        .map(|(_, node)| match &graph.producer(node.operands[0]).expect("a constant").op {
            Op::Constant(literal) => literal.scalars().map(|word| word.as_i64()).collect(),
            other => panic!("the state is {other:?}"),
        })
        .collect()
}

#[test]
fn each_draw_has_its_own_state_and_the_seed_picks_them() {
    let body = [
        &*format!(r#"a: "f32[8]" = torch.ops.aten.rand.default([8], {FACTORY})"#),
        &*format!(r#"b: "f32[8]" = torch.ops.aten.rand.default([8], {FACTORY})"#),
    ];
    let import = |seed: u64| {
        try_import(&[], &body, &["a", "b"], &ImportOptions { seed, ..ImportOptions::default() })
            .unwrap_or_else(|error| panic!("{error}"))
    };
    let zero = states(&import(0).graph);
    assert_eq!(zero.len(), 2);
    assert_ne!(zero[0], zero[1], "two draws share a stream");
    assert!(zero.iter().all(|state| state.len() == 2 && state[1] == 0), "{zero:?}");
    assert_eq!(states(&import(0).graph), zero, "the same seed gives the same states");
    let one = states(&import(1).graph);
    assert!(one.iter().all(|state| !zero.contains(state)), "{one:?} vs {zero:?}");
}

#[test]
fn random_ops_refuse_what_they_cannot_draw() {
    let refused = |params: &[(&str, &str)], line: String| {
        let error = try_import(params, &[&line], &["out"], &ImportOptions::default()).expect_err(&line);
        error.to_string()
    };
    let message = refused(&[], format!(r#"out: "i64[3]" = torch.ops.aten.randint.low(5, 5, [3], {FACTORY})"#));
    assert!(message.ends_with("randint needs low < high, found [5, 5)"), "{message}");
    let message = refused(&[("x", "f32[3]")], r#"out: "f32[3]" = torch.ops.aten.bernoulli.p(x, 1.5)"#.into());
    assert!(message.ends_with("bernoulli needs 0 <= p <= 1, found 1.5"), "{message}");
    let message = refused(&[("x", "i64[3]")], r#"out: "i64[3]" = torch.ops.aten.uniform.default(x, 0.0, 1.0)"#.into());
    assert!(message.ends_with("uniform samples need a floating-point dtype, found i64"), "{message}");
    let message = refused(
        &[("x", "f32[3]")],
        "dropout = torch.ops.aten.native_dropout.default(x, 1.5, True)\n            \
         out: \"f32[3]\" = dropout[0]"
            .into(),
    );
    assert!(message.ends_with("dropout probability has to be between 0 and 1, but got 1.5"), "{message}");
    // PyTorch prints uint64 as `u64`, which is also the IR's dtype of random bits; `ui64` is no
    // spelling of it.
    let module = try_import(&[("x", "u64[3]")], &[], &["x"], &ImportOptions::default()).expect("a uint64 input");
    assert_eq!(module.graph.ty(module.graph.inputs[0]).to_string(), "u64[3]");
    let error = try_import(&[("x", "ui64[3]")], &[], &["x"], &ImportOptions::default()).expect_err("ui64");
    assert!(matches!(*error, Error::Syntax { .. }), "{error}");
    assert!(error.to_string().contains("found `ui64`"), "{error}");
}

#[test]
fn random_draws_need_static_sizes() {
    let source = program(
        &[("x", "f32[s0, 4]")],
        &[r#"out: "f32[s0, 4]" = torch.ops.aten.rand_like.default(x, pin_memory = False)"#],
        &["out"],
        "{s0: VR[2, 64]}",
    );
    let error = ttpu_fx::load(&source, "inline.fx", &ImportOptions::default()).expect_err("symbolic size");
    assert!(matches!(error, Error::DynamicDims { .. }), "{error}");
    assert!(error.to_string().contains("random numbers need a static shape, found [s0, 4]"), "{error}");
    let mut options = ImportOptions::default();
    options.symbol_values.insert("s0".into(), 5);
    ttpu_fx::load(&source, "inline.fx", &options).unwrap_or_else(|error| panic!("{error}"));
}
