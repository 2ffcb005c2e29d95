//! Core ATen overloads added for `fixtures/ops/` (indexing, scatter, sort, resampling, distances,
//! inverse trig), from inline programs: each statement carries the annotation PyTorch printed for
//! it in those fixtures, and the importer checks the decomposition's result type against it.
//! Their numerics are checked end to end by `crates/ttpu/tests/ops_parity.rs`.

mod common;

use common::{Case, check, import, try_import};
use ttpu_fx::ImportOptions;

#[test]
fn indexing_shapes_follow_pytorch() {
    let x = ("x", "f32[4, 5, 6]");
    let (a, b) = (("a", "i64[4]"), ("b", "i64[4]"));
    let cases: &[Case<'_>] = &[
        (&[x, a], "f32[4, 5, 6]", "aten.index.Tensor(x, [a])"),
        (&[x, a], "f32[4, 4, 6]", "aten.index.Tensor(x, [None, a])"),
        (&[x, a, b], "f32[4, 6]", "aten.index.Tensor(x, [a, b])"),
        (&[x, b], "f32[4, 5, 4]", "aten.index.Tensor(x, [None, None, b])"),
        // Non-adjacent indexed dims put the index dims first.
        (&[x, a, b], "f32[4, 5]", "aten.index.Tensor(x, [a, None, b])"),
        (&[x, ("a", "i64[4, 1]"), ("b", "i64[1, 4]")], "f32[4, 4, 6]", "aten.index.Tensor(x, [a, b])"),
        (&[x, ("i", "i64[2, 5, 6]")], "f32[2, 5, 6]", "aten.gather.default(x, 0, i)"),
        (&[x, ("i", "i64[4, 5, 2]")], "f32[4, 5, 2]", "aten.gather.default(x, -1, i)"),
        (
            &[("x", "f32[4, 4]"), ("i", "i64[4]"), ("v", "f32[4, 4]")],
            "f32[4, 4]",
            "aten.index_put.default(x, [i], v, True)",
        ),
        (
            &[("x", "f32[4, 4]"), ("i", "i64[2]"), ("v", "f32[4, 2]")],
            "f32[4, 4]",
            "aten.index_put.default(x, [None, i], v)",
        ),
        (&[("x", "i64[4, 4]"), ("i", "i64[3]"), ("v", "i64[]")], "i64[4, 4]", "aten.index_put.default(x, [i, i], v)"),
        (&[("x", "f32[3, 4]"), ("i", "i64[3, 3]"), ("s", "f32[3, 3]")], "f32[3, 4]", "aten.scatter.src(x, 1, i, s)"),
        (&[("x", "f32[3, 4]"), ("i", "i64[2, 4]")], "f32[3, 4]", "aten.scatter.value(x, 0, i, 9.0)"),
        (
            &[("x", "f32[3, 4]"), ("i", "i64[3, 3]"), ("s", "f32[3, 3]")],
            "f32[3, 4]",
            "aten.scatter_add.default(x, 1, i, s)",
        ),
        (
            &[("x", "i64[3, 4]"), ("i", "i64[3, 4]"), ("s", "i64[3, 4]")],
            "i64[3, 4]",
            "aten.scatter_reduce.two(x, 1, i, s, 'mean', include_self = False)",
        ),
        (&[("x", "f32[4, 6]"), ("s", "f32[4, 2]")], "f32[4, 6]", "aten.slice_scatter.default(x, s, 1, 1, 5, 2)"),
        (&[("x", "f32[4, 6]"), ("s", "f32[4]")], "f32[4, 6]", "aten.select_scatter.default(x, s, 1, -1)"),
        (&[("x", "f32[2, 3, 4]")], "f32[2, 3]", "aten.diagonal.default(x, 1, 1, 2)"),
        (&[("x", "f32[2, 3, 4]")], "f32[4, 2]", "aten.diagonal.default(x, 0, 0, 1)"),
        (&[("x", "f32[3, 4]"), ("m", "b8[4]"), ("s", "f32[12]")], "f32[3, 4]", "aten.masked_scatter.default(x, m, s)"),
        (&[("x", "f32[3, 4]")], "f32[2, 3]", "aten.as_strided.default(x, [2, 3], [1, 4], 1)"),
        (&[("x", "f32[3, 4]")], "f32[3, 3, 2]", "aten.unfold.default(x, 1, 2, 1)"),
    ];
    for (params, ty, call) in cases {
        check(params, ty, call);
    }
}

