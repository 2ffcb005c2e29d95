//! Forms of valid programs that PyTorch's operator tests and the transformers architectures
//! produce and that once failed to import: zero-dim operands of indexing ops, symbolic-bool logic
//! in runtime assertions, slices sized by symbols the data decides, and batch norm statistics
//! whose annotation names the other float type.

mod common;

use common::{Case, check, program, try_import};
use ttpu_fx::{Error, ImportOptions};

#[test]
fn zero_dim_operands_count_as_one_dim() {
    let cases: &[Case<'_>] = &[
        (&[("x", "f32[]"), ("i", "i64[]")], "f32[]", "aten.index_select.default(x, 0, i)"),
        (&[("x", "f32[]"), ("i", "i64[1]")], "f32[]", "aten.index_select.default(x, -1, i)"),
        (&[("x", "f32[4, 5]"), ("i", "i64[]")], "f32[4, 1]", "aten.index_select.default(x, 1, i)"),
        (&[("x", "f32[]"), ("i", "i64[]")], "f32[]", "aten.gather.default(x, 0, i)"),
        (&[("x", "f32[]"), ("i", "i64[1]")], "f32[1]", "aten.gather.default(x, 0, i)"),
        (&[("x", "f32[3]"), ("i", "i64[]")], "f32[]", "aten.gather.default(x, 0, i)"),
        (&[("x", "f32[]"), ("i", "i64[]"), ("y", "f32[]")], "f32[]", "aten.scatter.src(x, 0, i, y)"),
        (&[("x", "f32[]"), ("i", "i64[1]")], "f32[]", "aten.scatter.value(x, 0, i, 2.0)"),
        (&[("x", "f32[]"), ("i", "i64[]"), ("y", "f32[]")], "f32[]", "aten.scatter_add.default(x, 0, i, y)"),
        (
            &[("x", "f32[]"), ("i", "i64[]"), ("y", "f32[]")],
            "f32[]",
            "aten.scatter_reduce.two(x, 0, i, y, 'amax', include_self = False)",
        ),
    ];
    for (params, ty, call) in cases {
        check(params, ty, call);
    }
}

