//! Symbolic shapes and other constructs the exported fixtures do not show: `Sym(...)` annotations,
//! `sym_size.int`, infix operators between symbolic ints, dim expressions, unbounded ranges,
//! `operator.getitem` calls, odd literals and signature kinds, all from inline programs.

use ttpu_fx::ast::{Arg, Expr, FxType, InputKind, OutputKind, Program, SymExpr};
use ttpu_ir::DType;

/// Wraps a body (12-space indented statements and `return`) and signature lines into a program.
fn program(params: &str, body: &str, inputs: &str, outputs: &str, ranges: &str) -> String {
    format!(
        "ExportedProgram:\n    class GraphModule(torch.nn.Module):\n        def forward(self, {params}):\n{body}    \n\
         Graph signature:\n    # inputs\n{inputs}    \n    # outputs\n{outputs}    \nRange constraints: {ranges}\n"
    )
}

fn parse(source: &str) -> Program {
    ttpu_fx::parse(source, "inline.fx").unwrap_or_else(|error| panic!("{error}\n{source}"))
}

fn sym(name: &str) -> SymExpr {
    SymExpr::Symbol(name.to_owned())
}

fn int(value: i64) -> SymExpr {
    SymExpr::Int(value)
}

fn bin(make: fn(Box<SymExpr>, Box<SymExpr>) -> SymExpr, lhs: SymExpr, rhs: SymExpr) -> SymExpr {
    make(Box::new(lhs), Box::new(rhs))
}

const SYM_BODY: &str = r#"            # No stacktrace found for following nodes
            sym_size_int_2: "Sym(s77)" = torch.ops.aten.sym_size.int(x, 0)
            mul_4: "Sym(3*s77)" = sym_size_int_2 * 3
            view: "f32[3*s77, 16]" = torch.ops.aten.view.default(y, [mul_4, 16]);  y = None
            ge: "Sym(s77 >= 2)" = sym_size_int_2 >= 2
            _assert_scalar = torch.ops.aten._assert_scalar.default(ge, "Runtime assertion failed for expression 2 <= s77 on node 'ge'");  ge = _assert_scalar = None
            sym_float: "Sym(0.5*s77)" = torch.sym_float(sym_size_int_2)
            eq: "Sym(Eq(s77, 4))" = sym_size_int_2 == 4
            _check = torch._check(eq)
            floordiv: "Sym((s77//2))" = sym_size_int_2 // 2
            return (view, mul_4, None)
"#;

#[test]
fn symbolic_ints() {
    let source = program(
        r#"x: "f32[s77, 16]", y: "f32[s77, 3, 16]""#,
        SYM_BODY,
        "    x: USER_INPUT\n    y: USER_INPUT\n",
        "    view: USER_OUTPUT\n    mul_4: USER_OUTPUT\n    : USER_OUTPUT\n",
        "{s77: VR[2, int_oo], u0: VR[-int_oo, int_oo], s1: VR[-3, 5]}",
    );
    let program = parse(&source);
    assert_eq!(program.placeholders[0].ty, FxType::Tensor { dtype: DType::F32, dims: vec![sym("s77"), int(16)] });

    let size = &program.nodes[0];
    assert_eq!(size.ty, Some(FxType::SymInt(sym("s77"))));
    let Expr::Call { target, args, .. } = &size.expr else { panic!("{:?}", size.expr) };
    assert_eq!(target, "aten.sym_size.int");
    assert!(matches!(args.as_slice(), [Arg::Name(x, _), Arg::Int(0)] if x == "x"));

    let mul = &program.nodes[1];
    assert_eq!(mul.ty, Some(FxType::SymInt(bin(SymExpr::Mul, int(3), sym("s77")))));
    let Expr::SymBinary { op, lhs, rhs } = &mul.expr else { panic!("{:?}", mul.expr) };
    assert_eq!(op, "*");
    assert!(matches!(lhs, Arg::Name(name, _) if name == "sym_size_int_2"));
    assert_eq!(rhs, &Arg::Int(3));

    let view = &program.nodes[2];
    assert_eq!(
        view.ty,
        Some(FxType::Tensor { dtype: DType::F32, dims: vec![bin(SymExpr::Mul, int(3), sym("s77")), int(16)] })
    );

    // Non-integer symbolic values are kept as text; the infix operators are kept by name.
    assert_eq!(program.nodes[3].ty, Some(FxType::Other("Sym(s77 >= 2)".into())));
    assert!(matches!(&program.nodes[3].expr, Expr::SymBinary { op, .. } if op == ">="));
    let Expr::Call { target, args, .. } = &program.nodes[4].expr else { panic!() };
    assert_eq!(target, "aten._assert_scalar.default");
    assert_eq!(args[1], Arg::Str("Runtime assertion failed for expression 2 <= s77 on node 'ge'".into()));
    assert_eq!(program.nodes[5].ty, Some(FxType::Other("Sym(0.5*s77)".into())));
    assert!(matches!(&program.nodes[5].expr, Expr::Call { target, .. } if target == "torch.sym_float"));
    assert_eq!(program.nodes[6].ty, Some(FxType::Other("Sym(Eq(s77, 4))".into())));
    assert!(matches!(&program.nodes[7].expr, Expr::Call { target, .. } if target == "torch._check"));
    assert_eq!(program.nodes[8].ty, Some(FxType::SymInt(bin(SymExpr::FloorDiv, sym("s77"), int(2)))));
    assert!(matches!(&program.nodes[8].expr, Expr::SymBinary { op, .. } if op == "//"));

    assert_eq!(program.outputs.len(), 3);
    assert_eq!(program.outputs[2], Arg::None);
    assert_eq!(program.signature.outputs[2].name, "");

    let ranges: Vec<(&str, i64, Option<i64>)> =
        program.range_constraints.iter().map(|range| (range.symbol.as_str(), range.min, range.max)).collect();
    assert_eq!(ranges, [("s77", 2, None), ("u0", i64::MIN, None), ("s1", -3, Some(5))]);
}

