//! Builders of small inline `.fx` programs shared by the import tests: one statement per case,
//! its printed annotation checked against what the decomposition produces.

#![allow(dead_code)]

use ttpu_fx::{Error, ImportOptions, Module};

/// A program with user inputs `params` (`("x", "f32[2, 3]")`), statement lines `body` and the
/// returned names `outputs`, plus range constraints `ranges` (`"{s0: VR[2, 64]}"`).
pub fn program(params: &[(&str, &str)], body: &[&str], outputs: &[&str], ranges: &str) -> String {
    let signature: Vec<String> = params.iter().map(|(name, ty)| format!("{name}: \"{ty}\"")).collect();
    let mut text = format!(
        "ExportedProgram:\n    class GraphModule(torch.nn.Module):\n        def forward(self, {}):\n",
        signature.join(", ")
    );
    for line in body {
        text.push_str(&format!("            {line}\n"));
    }
    text.push_str(&format!("            return ({},)\n    \nGraph signature:\n    # inputs\n", outputs.join(", ")));
    for (name, _) in params {
        text.push_str(&format!("    {name}: USER_INPUT\n"));
    }
    text.push_str("    \n    # outputs\n");
    for name in outputs {
        text.push_str(&format!("    {name}: USER_OUTPUT\n"));
    }
    text.push_str(&format!("    \nRange constraints: {ranges}\n"));
    text
}

/// Inputs, result annotation and call of a one-statement case.
pub type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str);

pub fn try_import(
    params: &[(&str, &str)],
    body: &[&str],
    outputs: &[&str],
    options: &ImportOptions,
) -> Result<Module, Box<Error>> {
    let source = program(params, body, outputs, "{}");
    ttpu_fx::load(&source, "inline.fx", options).map_err(Box::new)
}

/// Imports and verifies; panics with the message on failure.
pub fn import(params: &[(&str, &str)], body: &[&str], outputs: &[&str]) -> Module {
    let module = try_import(params, body, outputs, &ImportOptions::default())
        .unwrap_or_else(|error| panic!("{error}\n{}", body.join("\n")));
    ttpu_ir::verify(&module.graph).unwrap_or_else(|error| panic!("{error}\n{}", body.join("\n")));
    module
}

/// One statement `out: "<ty>" = <call>` over `params`, returning `out`.
pub fn check(params: &[(&str, &str)], ty: &str, call: &str) {
    import(params, &[&format!("out: \"{ty}\" = torch.ops.{call}")], &["out"]);
}
