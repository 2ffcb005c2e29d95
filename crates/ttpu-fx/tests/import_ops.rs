//! Decompositions beyond the fixtures, from inline programs. Every statement carries the
//! annotation PyTorch prints for it, and the importer checks each decomposition's result type
//! against it, so these cases pin dtype promotion, shape rules and dim normalisation per op; a few
//! also look at the IR built.

mod common;

use common::{Case, check, import, program, try_import};
use ttpu_fx::{Error, ImportOptions};

#[test]
fn type_promotion_follows_pytorch() {
    let cases: &[Case<'_>] = &[
        (&[("x", "i32[2]")], "f32[2]", "aten.add.Tensor(x, 1.5)"),
        (&[("x", "i32[2]")], "i32[2]", "aten.add.Tensor(x, 7)"),
        (&[("x", "f16[2]")], "f16[2]", "aten.mul.Tensor(x, 0.1)"),
        (&[("x", "i64[2]"), ("y", "f16[]")], "f16[2]", "aten.add.Tensor(x, y)"),
        (&[("x", "f16[2]"), ("y", "f64[]")], "f16[2]", "aten.add.Tensor(x, y)"),
        (&[("x", "b8[2]"), ("y", "b8[2]")], "b8[2]", "aten.add.Tensor(x, y)"),
        (&[("x", "u8[2]"), ("y", "i8[2]")], "i16[2]", "aten.mul.Tensor(x, y)"),
        (&[("x", "f16[2]"), ("y", "bf16[2]")], "f32[2]", "aten.sub.Tensor(x, y)"),
        (&[("x", "b8[2]")], "i64[2]", "aten.add.Tensor(x, 1)"),
        (&[("x", "i64[2]")], "f32[2]", "aten.div.Tensor(x, 2)"),
        (&[("x", "i64[2]")], "i64[2]", "aten.div.Tensor_mode(x, 2, rounding_mode = 'floor')"),
        (&[("x", "i32[2]")], "i32[2]", "aten.div.Tensor_mode(x, -3, rounding_mode = 'trunc')"),
        (&[("x", "f32[2]"), ("y", "f32[2]")], "f32[2]", "aten.div.Tensor_mode(x, y, rounding_mode = 'floor')"),
        (&[("x", "i64[2]")], "b8[2]", "aten.gt.Scalar(x, 0.5)"),
        (&[("x", "f32[2, 3]"), ("y", "i64[3]")], "b8[2, 3]", "aten.eq.Tensor(x, y)"),
        (&[("c", "b8[2, 1]"), ("x", "i64[3]"), ("y", "f32[]")], "f32[2, 3]", "aten.where.self(c, x, y)"),
        (&[("c", "b8[2]")], "f32[2]", "aten.where.Scalar(c, 1.0, 0)"),
        (&[("x", "i64[2]")], "f32[2]", "aten.exp.default(x)"),
        (&[("x", "i64[2]")], "i64[2]", "aten.pow.Tensor_Scalar(x, 2)"),
        (&[("x", "i64[2]")], "f32[2]", "aten.pow.Tensor_Scalar(x, 0.5)"),
        (&[("x", "i64[2]")], "i64[2]", "aten.pow.Scalar(2, x)"),
        (&[("x", "i64[2]")], "f32[2]", "aten.pow.Scalar(2.0, x)"),
        (&[("x", "f32[2]"), ("y", "i32[2]")], "f32[2]", "aten.pow.Tensor_Tensor(x, y)"),
        (&[("x", "i64[2]")], "f32[2]", "aten.clamp.default(x, 0.5)"),
        (&[("x", "f32[2]")], "f32[2]", "aten.clamp.default(x, None, 1.0)"),
        (&[("x", "b8[2]")], "b8[2]", "aten.bitwise_and.Scalar(x, True)"),
        (&[("x", "i32[2]"), ("y", "i64[2]")], "i64[2]", "aten.bitwise_xor.Tensor(x, y)"),
        (&[("x", "f32[2]"), ("y", "i32[2]")], "b8[2]", "aten.logical_and.default(x, y)"),
        (&[("x", "i32[2]")], "f32[2]", "aten.reciprocal.default(x)"),
        (&[("x", "i32[2]")], "i32[2]", "aten.remainder.Scalar(x, 3)"),
        (&[("x", "f32[2]"), ("y", "f64[2]")], "f64[2]", "aten.maximum.default(x, y)"),
        (&[("x", "i64[2]")], "i64[2]", "aten.rsub.Scalar(x, 1)"),
    ];
    for (params, ty, call) in cases {
        check(params, ty, call);
    }
}

