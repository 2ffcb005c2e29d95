//! Error messages of the parser: every `fixtures/errors/*.fx` with a sibling `.expected` file must
//! fail with exactly that message (`path:line:col: expected ..., found `...``), inline cases pin
//! the messages of other mistakes, and every prefix of a real program must parse or fail cleanly,
//! never panic. Set `TTPU_BLESS=1` to rewrite the `.expected` files from the current messages.

use std::path::PathBuf;

fn errors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/errors")
}

#[test]
fn error_fixtures_match_expected_messages() {
    let bless = std::env::var_os("TTPU_BLESS").is_some_and(|value| value == "1");
    let mut checked = 0;
    let mut entries: Vec<PathBuf> = std::fs::read_dir(errors_dir())
        .expect("fixtures/errors")
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "fx"))
        .collect();
    entries.sort();
    // As many as exist, each with its `.expected` message: a lost fixture fails here.
    assert!(entries.len() >= 23, "error fixtures went missing: {entries:?}");
    for path in &entries {
        assert!(path.with_extension("expected").exists() || bless, "{} has no .expected file", path.display());
    }
    for path in entries {
        let name = path.file_stem().and_then(|stem| stem.to_str()).expect("utf-8 name").to_owned();
        let expected_path = path.with_extension("expected");
        let source = std::fs::read_to_string(&path).expect("readable fixture");
        let shown = format!("fixtures/errors/{name}.fx");
        let result = ttpu_fx::parse(&source, &shown);
        if !expected_path.exists() && !bless {
            // Files without `.expected` parse fine here and fail later (e.g. `unknown_op.fx` in
            // the importer); they still must not trip the parser.
            if let Err(error) = result {
                panic!("{shown} has no .expected file but fails to parse: {error}");
            }
            continue;
        }
        let message = match result {
            // It parses, so its `.expected` message comes from the importer; import_errors.rs checks it.
            Ok(_) => continue,
            Err(error) => error.to_string(),
        };
        if bless {
            std::fs::write(&expected_path, format!("{message}\n")).expect("write .expected");
        } else {
            let expected = std::fs::read_to_string(&expected_path).expect("readable .expected");
            assert_eq!(message, expected.trim_end(), "{shown}");
        }
        checked += 1;
    }
    assert!(checked >= 6, "only {checked} error fixtures were checked");
}

/// A minimal well-formed program around `body` (statements indented 12 spaces, then `return`).
fn program(params: &str, body: &str, signature: &str) -> String {
    format!(
        "ExportedProgram:\n    class GraphModule(torch.nn.Module):\n        def forward(self, {params}):\n{body}\n\
         Graph signature:\n{signature}\nRange constraints: {{}}\n"
    )
}

const SIGNATURE: &str = "    # inputs\n    x: USER_INPUT\n    \n    # outputs\n    y: USER_OUTPUT\n";

fn error_of(source: &str) -> String {
    match ttpu_fx::parse(source, "t.fx") {
        Ok(_) => panic!("parsed:\n{source}"),
        Err(error) => error.to_string(),
    }
}