#[test]
fn dim_expressions() {
    let cases = [
        ("f32[s0 + 1, (s1//2)]", vec![bin(SymExpr::Add, sym("s0"), int(1)), bin(SymExpr::FloorDiv, sym("s1"), int(2))]),
        ("f32[2*s0 - 3]", vec![bin(SymExpr::Sub, bin(SymExpr::Mul, int(2), sym("s0")), int(3))]),
        ("f32[-s0 + 8]", vec![bin(SymExpr::Add, bin(SymExpr::Mul, int(-1), sym("s0")), int(8))]),
        ("f32[s0 % 4, Mod(s1, 2)]", vec![bin(SymExpr::Mod, sym("s0"), int(4)), bin(SymExpr::Mod, sym("s1"), int(2))]),
        ("f32[s0**2]", vec![bin(SymExpr::Mul, sym("s0"), sym("s0"))]),
        (
            "f32[s0*s1*(s2 + 1)]",
            vec![bin(SymExpr::Mul, bin(SymExpr::Mul, sym("s0"), sym("s1")), bin(SymExpr::Add, sym("s2"), int(1)))],
        ),
        ("f32[FloorDiv(s0, 2), 3]", vec![bin(SymExpr::FloorDiv, sym("s0"), int(2)), int(3)]),
        ("i64[]", vec![]),
    ];
    for (annotation, dims) in cases {
        let source = program(
            &format!("x: \"{annotation}\""),
            "            return (x,)\n",
            "    x: USER_INPUT\n",
            "    x: USER_OUTPUT\n",
            "{}",
        );
        let dtype = if annotation.starts_with('i') { DType::I64 } else { DType::F32 };
        assert_eq!(parse(&source).placeholders[0].ty, FxType::Tensor { dtype, dims }, "{annotation}");
    }
}

#[test]
fn other_literals_and_calls() {
    let body = r#"            max_pool = torch.ops.aten.max_pool2d_with_indices.default(x, [2, 2])
            getitem: "f32[2]" = operator.getitem(max_pool, 0)
            getitem_1: "i64[2]" = _operator.getitem(max_pool, 1)
            full: "f32[2]" = torch.ops.aten.full.default([2], -inf, dtype=torch.float, device=device(type='cuda', index=0))
            full_1: "f32[2]" = torch.ops.aten.full.default([2], nan, dtype = torch.half)
            t: "f32[2]" = torch.ops.test.op.default(x, [[1, 2], [x, None]], (1, 2), (3,), (), "it's", 'a\'b', -9223372036854775808, True, torch.channels_last, torch.long, torch.double, torch.bool, torch.uint8, torch.int16, torch.int8, torch.bfloat16, torch.int)
            return (getitem,)
"#;
    let source = program(
        r#"x: "f32[2]", token: "f32[0]""#,
        body,
        "    x: USER_INPUT\n    token: TOKEN\n",
        "    getitem: USER_OUTPUT\n",
        "{}",
    );
    let program = parse(&source);
    assert_eq!(program.signature.inputs[1].kind, InputKind::Other("TOKEN".into()));
    let Expr::Call { target, args, .. } = &program.nodes[1].expr else { panic!() };
    assert_eq!(target, "operator.getitem");
    assert_eq!(args[1], Arg::Int(0));
    assert!(matches!(&program.nodes[2].expr, Expr::Call { target, .. } if target == "operator.getitem"));
    let Expr::Call { args, kwargs, .. } = &program.nodes[3].expr else { panic!() };
    assert_eq!(args[1], Arg::Float(f64::NEG_INFINITY));
    assert_eq!(kwargs[0].1, Arg::DType(DType::F32));
    assert_eq!(kwargs[1].1, Arg::Device("cuda".into()));
    let Expr::Call { args, kwargs, .. } = &program.nodes[4].expr else { panic!() };
    assert!(matches!(args[1], Arg::Float(value) if value.is_nan()));
    assert_eq!(kwargs[0].1, Arg::DType(DType::F16));
    let Expr::Call { target, args, .. } = &program.nodes[5].expr else { panic!() };
    assert_eq!(target, "test.op.default");
    let x = Arg::Name(
        "x".into(),
        match &args[0] {
            Arg::Name(_, span) => *span,
            other => panic!("{other:?}"),
        },
    );
    assert_eq!(args[0], x);
    let Arg::List(nested) = &args[1] else { panic!("{:?}", args[1]) };
    assert_eq!(nested[0], Arg::List(vec![Arg::Int(1), Arg::Int(2)]));
    assert!(
        matches!(&nested[1], Arg::List(items) if matches!(items.as_slice(), [Arg::Name(n, _), Arg::None] if n == "x"))
    );
    assert_eq!(
        args[2..],
        [
            Arg::Tuple(vec![Arg::Int(1), Arg::Int(2)]),
            Arg::Tuple(vec![Arg::Int(3)]),
            Arg::Tuple(vec![]),
            Arg::Str("it's".into()),
            Arg::Str("a'b".into()),
            Arg::Int(i64::MIN),
            Arg::Bool(true),
            Arg::Enum("channels_last".into()),
            Arg::DType(DType::I64),
            Arg::DType(DType::F64),
            Arg::DType(DType::Bool),
            Arg::DType(DType::U8),
            Arg::DType(DType::I16),
            Arg::DType(DType::I8),
            Arg::DType(DType::BF16),
            Arg::DType(DType::I32),
        ]
    );
}