#[test]
fn promotion_errors() {
    let options = ImportOptions::default();
    let cases: &[Case<'_>] = &[
        (&[("x", "b8[2]"), ("y", "b8[2]")], "b8[2]", "aten.sub.Tensor(x, y)"),
        (&[("x", "i64[2]"), ("y", "i64[2]")], "i64[2]", "aten.add.Tensor(x, y, alpha = 0.5)"),
        (&[("x", "i64[2, 3]")], "i64[2]", "aten.mean.dim(x, [1])"),
        (&[("x", "f32[2]")], "f32[2]", "aten.bitwise_and.Scalar(x, 1)"),
        (&[("x", "f32[2]"), ("y", "f32[3]")], "f32[2]", "aten.add.Tensor(x, y)"),
    ];
    for (params, ty, call) in cases {
        let body = format!("out: \"{ty}\" = torch.ops.{call}");
        match try_import(params, &[&body], &["out"], &options) {
            Err(error) if matches!(*error, Error::BadArguments { .. }) => {}
            other => panic!("{call}: expected bad arguments, got {other:?}"),
        }
    }
}

#[test]
fn reductions() {
    let x = [("x", "f32[2, 3, 4]")];
    check(&x, "f32[2, 1, 4]", "aten.sum.dim_IntList(x, [-2], True)");
    check(&x, "f32[]", "aten.sum.default(x)");
    check(&x, "f64[]", "aten.sum.default(x, dtype = torch.float64)");
    check(&[("x", "b8[2, 3]")], "i64[2]", "aten.sum.dim_IntList(x, [1])");
    check(&[("x", "i32[2, 3]")], "i64[]", "aten.sum.dim_IntList(x, [])");
    check(&x, "f32[4]", "aten.mean.dim(x, [0, 1])");
    check(&x, "f32[]", "aten.mean.default(x)");
    check(&[("x", "bf16[2, 3]")], "bf16[2, 1]", "aten.mean.dim(x, [-1], True)");
    check(&[("x", "i64[2, 3]")], "f32[2]", "aten.mean.dim(x, [1], dtype = torch.float32)");
    check(&x, "f32[]", "aten.amax.default(x)");
    check(&x, "f32[2, 3, 1]", "aten.amin.default(x, [-1], True)");
    check(&[("x", "i32[2, 3]")], "i64[3]", "aten.prod.dim_int(x, 0)");
    check(&x, "b8[2, 4]", "aten.any.dim(x, 1)");
    check(&x, "b8[]", "aten.all.default(x)");
    check(&x, "i64[2, 4]", "aten.argmax.default(x, 1)");
    check(&x, "i64[]", "aten.argmin.default(x)");
    check(&x, "i64[2, 1, 4]", "aten.argmax.default(x, -2, True)");
    check(&x, "f32[2, 4]", "aten.var.correction(x, [1], correction = 0)");
    check(&x, "f32[]", "aten.max.default(x)");
    check(&x, "f32[2, 3, 4]", "aten.cumsum.default(x, -1)");
    check(&[("x", "b8[2, 3]")], "i64[2, 3]", "aten.cumsum.default(x, 0)");
    check(&x, "f32[1, 1, 1]", "aten.std.correction(x, None, keepdim = True)");
}

