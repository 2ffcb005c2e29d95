//! Asserts the export keeps (`_assert_async`): a data-dependent condition builds nothing, a
//! constant false one is refused with its message.

use ttpu_fx::ImportOptions;

fn program(condition: &str) -> String {
    format!(
        "ExportedProgram:\n    class GraphModule(torch.nn.Module):\n        def forward(self, x: \"f32[3]\"):\n\
         {condition}\n\
         \x20           _assert_async = torch.ops.aten._assert_async.msg(ok, 'x must be sane');  ok = _assert_async = None\n\
         \x20           mul: \"f32[3]\" = torch.ops.aten.mul.Tensor(x, 2);  x = None\n\
         \x20           return (mul,)\n\
         Graph signature:\n    # inputs\n    x: USER_INPUT\n    \n    # outputs\n    mul: USER_OUTPUT\n    \n\
         Range constraints: {{}}\n"
    )
}

#[test]
fn a_data_dependent_assert_builds_nothing() {
    let source = program("            ok: \"b8[]\" = torch.ops.aten.ge.Scalar(torch.ops.aten.sum.default(x), 0)");
    // A nested call is not `.fx` syntax: build the condition in two statements instead.
    let source = source.replace(
        "            ok: \"b8[]\" = torch.ops.aten.ge.Scalar(torch.ops.aten.sum.default(x), 0)",
        "            total: \"f32[]\" = torch.ops.aten.sum.default(x)\n            ok: \"b8[]\" = torch.ops.aten.ge.Scalar(total, 0)",
    );
    let module = ttpu_fx::load(&source, "m.fx", &ImportOptions::default()).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(module.graph.outputs.len(), 1);
}

#[test]
fn a_constant_false_assert_is_refused_with_its_message() {
    let source = program(
        "            ok: \"b8[]\" = torch.ops.aten.full.default([], False, dtype = torch.bool, device = device(type='cpu'), pin_memory = False)",
    );
    let error = ttpu_fx::load(&source, "m.fx", &ImportOptions::default()).expect_err("false");
    assert!(error.to_string().ends_with("the assert is false: x must be sane"), "{error}");
}
