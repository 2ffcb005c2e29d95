//! The alias statement `input_1 = input`, which FX prints for a placeholder whose Python name
//! shadows a builtin: it parses as `Expr::Alias`, later nodes read the alias, the graph signature
//! may name the parameter (what PyTorch prints) or the alias, and aliases of unknown names are
//! errors; comment lines of every kind (`# Annotation: ...`, `# File: ...`) are skipped.

use ttpu_fx::ast::Expr;
use ttpu_fx::{ImportOptions, InputRole};

fn program(signature_name: &str, body: &str) -> String {
    format!(
        "ExportedProgram:\n    class GraphModule(torch.nn.Module):\n        def forward(self, p_w: \"f32[3]\", input: \"f32[3]\"):\n\
         {body}\n\
         Graph signature:\n    # inputs\n    p_w: PARAMETER target='w'\n    {signature_name}: USER_INPUT\n    \n    # outputs\n    mul: USER_OUTPUT\n    \n\
         Range constraints: {{}}\n"
    )
}

const BODY: &str = "            input_1 = input\n    \n            # File: m.py:3 in forward, code: return input * self.w\n            mul: \"f32[3]\" = torch.ops.aten.mul.Tensor(input_1, p_w);  input_1 = p_w = None\n            return (mul,)";

#[test]
fn an_alias_names_the_placeholder_for_later_nodes() {
    for signature_name in ["input", "input_1"] {
        let source = program(signature_name, BODY);
        let parsed = ttpu_fx::parse(&source, "m.fx").unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(parsed.nodes[0].name, "input_1");
        assert_eq!(parsed.nodes[0].expr, Expr::Alias { source: "input".into() });
        let module =
            ttpu_fx::load(&source, "m.fx", &ImportOptions::default()).unwrap_or_else(|error| panic!("{error}"));
        let user: Vec<_> = module.signature.inputs.iter().filter(|input| input.role == InputRole::UserInput).collect();
        assert_eq!(user.len(), 1);
        // The input's key is the name the signature gives it.
        assert_eq!(user[0].key, signature_name);
        assert_eq!(module.graph.inputs.len(), 2);
        assert_eq!(module.graph.node_count(), 1, "{}", ttpu_ir::text::print(&module.graph));
    }
}

#[test]
fn an_alias_of_an_unknown_name_is_an_error() {
    let source = program("input", &BODY.replace("input_1 = input\n", "input_1 = inputs\n"));
    let error = ttpu_fx::parse(&source, "m.fx").expect_err("`inputs` is not defined");
    assert_eq!(error.to_string(), "m.fx:4:23: undefined name `inputs`");
}

#[test]
fn an_annotated_alias_is_checked_against_its_value() {
    let source = program("input", &BODY.replace("input_1 = input\n", "input_1: \"f32[4]\" = input\n"));
    let error = ttpu_fx::load(&source, "m.fx", &ImportOptions::default()).expect_err("f32[3] is not f32[4]");
    assert!(error.to_string().contains("f32[4]") && error.to_string().contains("f32[3]"), "{error}");
}

#[test]
fn comment_lines_of_every_kind_are_skipped() {
    let body = "            # Annotation: {'compile_with_inductor': 'flex_attention'} File: m.py:3 in forward, code: y = x\n\
                \x20           # No stacktrace found for following nodes\n\
                \x20           input_1 = input\n\
                \x20           # File: <eval_with_key>.7 from torch/fx/experimental/proxy_tensor.py:1968 in wrapped:82\n\
                \x20           mul: \"f32[3]\" = torch.ops.aten.mul.Tensor(input_1, p_w);  input_1 = p_w = None\n\
                \x20           return (mul,)";
    let source = program("input", body);
    let module = ttpu_fx::load(&source, "m.fx", &ImportOptions::default()).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(module.graph.node_count(), 1);
}