#[test]
fn views_and_slices() {
    let x = [("x", "f32[2, 3, 4]")];
    check(&x, "f32[6, 4]", "aten.view.default(x, [-1, 4])");
    check(&x, "f32[24]", "aten._unsafe_view.default(x, [24])");
    check(&x, "f32[4, 3, 2]", "aten.permute.default(x, [-1, 1, 0])");
    check(&x, "f32[2, 4, 3]", "aten.transpose.int(x, -1, -2)");
    check(&[("x", "f32[3, 1]")], "f32[2, 3, 4]", "aten.expand.default(x, [2, -1, 4])");
    check(&[("x", "f32[1, 3, 1]")], "f32[3]", "aten.squeeze.default(x)");
    check(&[("x", "f32[1, 3, 1]")], "f32[1, 3]", "aten.squeeze.dim(x, -1)");
    check(&[("x", "f32[1, 3, 1]")], "f32[1, 3, 1]", "aten.squeeze.dims(x, [1])");
    check(&[("x", "f32[3]")], "f32[3, 1]", "aten.unsqueeze.default(x, -1)");
    let v = [("x", "f32[10]")];
    check(&v, "f32[3]", "aten.slice.Tensor(x, 0, -3, 9223372036854775807)");
    check(&v, "f32[4]", "aten.slice.Tensor(x, 0, None, None, 3)");
    check(&v, "f32[0]", "aten.slice.Tensor(x, 0, 5, 2)");
    check(&v, "f32[10]", "aten.slice.Tensor(x, 0, -100, 100)");
    check(&v, "f32[1]", "aten.slice.Tensor(x, -1, 1, -7, 2)");
    check(&v, "f32[2]", "aten.slice.Tensor(x, -1, 1, -6, 2)");
    check(&x, "f32[2, 3]", "aten.select.int(x, -1, -1)");
    check(&[("x", "i32[2]"), ("y", "f32[3]")], "f32[5]", "aten.cat.default([x, y])");
    check(&[("x", "f32[2, 3]"), ("e", "f32[0]")], "f32[2, 3]", "aten.cat.default([x, e], -1)");
    check(&[("x", "f32[2, 3]")], "f32[4, 3]", "aten.constant_pad_nd.default(x, [1, -1, 0, 2])");
    check(&[("x", "i64[2, 3]")], "i64[2, 5]", "aten.constant_pad_nd.default(x, [1, 1], -1)");
    check(&x, "f32[2, 3, 4]", "aten.flip.default(x, [0, -1])");
    check(&[("x", "f32[5, 2]"), ("i", "i64[3]")], "f32[3, 2]", "aten.index_select.default(x, 0, i)");
    check(&[("x", "f32[2, 3]")], "f32[2, 4, 6]", "aten.repeat.default(x, [2, 2, 2])");
    check(&x, "f64[2, 3, 4]", "aten._to_copy.default(x, dtype = torch.float64, layout = torch.strided)");
    check(&x, "f32[2, 3, 4]", "aten.clone.default(x, memory_format = torch.contiguous_format)");
    check(&[("x", "f32[2, 3]")], "f32[3, 2]", "aten.t.default(x)");
}

#[test]
fn multi_output_ops() {
    import(
        &[("x", "f32[5, 2]")],
        &[
            "split_with_sizes = torch.ops.aten.split_with_sizes.default(x, [2, 3])",
            r#"a: "f32[2, 2]" = split_with_sizes[0]"#,
            r#"b: "f32[3, 2]" = split_with_sizes[-1]"#,
            "split = torch.ops.aten.split.Tensor(x, 2)",
            r#"c: "f32[1, 2]" = split[2]"#,
            "unbind = torch.ops.aten.unbind.int(x, 1)",
            r#"d: "f32[5]" = operator.getitem(unbind, 1)"#,
        ],
        &["a", "b", "c", "d"],
    );
    import(
        &[("x", "f32[2, 3, 4]"), ("w", "f32[3, 4]")],
        &[
            "native_layer_norm = torch.ops.aten.native_layer_norm.default(x, [3, 4], w, None, 1e-05)",
            r#"out: "f32[2, 3, 4]" = native_layer_norm[0]"#,
            r#"mean: "f32[2, 1, 1]" = native_layer_norm[1]"#,
            r#"rstd: "f32[2, 1, 1]" = native_layer_norm[2]"#,
        ],
        &["out", "mean", "rstd"],
    );
    import(
        &[("x", "bf16[2, 4]"), ("w", "f32[4]"), ("b", "f32[4]")],
        &[
            "native_layer_norm = torch.ops.aten.native_layer_norm.default(x, [4], w, b, 1e-05)",
            r#"out: "bf16[2, 4]" = native_layer_norm[0]"#,
            r#"rstd: "f32[2, 1]" = native_layer_norm[2]"#,
        ],
        &["out", "rstd"],
    );
    import(
        &[("x", "f32[2, 3, 5, 5]"), ("m", "f32[3]"), ("v", "f32[3]")],
        &[
            "bn = torch.ops.aten._native_batch_norm_legit_no_training.default(x, None, None, m, v, 0.1, 1e-05)",
            r#"out: "f32[2, 3, 5, 5]" = bn[0]"#,
            r#"saved: "f32[0]" = bn[1]"#,
        ],
        &["out", "saved"],
    );
    let pooled = import(
        &[("x", "f32[1, 2, 7, 7]")],
        &[
            "pool = torch.ops.aten.max_pool2d_with_indices.default(x, [3, 3], [2, 2], [1, 1], [1, 1], True)",
            r#"values: "f32[1, 2, 4, 4]" = pool[0]"#,
            r#"indices: "i64[1, 2, 4, 4]" = pool[1]"#,
        ],
        &["values", "indices"],
    );
    assert_eq!(pooled.signature.outputs[1].ty.to_string(), "i64[1, 2, 4, 4]");
    import(
        &[("x", "f32[2, 3, 4]")],
        &[
            "max = torch.ops.aten.max.dim(x, -1, True)",
            r#"values: "f32[2, 3, 1]" = max[0]"#,
            r#"indices: "i64[2, 3, 1]" = max[1]"#,
        ],
        &["values", "indices"],
    );
    import(
        &[("x", "f32[2, 6, 3, 3]"), ("w", "f32[6]")],
        &[
            "gn = torch.ops.aten.native_group_norm.default(x, w, w, 2, 6, 9, 3, 1e-05)",
            r#"out: "f32[2, 6, 3, 3]" = gn[0]"#,
            r#"mean: "f32[2, 3]" = gn[1]"#,
        ],
        &["out", "mean"],
    );
}