/// The message for a one-statement body `y = <rhs>` after `x: "f32[2]"`.
fn rhs_error(statement: &str) -> String {
    error_of(&program(r#"x: "f32[2]""#, &format!("            {statement}\n            return (y,)"), SIGNATURE))
}

#[test]
fn inline_messages() {
    let cases: &[(&str, &str)] = &[
        (r#"y: "f32[2]" = torch.ops.aten.relu.default(x"#, "t.fx:4:56: expected `,` or `)`, found `end of line`"),
        (
            r#"y: "f32[2]" = torch.ops.aten.relu.default(x,, 1)"#,
            "t.fx:4:57: expected an argument (a name, number, string, `[...]`, `(...)`, `None`, `True`, `False`, `torch.<dtype>` or `device(...)`), found `,`",
        ),
        (
            r#"y: "f32[2]" = torch.ops.aten.relu.default(x, dim=1, 2)"#,
            "t.fx:4:65: expected a keyword argument `name = value` or `)`, found `2`",
        ),
        (r#"y: "f32[2]" = torch.ops.aten.relu.default(x) z"#, "t.fx:4:58: expected `;` or end of line, found `z`"),
        (
            r#"y: "f32[2]" = torch.ops.aten.relu.default"#,
            "t.fx:4:54: expected `(` after the callee, found `end of line`",
        ),
        (r#"y: "f32[2]" = x x"#, "t.fx:4:29: expected `(`, `[` or an operator like `*`, found `x`"),
        (r#"y: "f32[2]" = z"#, "t.fx:4:27: undefined name `z`"),
        (r#"y "f32[2]" = x"#, "t.fx:4:15: expected `:` or `=`, found `\"f32[2]\"`"),
        (r#"y: f32[2] = x"#, "t.fx:4:16: expected a type annotation like \"f32[2, 3]\", found `f32`"),
        (r#"y: "f32[2, s0 +]" = x"#, "t.fx:4:28: expected a dim like `8`, `s0` or `2*s0`, found `]`"),
        (r#"y: "f32[2]]" = x"#, "t.fx:4:23: expected the closing `\"` of the annotation, found `]`"),
        (
            r#"y: "" = x"#,
            "t.fx:4:17: expected a type annotation like \"f32[2, 3]\" or \"Sym(s0)\", found `end of annotation`",
        ),
        (
            r#"y: "c16[2]" = x"#,
            "t.fx:4:17: expected a dtype (f64, f32, f16, bf16, i64, i32, i16, i8, u8, u16, u32, u64, b8, c32, c64, c128), found `c16`",
        ),
        (r#"y: "Sym(s0" = x"#, "t.fx:4:23: expected `)`, found `end of annotation`"),
        (
            r#"y: "c32[2]" = torch.ops.aten.full.default([2], complex(1.5, 2.0), dtype = torch.complex32)"#,
            "t.fx:4:60: expected a complex number with a zero imaginary part (scalars with an imaginary part are not supported: build them with `torch.complex`), found `complex`",
        ),
        (
            r#"y: "c32[2]" = torch.ops.aten.full.default([2], complex(x), dtype = torch.complex32)"#,
            "t.fx:4:60: expected `complex(<real>, <imaginary>)` of two numbers, found `complex`",
        ),
        (
            r#"y: "f32[2]" = torch.ops.aten.full.default([2], 1, dtype = torch.float8_e4m3fn)"#,
            "t.fx:4:71: expected a supported dtype (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.uint16, torch.uint32, torch.uint64, torch.bool, torch.complex32, torch.complex64, torch.complex128), found `torch.float8_e4m3fn`",
        ),
        (
            r#"y: "f32[2]" = torch.ops.aten.full.default([2], 1, device = device(index=0))"#,
            "t.fx:4:86: expected `type='...'` in `device(...)`, found `)`",
        ),
        (r#"y: "f32[2]" = torch.ops.aten.full.default([2], - x)"#, "t.fx:4:62: expected a number after `-`, found `x`"),
        (
            r#"y: "f32[2]" = torch.ops.aten.f.default(x, torch.ops.aten.g)"#,
            "t.fx:4:55: expected an argument (`torch.<name>` must be a dtype, an enum like `torch.contiguous_format` or an op like `torch.ops.aten.add.Tensor`), found `torch.ops.aten.g`",
        ),
        (r#"y: "f32[2]" = x[1.5]"#, "t.fx:4:29: expected an integer index, found `1.5`"),
        (r#"y: "f32[2]" = x @ x"#, "t.fx:4:29: expected `(`, `[` or an operator like `*`, found `@`"),
        (
            r#"y: "f32[2]" = torch.ops.aten.relu.default(x);  x = 'oops"#,
            "t.fx:4:69: expected a closing `'`, found `end of line`",
        ),
        (
            r#"x: "f32[2]" = torch.ops.aten.relu.default(x)"#,
            "t.fx:4:13: expected a name not defined before (`x` is already defined on line 3), found `x`",
        ),
        (r#"y: "f32[2]" = torch.ops.aten.relu.default(y)"#, "t.fx:4:55: undefined name `y`"),
        (r#"y: "f32[2]" = z[0]"#, "t.fx:4:27: undefined name `z`"),
        (r#"y: "Sym(s0)" = q * 2"#, "t.fx:4:28: undefined name `q`"),
        (r#"y: "f32[2]" = torch.ops.aten.cat.default([x, [w]])"#, "t.fx:4:59: undefined name `w`"),
    ];
    let mismatches: Vec<String> = cases
        .iter()
        .map(|(statement, expected)| (statement, rhs_error(statement), expected))
        .filter(|(_, actual, expected)| actual != *expected)
        .map(|(statement, actual, expected)| format!("{statement}\n  got:  {actual}\n  want: {expected}"))
        .collect();
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

#[test]
fn structure_messages() {
    let good = program(r#"x: "f32[2]""#, "            return (x,)", SIGNATURE);
    assert!(ttpu_fx::parse(&good, "t.fx").is_ok());
    let cases: &[(&str, &str, &str)] = &[
        ("ExportedProgram:\n", "Exported Program:\n", "t.fx:1:1: expected `ExportedProgram:`, found `Exported`"),
        (
            "class GraphModule(torch.nn.Module):",
            "class GraphModule:",
            "t.fx:2:22: expected `class GraphModule(torch.nn.Module):`, found `:`",
        ),
        (
            "def forward(self, ",
            "def forward(",
            "t.fx:3:21: expected `self`, the first parameter of `forward`, found `x`",
        ),
        ("return (x,)", "return (z,)", "t.fx:4:21: undefined name `z`"),
        ("return (x,)", "return (x,) x", "t.fx:4:25: expected end of line after `return (...)`, found `x`"),
        ("return (x,)", "1 + 1", "t.fx:4:13: expected a statement like `name = ...` or `return (...)`, found `1`"),
        ("Graph signature:", "Graph signatures:", "t.fx:5:7: expected `Graph signature:`, found `signatures`"),
        ("    # inputs\n", "", "t.fx:6:5: expected `# inputs`, found `x`"),
        ("    # outputs\n", "", "t.fx:11:1: expected an input like `x: USER_INPUT`, or `# outputs`, found `Range`"),
        (
            "x: USER_INPUT",
            "x: user_input",
            "t.fx:7:8: expected an input kind like `USER_INPUT`, `PARAMETER` or `BUFFER`, found `user_input`",
        ),
        ("x: USER_INPUT", "x USER_INPUT", "t.fx:7:7: expected `:` after the name, found `USER_INPUT`"),
        (
            "x: USER_INPUT",
            "x: BUFFER target='b'",
            "t.fx:7:25: expected `persistent=True` or `persistent=False`, found `end of line`",
        ),
        ("x: USER_INPUT", "x: BUFFER target='b' persistent=yes", "t.fx:7:37: expected `True` or `False`, found `yes`"),
        ("x: USER_INPUT", "x: PARAMETER target=b", "t.fx:7:25: expected a quoted target like 'fc.weight', found `b`"),
        (
            "y: USER_OUTPUT",
            "y: BUFFER_MUTATION",
            "t.fx:10:23: expected `target='...'` after `BUFFER_MUTATION`, found `end of line`",
        ),
        ("y: USER_OUTPUT", "y: USER_OUTPUT extra", "t.fx:10:20: expected end of line, found `extra`"),
        ("{}", "{s0: VR[2, 1024}", "t.fx:12:35: expected `]`, found `}`"),
        ("{}", "{s0: VR[int_oo, 4]}", "t.fx:12:28: expected a lower bound (an integer or `-int_oo`), found `int_oo`"),
        ("{}", "{s0: [2, 4]}", "t.fx:12:25: expected a range like `VR[2, 1024]`, found `[`"),
        (
            "{}",
            "{s0: VR[2, 4]} trailing",
            "t.fx:12:35: expected end of file after `Range constraints:`, found `trailing`",
        ),
        ("{}", "{s0: VR[2, 4]", "t.fx:12:33: expected `,` or `}`, found `end of line`"),
    ];
    let mismatches: Vec<String> = cases
        .iter()
        .map(|(from, to, expected)| {
            assert!(good.contains(from), "{from}");
            (to, error_of(&good.replacen(from, to, 1)), expected)
        })
        .filter(|(_, actual, expected)| actual != *expected)
        .map(|(to, actual, expected)| format!("{to}\n  got:  {actual}\n  want: {expected}"))
        .collect();
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    assert_eq!(error_of(""), "t.fx:1:1: expected `ExportedProgram:`, found `end of file`");
    let deep = program(
        r#"x: "f32[2]""#,
        &format!("            y = f({})\n            return (y,)", "[".repeat(10_000)),
        SIGNATURE,
    );
    assert_eq!(error_of(&deep), "t.fx:4:83: expected at most 64 nested brackets, found `[`");
    let deep_dim = program(&format!("x: \"f32[{}s0]\"", "(".repeat(10_000)), "            return (x,)", SIGNATURE);
    assert_eq!(error_of(&deep_dim), "t.fx:3:99: expected at most 64 nested parentheses, found `(`");
    let long_sum = program(&format!("x: \"f32[{}s0]\"", "s0+".repeat(10_000)), "            return (x,)", SIGNATURE);
    assert_eq!(error_of(&long_sum), "t.fx:3:805: expected a dim expression with at most 256 operators, found `+`");
    let power_tower = program(r#"x: "f32[((s0**8)**8)**8]""#, "            return (x,)", SIGNATURE);
    assert_eq!(error_of(&power_tower), "t.fx:3:49: expected a dim expression with at most 256 operators, found `8`");
    let deep_neg = program(&format!("x: \"f32[{}s0]\"", "-".repeat(10_000)), "            return (x,)", SIGNATURE);
    assert_eq!(error_of(&deep_neg), "t.fx:3:99: expected at most 64 nested operators, found `-`");
}

#[test]
fn long_tokens_are_shortened() {
    let name = "a".repeat(100);
    let message = rhs_error(&format!(r#"y: "f32[2]" = torch.ops.aten.relu.default(x) {name}"#));
    assert!(message.ends_with(&format!("found `{}...`", "a".repeat(40))), "{message}");
}

/// Every prefix of a real program (cut at each line end and at many byte offsets) parses or fails
/// with a located error; none panics.
#[test]
fn prefixes_of_gpt2_block_never_panic() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/gpt2_block/model.fx");
    let source = std::fs::read_to_string(path).expect("gpt2_block");
    let mut cuts: Vec<usize> = source.match_indices('\n').flat_map(|(index, _)| [index, index + 1]).collect();
    cuts.extend((0..source.len()).step_by(7));
    cuts.push(source.len());
    let mut failures = 0;
    for cut in cuts {
        if !source.is_char_boundary(cut) {
            continue;
        }
        let prefix = &source[..cut];
        match ttpu_fx::parse(prefix, "p.fx") {
            Ok(program) => assert!(cut + 1 >= source.len(), "prefix of {cut} bytes parsed: {:?}", program.nodes.len()),
            Err(error) => {
                failures += 1;
                let location = error.location();
                assert!(location.span.start <= prefix.len(), "{error}");
                assert!(error.to_string().starts_with("p.fx:"), "{error}");
            }
        }
    }
    assert!(failures > 1000);
    // Mangled variants of the full text: swapped bytes and doubled lines must not panic either.
    for (index, _) in source.char_indices().step_by(13) {
        let mut mangled = source.clone();
        mangled.insert_str(index, "\"([{-#'");
        let _ = ttpu_fx::parse(&mangled, "m.fx");
    }
}