#[test]
fn boolean_mask_indices_take_the_recorded_count_or_wait_for_the_data() {
    // A count the export printed as a number is the result's size.
    import(
        &[("x", "f32[4, 3]"), ("m", "b8[4]")],
        &[r#"out: "f32[2, 3]" = torch.ops.aten.index.Tensor(x, [m])"#],
        &["out"],
    );
    // A count the data decides (`u0`, in no input's type): without a value the import is a size
    // program that computes it, and the node waits; with one, the node has that size.
    let body = [
        r#"out: "f32[u0]" = torch.ops.aten.index.Tensor(x, [m])"#,
        r#"y: "f32[u0]" = torch.ops.aten.exp.default(out)"#,
    ];
    let params = [("x", "f32[4]"), ("m", "b8[4]")];
    let sizes = try_import(&params, &body, &["y"], &ImportOptions::default()).expect("a size program");
    assert_eq!(sizes.pending.len(), 1);
    assert_eq!(sizes.pending[0].symbol, "u0");
    assert_eq!(sizes.pending[0].node, "out");
    assert_eq!(sizes.graph.outputs.len(), 1);
    assert_eq!(sizes.graph.ty(sizes.graph.outputs[0]).to_string(), "i64[]");
    assert_eq!(sizes.signature.outputs[0].ty.to_string(), "f32[u0]");
    let options = ImportOptions { symbol_values: [("u0".to_string(), 3)].into_iter().collect(), ..Default::default() };
    let whole = try_import(&params, &body, &["y"], &options).expect("the whole program");
    assert!(whole.pending.is_empty());
    assert_eq!(whole.graph.ty(whole.graph.outputs[0]).to_string(), "f32[3]");
    // Without an annotation nothing names the size: an error, never a guessed size.
    let error = try_import(&params, &["out = torch.ops.aten.nonzero.default(m)"], &["out"], &ImportOptions::default())
        .expect_err("the size has no name");
    assert!(
        error
            .to_string()
            .contains("the number of nonzero elements is decided by the data, and the node has no annotated type"),
        "{error}"
    );
}

#[test]
fn sort_and_topk_give_values_and_indices() {
    import(
        &[("x", "f32[3, 5]")],
        &[
            "sort = torch.ops.aten.sort.default(x, 0, True)",
            r#"values: "f32[3, 5]" = sort[0]"#,
            r#"indices: "i64[3, 5]" = sort[1]"#,
            "topk = torch.ops.aten.topk.default(x, 2)",
            r#"top: "f32[3, 2]" = topk[0]"#,
            r#"where: "i64[3, 2]" = topk[1]"#,
            "stable = torch.ops.aten.sort.stable(x, stable = True, dim = -1)",
            r#"sorted: "f32[3, 5]" = stable[0]"#,
        ],
        &["values", "indices", "top", "where", "sorted"],
    );
}

#[test]
fn math_and_nn_overloads() {
    let cases: &[Case<'_>] = &[
        (&[("x", "f32[3]")], "f32[3]", "aten.asin.default(x)"),
        (&[("x", "i64[3]")], "f32[3]", "aten.acosh.default(x)"),
        (&[("x", "bf16[3]")], "bf16[3]", "aten.atanh.default(x)"),
        (&[("x", "f32[3]")], "b8[3]", "aten.isinf.default(x)"),
        (&[("x", "i32[3]")], "b8[3]", "aten.isinf.default(x)"),
        (&[("x", "f32[2, 3]"), ("y", "f32[3]")], "f32[2, 3]", "aten.copy.default(x, y)"),
        (&[("x", "i32[2, 3]")], "i32[2, 3]", "aten.fill.Scalar(x, 4)"),
        (&[("x", "f32[1, 2, 4, 5]")], "f32[1, 2, 8, 10]", "aten.upsample_bilinear2d.vec(x, None, False, [2.0, 2.0])"),
        (&[("x", "f32[1, 2, 4, 5]")], "f32[1, 2, 5, 7]", "aten.upsample_bilinear2d.vec(x, [5, 7], True, None)"),
        (&[("x", "f32[1, 2, 4, 3, 5]")], "f32[1, 2, 2, 1, 2]", "aten._adaptive_avg_pool3d.default(x, [2, 1, 2])"),
        (
            &[("x", "f32[2, 4, 3]"), ("y", "f32[2, 5, 3]")],
            "f32[2, 4, 5]",
            "aten._cdist_forward.default(x, y, 2.0, None)",
        ),
        (&[("x", "f32[4, 3]")], "f32[6]", "aten._pdist_forward.default(x, 1.0)"),
        (
            &[("x", "f32[2, 3, 4, 5]"), ("g", "f32[2, 3, 4, 2]")],
            "f32[2, 3, 3, 4]",
            "aten.grid_sampler_2d.default(x, g, 0, 2, True)",
        ),
    ];
    for (params, ty, call) in cases {
        check(params, ty, call);
    }
    import(
        &[("x", "f32[3, 4, 5]")],
        &[r#"out: "f32[3, 1, 5]" = torch.ops.aten.var.dim(x, [1], False, True)"#],
        &["out"],
    );
}

#[test]
fn multi_output_core_ops() {
    import(
        &[("x", "f32[3, 4]")],
        &[
            "dropout = torch.ops.aten.native_dropout.default(x, 0.5, False)",
            r#"out: "f32[3, 4]" = dropout[0]"#,
            r#"mask: "b8[3, 4]" = dropout[1]"#,
            "var_mean = torch.ops.aten.var_mean.correction(x, [1], correction = 1)",
            r#"var: "f32[3]" = var_mean[0]"#,
            r#"mean: "f32[3]" = var_mean[1]"#,
        ],
        &["out", "mask", "var", "mean"],
    );
    import(
        &[("x", "f32[3, 4, 5]"), ("w", "f32[4]")],
        &[
            "bn = torch.ops.aten._native_batch_norm_legit.no_stats(x, w, w, True, 0.1, 1e-05)",
            r#"out: "f32[3, 4, 5]" = bn[0]"#,
            r#"mean: "f32[4]" = bn[1]"#,
            r#"invstd: "f32[4]" = bn[2]"#,
            "pool = torch.ops.aten.adaptive_max_pool2d.default(x, [2, 3])",
            r#"values: "f32[3, 2, 3]" = pool[0]"#,
            r#"indices: "i64[3, 2, 3]" = pool[1]"#,
        ],
        &["out", "mean", "invstd", "values", "indices"],
    );
    import(
        &[("table", "f32[6, 4]"), ("idx", "i64[7]"), ("offsets", "i64[4]")],
        &[
            "bag = torch.ops.aten._embedding_bag_forward_only.default(table, idx, offsets, False, 2)",
            r#"out: "f32[4, 4]" = bag[0]"#,
        ],
        &["out"],
    );
    // Training dropout draws its mask from a random-bit generator.
    let module = try_import(
        &[("x", "f32[3, 4]")],
        &["dropout = torch.ops.aten.native_dropout.default(x, 0.5, True)", r#"out: "f32[3, 4]" = dropout[0]"#],
        &["out"],
        &ImportOptions::default(),
    )
    .unwrap_or_else(|error| panic!("{error}"));
    assert!(module.graph.nodes().any(|(_, node)| node.op.mnemonic() == "rng_bit_generator"));
}