#[test]
fn signature_kinds() {
    let source = program(
        r#"p: "f32[2]", c: "f32[2]", obj, x: "f32[2]""#,
        "            add: \"f32[2]\" = torch.ops.aten.add.Tensor(x, p)\n            return (add, add, 1, add)\n",
        "    p: PARAMETER target='p'\n    c: CONSTANT_TENSOR target='c'\n    obj: CUSTOM_OBJ target='o'\n    x: USER_INPUT\n",
        "    add: USER_INPUT_MUTATION target='x'\n    add: LOSS_OUTPUT\n    1: USER_OUTPUT\n    add: TOKEN\n",
        "{}",
    );
    let program = parse(&source);
    let kinds: Vec<&InputKind> = program.signature.inputs.iter().map(|spec| &spec.kind).collect();
    assert_eq!(
        kinds,
        [
            &InputKind::Parameter,
            &InputKind::ConstantTensor,
            &InputKind::Other("CUSTOM_OBJ".into()),
            &InputKind::UserInput
        ]
    );
    assert_eq!(program.placeholders[2].ty, FxType::Other(String::new()));
    let outputs = &program.signature.outputs;
    assert_eq!(outputs[0].kind, OutputKind::UserInputMutation);
    assert_eq!(outputs[0].target.as_deref(), Some("x"));
    assert_eq!(outputs[1].kind, OutputKind::LossOutput);
    assert_eq!(outputs[2].name, "1");
    assert_eq!(outputs[3].kind, OutputKind::Other("TOKEN".into()));
    assert_eq!(program.outputs[2], Arg::Int(1));
}

#[test]
fn header_may_wrap_and_return_may_be_bare() {
    let source = "ExportedProgram:\n    class GraphModule(torch.nn.Module):\n        def forward(self,\n            x: \"f32[2]\",\n        ):\n            return x\n\nGraph signature:\n    # inputs\n    x: USER_INPUT\n\n    # outputs\n    x: USER_OUTPUT\n\nRange constraints: {}";
    let program = parse(source);
    assert_eq!(program.placeholders.len(), 1);
    assert!(matches!(program.outputs.as_slice(), [Arg::Name(name, _)] if name == "x"));
}

#[test]
fn ten_thousand_lines_parse_with_exact_lines() {
    let mut body = String::new();
    let mut previous = "x".to_owned();
    for index in 0..10_000 {
        let name = format!("add_{index}");
        body.push_str(&format!(
            "            {name}: \"f32[4, 16]\" = torch.ops.aten.add.Tensor({previous}, x);  {previous} = None\n"
        ));
        previous = name;
    }
    body.push_str(&format!("            return ({previous},)\n"));
    let source =
        program(r#"x: "f32[4, 16]""#, &body, "    x: USER_INPUT\n", &format!("    {previous}: USER_OUTPUT\n"), "{}");
    // Parsing speed is measured by benchmarks, not here; this checks a long chain stays exact.
    let program = parse(&source);
    assert_eq!(program.nodes.len(), 10_000);
    assert_eq!(program.nodes[9_999].line, 10_003);
}