#[test]
fn unused_results_are_dropped() {
    // Only the pooled values are used: the index computation is compacted away, leaving the
    // window max and its NaN propagation (compare, or-window, NaN splat, select).
    let module = import(
        &[("x", "f32[1, 1, 4, 4]")],
        &[
            "pool = torch.ops.aten.max_pool2d_with_indices.default(x, [2, 2], [2, 2])",
            r#"values: "f32[1, 1, 2, 2]" = pool[0]"#,
        ],
        &["values"],
    );
    let text = ttpu_ir::text::print(&module.graph);
    assert_eq!(text.lines().filter(|line| line.trim_start().starts_with('%')).count(), 6, "{text}");
    assert!(text.contains("reduce_window(%0) {kind = max"), "{text}");
    assert!(!text.contains("iota"), "no index computation is left: {text}");
}

#[test]
fn nn_ops() {
    check(&[("x", "f32[2, 3]")], "f32[2, 3]", "aten.gelu.default(x, approximate = 'tanh')");
    check(&[("x", "bf16[2, 3]")], "bf16[2, 3]", "aten.gelu.default(x)");
    check(&[("x", "f32[2, 3]")], "f32[2, 3]", "aten.silu.default(x)");
    check(&[("x", "f32[2, 3]")], "f32[2, 3]", "aten.hardtanh.default(x, 0.0, 6.0)");
    check(&[("x", "bf16[2, 3]")], "f32[2, 3]", "aten._softmax.default(x, -1, True)");
    check(&[("x", "f32[2, 3]")], "f32[2, 3]", "aten._log_softmax.default(x, 0, False)");
    check(
        &[("b", "f32[3]"), ("a", "f32[2, 4]"), ("m", "f32[4, 3]")],
        "f32[2, 3]",
        "aten.addmm.default(b, a, m, beta = 0.5, alpha = 2)",
    );
    check(&[("a", "bf16[2, 4]"), ("m", "bf16[4, 3]")], "bf16[2, 3]", "aten.mm.default(a, m)");
    check(
        &[("b", "f32[1, 2, 3]"), ("x", "f32[5, 2, 4]"), ("y", "f32[5, 4, 3]")],
        "f32[5, 2, 3]",
        "aten.baddbmm.default(b, x, y)",
    );
    // 1-D convolution, stride 2, no bias.
    check(
        &[("x", "f32[2, 3, 10]"), ("w", "f32[6, 3, 3]")],
        "f32[2, 6, 4]",
        "aten.convolution.default(x, w, None, [2], [0], [1], False, [0], 1)",
    );
    // 3-D convolution with a single stride/padding value for every dim.
    check(
        &[("x", "f32[1, 2, 4, 4, 4]"), ("w", "f32[4, 2, 3, 3, 3]"), ("b", "f32[4]")],
        "f32[1, 4, 4, 4, 4]",
        "aten.convolution.default(x, w, b, [1], [1], [1], False, [0], 1)",
    );
    // Transposed, grouped: weight [C_in, C_out / groups, kH, kW].
    check(
        &[("x", "f32[1, 4, 5, 5]"), ("w", "f32[4, 2, 3, 3]"), ("b", "f32[4]")],
        "f32[1, 4, 10, 10]",
        "aten.convolution.default(x, w, b, [2, 2], [1, 1], [1, 1], True, [1, 1], 2)",
    );
    check(
        &[("x", "f32[1, 2, 7, 7]")],
        "f32[1, 2, 3, 3]",
        "aten.avg_pool2d.default(x, [3, 3], [2, 2], [0, 0], False, True, 5)",
    );
    check(&[("x", "bf16[2, 3, 8]")], "bf16[2, 3, 4]", "aten.avg_pool1d.default(x, [2])");
    check(&[("w", "f32[10, 4]"), ("i", "i32[2, 3]")], "f32[2, 3, 4]", "aten.embedding.default(w, i)");
    check(&[("x", "f32[2, 3, 5, 7]")], "f32[2, 3, 2, 3]", "aten._adaptive_avg_pool2d.default(x, [2, 3])");
    check(&[("x", "f32[1, 3, 4, 4]")], "f32[1, 3, 8, 6]", "aten.upsample_nearest2d.vec(x, [8, 6], None)");
    check(&[("x", "f32[1, 3, 4, 4]")], "f32[1, 3, 8, 8]", "aten.upsample_nearest2d.vec(x, None, [2.0, 2.0])");
    check(&[("x", "f32[2, 3]")], "f32[2, 3]", "aten.hardswish.default(x)");
    check(&[("x", "f32[2, 3]")], "f32[2, 3]", "aten.elu.default(x)");
    check(&[("x", "f32[2, 4, 4]")], "f32[2, 4, 4]", "aten.triu.default(x, 1)");
}

