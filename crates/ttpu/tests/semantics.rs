//! PyTorch's shared decompositions (`ttpu-torch`) build the same IR from both frontends: each
//! case imports one ATen call from `.fx` text and records the same op on eager tensors, and the
//! two graphs must print alike (node for node, names and source locations aside).

use ttpu_eager::{Device, Tensor};
use ttpu_ir::DType;

/// One `.fx` statement `out = torch.ops.<call>` over `params` (`<call>[0]`: the first result of
/// a call with several), imported and printed.
fn fx_ir(params: &[(&str, &str)], out_ty: &str, call: &str) -> String {
    let signature: Vec<String> = params.iter().map(|(name, ty)| format!("{name}: \"{ty}\"")).collect();
    let mut text = format!(
        "ExportedProgram:\n    class GraphModule(torch.nn.Module):\n        def forward(self, {}):\n",
        signature.join(", ")
    );
    match call.strip_suffix("[0]") {
        // A call with several results: the first, through `getitem`.
        Some(call) => {
            text += &format!("            results = torch.ops.{call}\n");
            text += &format!("            out: \"{out_ty}\" = results[0]\n");
        }
        None => text += &format!("            out: \"{out_ty}\" = torch.ops.{call}\n"),
    }
    text += "            return (out,)\n    \nGraph signature:\n    # inputs\n";
    for (name, _) in params {
        text += &format!("    {name}: USER_INPUT\n");
    }
    text += "    \n    # outputs\n    out: USER_OUTPUT\n    \nRange constraints: {}\n";
    let module = ttpu_fx::load(&text, "case.fx", &ttpu_fx::ImportOptions::default())
        .unwrap_or_else(|error| panic!("{error}\n{text}"));
    normalize(&ttpu_ir::text::print(&module.graph))
}

/// The pending graph of `build` over fresh device tensors of `inputs` (dtype and dims), printed.
fn eager_ir(inputs: &[(DType, &[i64])], build: impl FnOnce(&[Tensor]) -> ttpu_eager::Result<Tensor>) -> String {
    let device = Device::cpu().expect("the CPU plugin");
    let tensors: Vec<Tensor> = inputs
        .iter()
        .map(|&(dtype, dims)| {
            let count: i64 = dims.iter().product();
            let bytes = vec![0u8; count as usize * dtype.byte_size()];
            Tensor::from_bytes(&device, dtype, &bytes, dims).expect("uploads")
        })
        .collect();
    let result = build(&tensors).expect("records");
    let text = device.computation_ir().expect("prints");
    drop(result);
    // The tape keeps what a decomposition built but the result does not use (layer norm's
    // statistics); the importer drops it, and so does every compile.
    let mut graph = ttpu_ir::text::parse(&text).expect("the printed IR parses");
    graph.compact();
    normalize(&ttpu_ir::text::print(&graph))
}

/// The IR text without input names and node locations, which differ between frontends by design.
fn normalize(text: &str) -> String {
    text.lines()
        .map(|line| {
            let line = line.split("  # ").next().unwrap_or(line);
            // `%0: f32[2, 5] "x"` names a graph input.
            let mut out = String::new();
            let mut in_string = false;
            for c in line.chars() {
                if c == '"' {
                    in_string = !in_string;
                    continue;
                }
                if !in_string {
                    out.push(c);
                }
            }
            out.replace(" ,", ",").replace(" )", ")")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn softmax_and_log_softmax() {
    for (dtype, name) in [(DType::F32, "f32"), (DType::BF16, "bf16")] {
        let ty = format!("{name}[2, 5]");
        assert_eq!(
            fx_ir(&[("x", &ty)], &ty, "aten._softmax.default(x, 1, False)"),
            eager_ir(&[(dtype, &[2, 5])], |t| t[0].softmax(1)),
            "softmax of {ty}"
        );
        assert_eq!(
            fx_ir(&[("x", &ty)], &ty, "aten._log_softmax.default(x, -1, False)"),
            eager_ir(&[(dtype, &[2, 5])], |t| t[0].log_softmax(-1)),
            "log_softmax of {ty}"
        );
    }
}

#[test]
fn layer_norm_with_and_without_parameters() {
    for (dtype, name) in [(DType::F32, "f32"), (DType::BF16, "bf16")] {
        let (x, p) = (format!("{name}[2, 3, 4]"), format!("{name}[3, 4]"));
        assert_eq!(
            fx_ir(&[("x", &x), ("w", &p), ("b", &p)], &x, "aten.native_layer_norm.default(x, [3, 4], w, b, 1e-05)[0]"),
            eager_ir(&[(dtype, &[2, 3, 4]), (dtype, &[3, 4]), (dtype, &[3, 4])], |t| {
                t[0].layer_norm(&[3, 4], Some(&t[1]), Some(&t[2]), 1e-5)
            }),
            "layer_norm of {x}"
        );
        assert_eq!(
            fx_ir(&[("x", &x)], &x, "aten.native_layer_norm.default(x, [4], None, None, 0.001)[0]"),
            eager_ir(&[(dtype, &[2, 3, 4])], |t| t[0].layer_norm(&[4], None, None, 1e-3)),
            "layer_norm of {x} without parameters"
        );
    }
}

#[test]
fn gelu_exact_and_tanh() {
    assert_eq!(
        fx_ir(&[("x", "f32[6]")], "f32[6]", "aten.gelu.default(x)"),
        eager_ir(&[(DType::F32, &[6])], |t| t[0].gelu())
    );
    assert_eq!(
        fx_ir(&[("x", "bf16[6]")], "bf16[6]", "aten.gelu.default(x, approximate = 'tanh')"),
        eager_ir(&[(DType::BF16, &[6])], |t| t[0].gelu_tanh())
    );
}

#[test]
fn variance_and_standard_deviation() {
    assert_eq!(
        fx_ir(&[("x", "f32[3, 4]")], "f32[3, 1]", "aten.var.correction(x, [1], correction = 1, keepdim = True)"),
        eager_ir(&[(DType::F32, &[3, 4])], |t| t[0].var_keepdim(&[1], 1.0))
    );
    assert_eq!(
        fx_ir(&[("x", "bf16[3, 4]")], "bf16[]", "aten.std.correction(x, [0, 1], correction = 0)"),
        eager_ir(&[(DType::BF16, &[3, 4])], |t| t[0].std(&[0, 1], 0.0))
    );
}

#[test]
fn python_remainder() {
    for (dtype, name) in [(DType::F32, "f32"), (DType::I64, "i64")] {
        let ty = format!("{name}[5]");
        assert_eq!(
            fx_ir(&[("a", &ty), ("b", &ty)], &ty, "aten.remainder.Tensor(a, b)"),
            eager_ir(&[(dtype, &[5]), (dtype, &[5])], |t| t[0].remainder(&t[1])),
            "remainder of {ty}"
        );
    }
}

/// The comparison sees a difference of one node: softmax against log-softmax, and an opmath
/// convert that one side lacks.
#[test]
fn the_comparison_sees_a_different_decomposition() {
    assert_ne!(
        fx_ir(&[("x", "f32[2, 5]")], "f32[2, 5]", "aten._softmax.default(x, 1, False)"),
        eager_ir(&[(DType::F32, &[2, 5])], |t| t[0].log_softmax(1))
    );
    assert_ne!(
        fx_ir(&[("x", "f32[6]")], "f32[6]", "aten.gelu.default(x)"),
        eager_ir(&[(DType::BF16, &[6])], |t| t[0].gelu())
    );
}