#[test]
fn zero_dim_refusals_say_why() {
    let cases: &[(Case<'_>, &str)] = &[
        (
            (&[("x", "f32[]"), ("i", "i64[2]")], "f32[]", "aten.index_select.default(x, 0, i)"),
            "the index i64[2] of a zero-dim self must hold one value",
        ),
        (
            (&[("x", "f32[3]"), ("i", "i64[2, 1]")], "f32[2, 1]", "aten.gather.default(x, 0, i)"),
            "index i64[2, 1] must have the rank of self f32[3]",
        ),
    ];
    for ((params, ty, call), message) in cases {
        let body = format!("out: \"{ty}\" = torch.ops.{call}");
        let error = try_import(params, &[&body], &["out"], &ImportOptions::default()).expect_err(call);
        assert!(matches!(*error, Error::BadArguments { .. }), "{call}: {error}");
        assert!(error.to_string().ends_with(&format!("at node `out`: {message}")), "{call}: {error}");
    }
}

/// A value from `.item()` checked by runtime assertions joined with `&` and negated with
/// `torch.sym_not`, then used as an index.
fn item_index(assertion: &str) -> String {
    let body = [
        r#"item: "Sym(u0)" = torch.ops.aten._local_scalar_dense.default(i)"#,
        r#"lt: "Sym(u0 < 4)" = item < 4"#,
        r#"ge: "Sym(u0 >= 0)" = item >= 0"#,
        r#"eq: "Sym(Eq(u0, 7))" = item == 7"#,
        r#"sym_not: "Sym(Ne(u0, 7))" = torch.sym_not(eq)"#,
        assertion,
        r#"check = torch.ops.aten._assert_scalar.default(cond, "Runtime assertion failed")"#,
        r#"out: "f32[]" = torch.ops.aten.select.int(x, 0, item)"#,
    ];
    program(&[("x", "f32[4]"), ("i", "i64[]")], &body, &["out"], "{u0: VR[-9223372036854775808, 9223372036854775807]}")
}

#[test]
fn symbolic_bools_combine_in_runtime_assertions() {
    let values = |value: i64| ImportOptions {
        symbol_values: [("u0".to_string(), value)].into_iter().collect(),
        ..Default::default()
    };
    for assertion in [
        r#"cond: "Sym((u0 < 4) & (u0 >= 0))" = lt & ge"#,
        r#"cond: "Sym((u0 < 4) | Eq(u0, 7))" = lt | eq"#,
        r#"cond: "Sym(Ne(u0, 7) & (u0 >= 0))" = sym_not & ge"#,
    ] {
        let source = item_index(assertion);
        ttpu_fx::load(&source, "inline.fx", &values(2)).unwrap_or_else(|error| panic!("{assertion}: {error}"));
    }
    // Known false: the assertion fails at import.
    let source = item_index(r#"cond: "Sym((u0 < 4) & (u0 >= 0))" = lt & ge"#);
    let error = ttpu_fx::load(&source, "inline.fx", &values(5)).expect_err("u0 = 5 is out of range");
    assert!(error.to_string().contains("Runtime assertion failed"), "{error}");
    let source = item_index(r#"cond: "Sym(Ne(u0, 7))" = torch.sym_not(eq)"#);
    assert!(ttpu_fx::load(&source, "inline.fx", &values(7)).is_err(), "sym_not(7 == 7) is false");
    let source = item_index(r#"cond: "Sym(u0 < 4)" = lt & 3"#);
    let error = ttpu_fx::load(&source, "inline.fx", &values(2)).expect_err("an int is no bool");
    assert!(error.to_string().ends_with("operands of symbolic-bool logic must be bools or symbolic bools"), "{error}");
}

/// Two slices up to `.item()` values whose lengths the export names `u2` and `u3`.
fn item_slices(second: &str) -> String {
    let body = [
        r#"a: "Sym(u0)" = torch.ops.aten._local_scalar_dense.default(i)"#,
        r#"b: "Sym(u1)" = torch.ops.aten._local_scalar_dense.default(j)"#,
        r#"first: "f32[3, u2]" = torch.ops.aten.slice.Tensor(x, 1, 0, a)"#,
        second,
        r#"out: "f32[3, u2]" = torch.ops.aten.mul.Tensor(first, second)"#,
    ];
    program(&[("x", "f32[3, 8]"), ("i", "i64[]"), ("j", "i64[]")], &body, &["out"], "{}")
}

#[test]
fn sizes_named_by_the_data_keep_one_value() {
    let values = ImportOptions {
        symbol_values: [("u0".to_string(), 2), ("u1".to_string(), 5)].into_iter().collect(),
        ..Default::default()
    };
    let source = item_slices(r#"second: "f32[3, u2]" = torch.ops.aten.slice.Tensor(x, 1, b, 7)"#);
    let module = ttpu_fx::load(&source, "inline.fx", &values).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(module.graph.ty(module.graph.outputs[0]).to_string(), "f32[3, 2]");
    // `u2` is 2 after `first`: a slice of 3 annotated with it is a mismatch.
    let source = item_slices(r#"second: "f32[3, u2]" = torch.ops.aten.slice.Tensor(x, 1, b, 8)"#);
    let error = ttpu_fx::load(&source, "inline.fx", &values).expect_err("u2 cannot be 2 and 3");
    assert!(
        error.to_string().ends_with("node `second` is annotated f32[3, u2] but `aten.slice.Tensor` produces f32[3, 3]"),
        "{error}"
    );
}

#[test]
fn batch_norm_statistics_follow_the_kernel() {
    // PyTorch's shape function annotates the saved statistics of a half input with float
    // parameters as half; its CPU kernel saves them in float.
    let body = [
        "bn = torch.ops.aten._native_batch_norm_legit_functional.default(x, w, b, m, v, True, 0.1, 1e-05)",
        r#"out: "f16[2, 3, 4]" = bn[0]"#,
        r#"mean: "f16[3]" = bn[1]"#,
        r#"invstd: "f16[3]" = bn[2]"#,
    ];
    let params = [("x", "f16[2, 3, 4]"), ("w", "f32[3]"), ("b", "f32[3]"), ("m", "f32[3]"), ("v", "f32[3]")];
    let module = try_import(&params, &body, &["out", "mean", "invstd"], &ImportOptions::default())
        .unwrap_or_else(|error| panic!("{error}"));
    let types: Vec<String> = module.graph.outputs.iter().map(|&value| module.graph.ty(value).to_string()).collect();
    assert_eq!(types, ["f16[2, 3, 4]", "f32[3]", "f32[3]"]);
    // Half parameters save half statistics, as annotated.
    let params = [("x", "f16[2, 3, 4]"), ("w", "f16[3]"), ("b", "f16[3]"), ("m", "f16[3]"), ("v", "f16[3]")];
    let module = try_import(&params, &body, &["out", "mean", "invstd"], &ImportOptions::default())
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(module.graph.ty(module.graph.outputs[1]).to_string(), "f16[3]");
    // Any other op keeps the strict check.
    let body = ["sorted = torch.ops.aten.sort.default(x)", r#"values: "f32[2, 3, 4]" = sorted[0]"#];
    let error = try_import(&params[..1], &body, &["values"], &ImportOptions::default()).expect_err("sort keeps f16");
    assert!(
        error
            .to_string()
            .ends_with("node `values` is annotated f32[2, 3, 4] but `operator.getitem` produces f16[2, 3, 4]"),
        "{error}"
    );
}

#[test]
fn mode_indices_of_long_rows_are_refused() {
    let body = ["m = torch.ops.aten.mode.default(x, 1)", r#"values: "f32[2]" = m[0]"#, r#"indices: "i64[2]" = m[1]"#];
    // Rows of 16: the index is PyTorch's rule (the last one holding the value).
    try_import(&[("x", "f32[2, 16]")], &body, &["values", "indices"], &ImportOptions::default())
        .unwrap_or_else(|error| panic!("{error}"));
    // Rows of 17, values only: fine.
    try_import(&[("x", "f32[2, 17]")], &body[..2], &["values"], &ImportOptions::default())
        .unwrap_or_else(|error| panic!("{error}"));
    let error = try_import(&[("x", "f32[2, 17]")], &body, &["values", "indices"], &ImportOptions::default())
        .map(|_| ())
        .expect_err("the index of a row of 17 follows no rule");
    assert!(
        error.to_string().ends_with(
            "the index of mode along a dim of 17 is refused: PyTorch's CPU kernel sorts rows of more than 16 with an \
             unstable sort, so which index of the most frequent value it returns follows no rule"
        ),
        "{error}"
    );
}

#[test]
fn effect_tokens_thread_through_with_effects() {
    let source = "ExportedProgram:
    class GraphModule(torch.nn.Module):
        def forward(self, token: \"f32[0]\", s: \"f32[3, 3]\"):
            chol = torch.ops.aten.linalg_cholesky_ex.default(s)
            l: \"f32[3, 3]\" = chol[0]
            info: \"i32[]\" = chol[1]
            with_effects = torch.ops.higher_order.with_effects(token, torch.ops.aten._linalg_check_errors.default, info, 'linalg.cholesky', is_matrix = True)
            token_1: \"f32[0]\" = with_effects[0]
            return (token_1, l)
    
Graph signature:
    # inputs
    token: TOKEN
    s: USER_INPUT
    
    # outputs
    token_1: TOKEN
    l: USER_OUTPUT
    
Range constraints: {}
";
    let module =
        ttpu_fx::load(source, "inline.fx", &ImportOptions::default()).unwrap_or_else(|error| panic!("{error}"));
    // The token is neither an input nor an output: the program takes `s` and returns `l`.
    assert_eq!(module.signature.inputs.len(), 1);
    assert_eq!(module.signature.inputs[0].name, "s");
    assert_eq!(module.signature.outputs.len(), 1);
    assert_eq!(module.graph.ty(module.graph.outputs[0]).to_string(), "f32[3, 3]");
    // Anything else than an op as `with_effects`' second argument is refused.
    let bad = source.replace("torch.ops.aten._linalg_check_errors.default, info", "info, info");
    let error = ttpu_fx::load(&bad, "inline.fx", &ImportOptions::default()).expect_err("no op");
    assert!(error.to_string().ends_with("expects an effect token, an op and the op's arguments"), "{error}");
}

#[test]
fn bases_lapack_chooses_are_refused_with_the_reason() {
    let body = [
        "eigh = torch.ops.aten._linalg_eigh.default(a)",
        r#"values: "f32[4]" = eigh[0]"#,
        r#"vectors: "f32[4, 4]" = eigh[1]"#,
    ];
    // The eigenvalues alone import.
    try_import(&[("a", "f32[4, 4]")], &body[..2], &["values"], &ImportOptions::default())
        .unwrap_or_else(|error| panic!("{error}"));
    let error = try_import(&[("a", "f32[4, 4]")], &body, &["values", "vectors"], &ImportOptions::default())
        .map(|_| ())
        .expect_err("eigenvectors");
    assert!(
        error
            .to_string()
            .contains("reading the eigenvectors of linalg.eigh is refused: each is unique only up to its sign"),
        "{error}"
    );
    let body = ["svd = torch.ops.aten._linalg_svd.default(a)", r#"u: "f32[5, 3]" = svd[0]"#, r#"s: "f32[3]" = svd[1]"#];
    try_import(&[("a", "f32[5, 3]")], &[body[0], body[2]], &["s"], &ImportOptions::default())
        .unwrap_or_else(|error| panic!("{error}"));
    let error =
        try_import(&[("a", "f32[5, 3]")], &body, &["u", "s"], &ImportOptions::default()).map(|_| ()).expect_err("U");
    assert!(error.to_string().contains("reading the left singular vectors of linalg.svd is refused"), "{error}");
    let body = ["eig = torch.ops.aten.linalg_eig.default(a)", r#"w: "c64[4]" = eig[0]"#];
    let error =
        try_import(&[("a", "f32[4, 4]")], &body, &["w"], &ImportOptions::default()).map(|_| ()).expect_err("eig");
    assert!(matches!(*error, Error::OpNotSupported { .. }), "{error}");
    assert!(error.to_string().contains("in the order LAPACK's `geev` deflates them"), "{error}");
}

#[test]
fn incomplete_gamma_of_integers_is_refused() {
    // PyTorch's kernel is defined for floats; an integer operand beside a float one promotes.
    check(&[("a", "i64[3]"), ("x", "f32[3]")], "f32[3]", "aten.igamma.default(a, x)");
    let body = r#"out: "i64[3]" = torch.ops.aten.igammac.default(a, x)"#;
    let error = try_import(&[("a", "i64[3]"), ("x", "i64[3]")], &[body], &["out"], &ImportOptions::default())
        .expect_err("integers");
    assert!(
        error.to_string().ends_with("at node `out`: is defined for floating types only; its operands promote to i64"),
        "{error}"
    );
}

#[test]
fn ldl_solve_checks_its_pivots() {
    let body = r#"out: "f32[4, 2]" = torch.ops.aten.linalg_ldl_solve.default(ld, piv, b)"#;
    let params = [("ld", "f32[4, 4]"), ("piv", "i32[3]"), ("b", "f32[4, 2]")];
    let error = try_import(&params, &[body], &["out"], &ImportOptions::default()).expect_err("pivots");
    assert!(
        error.to_string().ends_with("linalg.ldl_solve: pivots i32[3] must hold one pivot per row of LD f32[4, 4]"),
        "{error}"
    );
    let params = [("ld", "f32[4, 4]"), ("piv", "i32[4]"), ("b", "f32[4, 2]")];
    try_import(&params, &[body], &["out"], &ImportOptions::default()).unwrap_or_else(|error| panic!("{error}"));
}

#[test]
fn polynomials_of_tensor_degrees_take_single_and_double_floats() {
    check(&[("x", "f32[3]"), ("n", "i64[3]")], "f32[3]", "aten.special_chebyshev_polynomial_t.default(x, n)");
    check(&[("n", "f64[2, 3]")], "f64[2, 3]", "aten.special_legendre_polynomial_p.x_scalar(0.5, n)");
    let body = r#"out: "f16[3]" = torch.ops.aten.special_hermite_polynomial_h.default(x, n)"#;
    let error = try_import(&[("x", "f16[3]"), ("n", "f16[3]")], &[body], &["out"], &ImportOptions::default())
        .expect_err("half");
    assert!(
        error.to_string().ends_with("is implemented for float32 and float64 (PyTorch's CPU kernel refuses f16)"),
        "{error}"
    );
}