#[test]
fn factories() {
    let none: &[(&str, &str)] = &[("x", "f32[2]")];
    check(none, "i64[5]", "aten.arange.default(5)");
    check(none, "i64[5]", "aten.arange.start(2, 7)");
    check(none, "f32[4]", "aten.arange.start_step(0, 1, 0.25)");
    check(none, "i64[4]", "aten.arange.start_step(10, 0, -3)");
    check(none, "f64[3]", "aten.arange.start_step(0, 3, dtype = torch.float64)");
    check(none, "b8[2]", "aten.full.default([2], True)");
    check(none, "i64[2, 2]", "aten.full.default([2, 2], 3, device = device(type='cpu'), pin_memory = False)");
    check(none, "f32[]", "aten.scalar_tensor.default(3)");
    check(none, "i32[2]", "aten.full_like.default(x, 7, dtype = torch.int32)");
    check(none, "f32[3]", "aten.zeros.default([3])");
    check(none, "f32[2]", "aten.ones_like.default(x)");
    check(none, "f32[4, 1]", "aten.new_zeros.default(x, [4, 1])");
    check(none, "f32[2, 2]", "aten.empty.memory_format([2, 2], dtype = torch.float32)");
}

#[test]
fn symbolic_sizes_flow_through_sym_nodes() {
    let body = [
        r#"sym_size_int: "Sym(s0)" = torch.ops.aten.sym_size.int(x, 0)"#,
        r#"view: "f32[s0, 2, 2]" = torch.ops.aten.view.default(x, [sym_size_int, 2, 2])"#,
        r#"ge: "Sym(s0 >= 2)" = sym_size_int >= 2"#,
        r#"_assert_scalar = torch.ops.aten._assert_scalar.default(ge, "Runtime assertion failed for expression 2 <= s0 on node 'ge'");  ge = _assert_scalar = None"#,
        r#"mul: "Sym(2*s0)" = sym_size_int * 2"#,
        r#"view_1: "f32[2*s0, 2]" = torch.ops.aten.view.default(x, [mul, 2])"#,
        r#"full: "f32[s0, 3]" = torch.ops.aten.full.default([sym_size_int, 3], 1.0)"#,
    ];
    let source = program(&[("x", "f32[s0, 4]")], &body, &["view", "view_1", "full"], "{s0: VR[2, 64]}");
    // Without a value, `2*s0` is a compound dim.
    let module =
        ttpu_fx::load(&source, "inline.fx", &ImportOptions::default()).unwrap_or_else(|error| panic!("{error}"));
    let types: Vec<String> = module.signature.outputs.iter().map(|output| output.ty.to_string()).collect();
    assert_eq!(types, ["f32[s0, 2, 2]", "f32[2*s0, 2]", "f32[s0, 3]"]);
    // With a value everything is static.
    let mut options = ImportOptions::default();
    options.symbol_values.insert("s0".into(), 3);
    let module = ttpu_fx::load(&source, "inline.fx", &options).unwrap_or_else(|error| panic!("{error}"));
    let types: Vec<String> = module.signature.outputs.iter().map(|output| output.ty.to_string()).collect();
    assert_eq!(types, ["f32[3, 2, 2]", "f32[6, 2]", "f32[3, 3]"]);
    // A value that breaks a runtime assert is reported.
    let failing = source.replace("sym_size_int >= 2", "sym_size_int >= 5");
    let error = ttpu_fx::load(&failing, "inline.fx", &options).expect_err("assert fails");
    assert!(error.to_string().contains("Runtime assertion failed"), "{error}");
    // Bare symbols stay symbolic, through views and factories.
    let body = [
        r#"sym_size_int: "Sym(s0)" = torch.ops.aten.sym_size.int(x, 0)"#,
        r#"view: "f32[s0, 2, 2]" = torch.ops.aten.view.default(x, [sym_size_int, 2, 2])"#,
        r#"view_1: "f32[s0, 4]" = torch.ops.aten.view.default(view, [-1, 4])"#,
        r#"full: "f32[s0, 3]" = torch.ops.aten.full.default([sym_size_int, 3], 1.0)"#,
        r#"sum_1: "f32[s0]" = torch.ops.aten.sum.dim_IntList(view_1, [1])"#,
    ];
    let source = program(&[("x", "f32[s0, 4]")], &body, &["view_1", "full", "sum_1"], "{s0: VR[2, 64]}");
    let module =
        ttpu_fx::load(&source, "inline.fx", &ImportOptions::default()).unwrap_or_else(|error| panic!("{error}"));
    ttpu_ir::verify(&module.graph).expect("valid IR");
    let types: Vec<String> = module.signature.outputs.iter().map(|output| output.ty.to_string()).collect();
    assert_eq!(types, ["f32[s0, 4]", "f32[s0, 3]", "f32[s0]"]);
}

#[test]
fn outputs_and_signature_edge_cases() {
    // A value returned twice is fine.
    let module = import(&[("x", "f32[2]")], &[r#"y: "f32[2]" = torch.ops.aten.neg.default(x)"#], &["y", "y"]);
    assert_eq!(module.graph.outputs.len(), 2);
    let keys: Vec<&str> = module.signature.outputs.iter().map(|output| output.key.as_str()).collect();
    assert_eq!(keys, ["output_0", "output_1"]);
    // An input returned as is.
    let module = import(&[("x", "f32[2]")], &[], &["x"]);
    assert_eq!(module.graph.outputs[0], module.graph.inputs[0]);
}

#[test]
fn supported_ops_lists_every_required_overload() {
    let supported = ttpu_fx::supported_ops();
    for op in [
        "aten.addmm.default",
        "aten.convolution.default",
        "aten.max_pool2d_with_indices.default",
        "aten.native_layer_norm.default",
        "aten.div.Tensor_mode",
        "aten.sym_size.int",
        "aten.arange.start_step",
    ] {
        assert!(supported.contains(&op), "{op} missing");
    }
    assert!(supported.len() > 150, "{} overloads", supported.len());
}

#[test]
fn slicing_a_symbolic_dim_to_its_own_size_is_the_identity() {
    let body = [
        r#"sym_size_int: "Sym(s0)" = torch.ops.aten.sym_size.int(x, 0)"#,
        r#"slice_1: "f32[s0, 4]" = torch.ops.aten.slice.Tensor(x, 0, 0, sym_size_int)"#,
        r#"slice_2: "f32[s0, 2]" = torch.ops.aten.slice.Tensor(slice_1, 1, 1, 9223372036854775807, 2)"#,
    ];
    let source = program(&[("x", "f32[s0, 4]")], &body, &["slice_2"], "{s0: VR[2, 64]}");
    // The first slice is the identity; the second takes the symbolic dim whole.
    let module =
        ttpu_fx::load(&source, "inline.fx", &ImportOptions::default()).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(module.graph.node_count(), 1);
    assert_eq!(module.signature.outputs[0].ty.to_string(), "f32[s0, 2]");
    let mut options = ImportOptions::default();
    options.symbol_values.insert("s0".into(), 5);
    let module = ttpu_fx::load(&source, "inline.fx", &options).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(module.signature.outputs[0].ty.to_string(), "f32[5, 2]");
}

#[test]
fn arange_with_a_symbolic_end() {
    // `arange(x.size(1))` (position ids in Hugging Face models) has the bare symbol as its length
    // and stays symbolic; a dtype applies as for literal ends.
    let body = [
        r#"sym_size_int: "Sym(s0)" = torch.ops.aten.sym_size.int(x, 0)"#,
        r#"arange: "i64[s0]" = torch.ops.aten.arange.default(sym_size_int, device = device(type='cpu'), pin_memory = False)"#,
        r#"arange_1: "f32[s0]" = torch.ops.aten.arange.start_step(0, sym_size_int, 1, dtype = torch.float32)"#,
        // The step left out, as torch.export prints `torch.arange(x.shape[1])`.
        r#"arange_2: "i64[s0]" = torch.ops.aten.arange.start_step(0, sym_size_int, layout = torch.strided, device = device(type='cpu'), pin_memory = False)"#,
    ];
    let source = program(&[("x", "f32[s0, 4]")], &body, &["arange", "arange_1", "arange_2"], "{s0: VR[2, 64]}");
    let module =
        ttpu_fx::load(&source, "inline.fx", &ImportOptions::default()).unwrap_or_else(|error| panic!("{error}"));
    ttpu_ir::verify(&module.graph).expect("valid IR");
    let types: Vec<String> = module.signature.outputs.iter().map(|output| output.ty.to_string()).collect();
    assert_eq!(types, ["i64[s0]", "f32[s0]", "i64[s0]"]);

    // Compound lengths with literal starts and steps stay symbolic.
    for (ty, call) in [
        ("i64[s0 - 2]", "aten.arange.start(2, sym_size_int)"),
        ("i64[((s0 + 1)//3)]", "aten.arange.start_step(1, sym_size_int, 3)"),
    ] {
        let body = [
            r#"sym_size_int: "Sym(s0)" = torch.ops.aten.sym_size.int(x, 0)"#.to_owned(),
            format!(r#"out: "{ty}" = torch.ops.{call}"#),
        ];
        let body: Vec<&str> = body.iter().map(String::as_str).collect();
        let source = program(&[("x", "f32[s0, 4]")], &body, &["out"], "{s0: VR[2, 64]}");
        let module = ttpu_fx::load(&source, "inline.fx", &ImportOptions::default())
            .unwrap_or_else(|error| panic!("{call}: {error}"));
        let printed = ttpu_ir::text::print(&module.graph);
        assert!(printed.contains(&format!("-> ({})", ty.replace("((s0 + 1)//3)", "(s0 + 1)//3"))), "{printed}");
    }
    // A symbolic start (`s0` counted down, or up to 10) needs the symbol's value; with it they
    // are ordinary aranges.
    let cases = [
        ("i64[s0 - 2]", "aten.arange.start_step(sym_size_int, 2, -1)", "i64[3]"),
        ("i64[10 - s0]", "aten.arange.start(sym_size_int, 10)", "i64[5]"),
    ];
    for (ty, call, concrete) in cases {
        let body = [
            r#"sym_size_int: "Sym(s0)" = torch.ops.aten.sym_size.int(x, 0)"#.to_owned(),
            format!(r#"out: "{ty}" = torch.ops.{call}"#),
        ];
        let body: Vec<&str> = body.iter().map(String::as_str).collect();
        let source = program(&[("x", "f32[s0, 4]")], &body, &["out"], "{s0: VR[2, 64]}");
        let error = ttpu_fx::load(&source, "inline.fx", &ImportOptions::default()).expect_err(call);
        assert!(matches!(error, Error::DynamicDims { .. }), "{call}: {error}");
        let mut options = ImportOptions::default();
        options.symbol_values.insert("s0".into(), 5);
        let module = ttpu_fx::load(&source, "inline.fx", &options).unwrap_or_else(|error| panic!("{call}: {error}"));
        assert_eq!(module.signature.outputs[0].ty.to_string(), concrete, "{call}");
    }

    // A zero step is refused whatever the end.
    let body = [
        r#"sym_size_int: "Sym(s0)" = torch.ops.aten.sym_size.int(x, 0)"#,
        r#"out: "i64[s0]" = torch.ops.aten.arange.start_step(0, sym_size_int, 0)"#,
    ];
    let source = program(&[("x", "f32[s0, 4]")], &body, &["out"], "{s0: VR[2, 64]}");
    let error = ttpu_fx::load(&source, "inline.fx", &ImportOptions::default()).expect_err("zero step");
    assert!(matches!(error, Error::BadArguments { .. }), "{error}");
    assert!(error.to_string().contains("nonzero step"), "{error}");
}

#[test]
fn complex_types_and_transforms() {
    let cases: &[Case<'_>] = &[
        (&[("x", "f32[2, 8]")], "c64[2, 5]", "aten._fft_r2c.default(x, [1], 0, True)"),
        (&[("x", "f64[6, 3]")], "c128[4, 3]", "aten._fft_r2c.default(x, [0], 2, True)"),
        (&[("x", "f32[4, 6, 3]")], "c64[4, 6, 2]", "aten._fft_r2c.default(x, [0, 2], 1, True)"),
        (&[("x", "f32[2, 7]")], "c64[2, 7]", "aten._fft_r2c.default(x, [1], 0, False)"),
        (&[("z", "c64[2, 5]")], "f32[2, 8]", "aten._fft_c2r.default(z, [1], 2, 8)"),
        (&[("z", "c64[2, 5]")], "f32[2, 9]", "aten._fft_c2r.default(z, [1], 2, 9)"),
        // PyTorch's kernel reads only the first last_dim_size/2 + 1 entries.
        (&[("z", "c64[2, 6]")], "f32[2, 8]", "aten._fft_c2r.default(z, [1], 0, 8)"),
        (&[("z", "c128[3, 4]")], "c128[3, 4]", "aten._fft_c2c.default(z, [0, 1], 1, False)"),
        (&[("z", "c64[3, 4]")], "f32[3, 4, 2]", "aten.view_as_real.default(z)"),
        (&[("x", "f64[3, 2]")], "c128[3]", "aten.view_as_complex.default(x)"),
        (&[("z", "c64[3]")], "f32[3]", "aten.abs.default(z)"),
        (&[("z", "c64[3]")], "f32[3]", "aten.angle.default(z)"),
        (&[("x", "i64[3]")], "f32[3]", "aten.angle.default(x)"),
        (&[("z", "c64[3]"), ("x", "f64[3]")], "c128[3]", "aten.mul.Tensor(z, x)"),
        (&[("z", "c64[3]"), ("x", "i64[3]")], "c64[3]", "aten.add.Tensor(z, x)"),
        (&[("z", "c64[3]")], "c64[3]", "aten.mul.Tensor(z, 2)"),
        (&[("x", "f32[3]"), ("y", "f32[1]")], "c64[3]", "aten.complex.default(x, y)"),
        (&[("x", "f32[3]")], "f32[3]", "aten.real.default(x)"),
        (&[("z", "c64[3]")], "b8[3]", "aten.isnan.default(z)"),
        (&[("z", "c64[3]")], "b8[3]", "aten.isinf.default(z)"),
    ];
    for (params, ty, call) in cases {
        check(params, ty, call);
    }
}

#[test]
fn complex_refusals_name_the_node() {
    let options = ImportOptions::default();
    let cases: &[Case<'_>] = &[
        (&[("x", "i64[8]")], "c64[5]", "aten._fft_r2c.default(x, [0], 0, True)"),
        (&[("x", "f32[8]")], "c64[5]", "aten._fft_r2c.default(x, [0], 3, True)"),
        (&[("x", "f32[2, 2, 2, 2]")], "c64[2, 2, 2, 2]", "aten._fft_r2c.default(x, [0, 1, 2, 3], 0, False)"),
        (&[("x", "f32[8]")], "c64[5]", "aten._fft_r2c.default(x, [1], 0, True)"),
        (&[("z", "c64[3]")], "f32[8]", "aten._fft_c2r.default(z, [0], 0, 8)"),
        (&[("z", "c64[5]")], "f32[8]", "aten._fft_c2r.default(z, [0], 0, 0)"),
        (&[("x", "f32[8]")], "c64[8]", "aten._fft_c2c.default(x, [0], 0, True)"),
        (&[("x", "f32[3, 3]")], "c64[3]", "aten.view_as_complex.default(x)"),
        (&[("x", "f32[3]")], "f32[3]", "aten.imag.default(x)"),
        (&[("x", "f32[3]"), ("y", "f64[3]")], "c128[3]", "aten.complex.default(x, y)"),
        (&[("z", "c64[3]")], "c64[3]", "aten.floor.default(z)"),
        (&[("z", "c64[3]")], "c64[3]", "aten.trunc.default(z)"),
        (&[("z", "c64[3]")], "c64[3]", "aten.round.decimals(z, decimals = 1)"),
        (&[("z", "c64[3]")], "c64[3]", "aten.sign.default(z)"),
        (&[("z", "c64[3]")], "b8[3]", "aten.signbit.default(z)"),
        (&[("z", "c64[3]"), ("w", "c64[3]")], "b8[3]", "aten.lt.Tensor(z, w)"),
        (&[("z", "c64[3]"), ("w", "c64[3]")], "c64[3]", "aten.maximum.default(z, w)"),
    ];
    for (params, ty, call) in cases {
        let body = format!("out: \"{ty}\" = torch.ops.{call}");
        match try_import(params, &[&body], &["out"], &options) {
            Err(error) if matches!(*error, Error::BadArguments { .. }) => {
                assert!(error.to_string().contains("at node `out`"), "{call}: {error}");
            }
            other => panic!("{call}: expected bad arguments, got {other:?}"),
        }
    }
}
