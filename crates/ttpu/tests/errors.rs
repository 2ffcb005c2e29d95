//! Exact messages for bad weights, bad inputs and sizes outside a symbol's range.

mod common;

use ttpu::{HostTensor, Model, TensorMap, read_safetensors};
use ttpu_ir::DType;

fn load(name: &str) -> (Model, TensorMap, TensorMap) {
    let folder = common::fixtures_dir().join(name);
    let source = std::fs::read_to_string(folder.join("model.fx")).expect("model.fx is readable");
    let model = common::session().load_model(&source, &common::relative_model_path(name)).expect("the model loads");
    let weights = read_safetensors(&folder.join("weights.safetensors")).expect("weights read");
    let inputs = read_safetensors(&folder.join("inputs.safetensors")).expect("inputs read");
    (model, weights, inputs)
}

fn run_error(model: &Model, weights: &TensorMap, inputs: &TensorMap) -> String {
    match common::session().run(model, weights, inputs) {
        Ok(_) => panic!("the run should fail"),
        Err(error) => error.to_string(),
    }
}

fn zeros(dtype: DType, shape: &[i64]) -> HostTensor {
    let count: i64 = shape.iter().product();
    HostTensor { dtype, shape: shape.to_vec(), data: vec![0; count as usize * dtype.byte_size()] }
}

#[test]
fn missing_weight_names_the_key_and_the_expected_type() {
    let (model, mut weights, inputs) = load("mlp");
    weights.shift_remove("fc2.bias");
    assert_eq!(run_error(&model, &weights, &inputs), "missing weight `fc2.bias`: the model expects f32[32]");
}

#[test]
fn misshaped_weight_names_expected_and_found() {
    let (model, mut weights, inputs) = load("mlp");
    weights.insert("fc1.weight".into(), zeros(DType::F32, &[16, 32]));
    assert_eq!(run_error(&model, &weights, &inputs), "weight `fc1.weight`: expected f32[32, 16], found f32[16, 32]");
}

#[test]
fn mistyped_weight_names_expected_and_found() {
    let (model, mut weights, inputs) = load("mlp");
    weights.insert("fc3.bias".into(), zeros(DType::F64, &[8]));
    assert_eq!(run_error(&model, &weights, &inputs), "weight `fc3.bias`: expected f32[8], found f64[8]");
}

#[test]
fn extra_weight_is_refused_with_the_known_keys() {
    let (model, mut weights, inputs) = load("mlp");
    weights.insert("fc4.weight".into(), zeros(DType::F32, &[2]));
    assert_eq!(
        run_error(&model, &weights, &inputs),
        "unexpected weight `fc4.weight` (f32[2]): the model takes `fc1.weight`, `fc1.bias`, `fc2.weight`, `fc2.bias`, `fc3.weight`, `fc3.bias`"
    );
}

#[test]
fn missing_and_misshaped_inputs() {
    let (model, weights, mut inputs) = load("mlp");
    let x = inputs.shift_remove("x").expect("the mlp takes x");
    assert_eq!(run_error(&model, &weights, &inputs), "missing input `x`: the model expects f32[4, 16]");
    inputs.insert("x".into(), HostTensor { shape: vec![4, 16], data: x.data[..10].to_vec(), ..x.clone() });
    assert_eq!(
        run_error(&model, &weights, &inputs),
        "input `x`: expected f32[4, 16], found f32[4, 16] holding 10 bytes, not 256"
    );
    inputs.insert("x".into(), HostTensor { shape: vec![2, 32], ..x });
    assert_eq!(run_error(&model, &weights, &inputs), "input `x`: expected f32[4, 16], found f32[2, 32]");
}

#[test]
fn size_outside_a_symbols_range_names_symbol_range_and_input() {
    let (model, weights, mut inputs) = load("mlp_dynamic");
    inputs.insert("x".into(), zeros(DType::F32, &[1, 16]));
    assert_eq!(
        run_error(&model, &weights, &inputs),
        "symbol `s77` (range [2, 1024]): `x` dim 0 has size 1, outside the range"
    );
    inputs.insert("x".into(), zeros(DType::F32, &[3, 15]));
    assert_eq!(run_error(&model, &weights, &inputs), "input `x`: expected f32[s77, 16], found f32[3, 15]");
}

#[test]
fn an_input_dim_computed_from_symbols_must_have_their_size() {
    // `y` is twice as long as `x`: its dim is the compound `2*s0`.
    let source = r#"ExportedProgram:
    class GraphModule(torch.nn.Module):
        def forward(self, x: "f32[s0]", y: "f32[2*s0]"):
            cat: "f32[3*s0]" = torch.ops.aten.cat.default([x, y]);  x = y = None
            return (cat,)

Graph signature:
    # inputs
    x: USER_INPUT
    y: USER_INPUT

    # outputs
    cat: USER_OUTPUT

Range constraints: {s0: VR[2, 64]}
"#;
    let session = common::session();
    let model = session.load_model(source, "inline.fx").expect("the model loads");
    let mut inputs = TensorMap::new();
    inputs.insert("x".into(), zeros(DType::F32, &[3]));
    inputs.insert("y".into(), zeros(DType::F32, &[6]));
    let outputs = session.run(&model, &TensorMap::new(), &inputs).expect("runs");
    assert_eq!(outputs["output_0"].shape, [9]);
    inputs.insert("y".into(), zeros(DType::F32, &[5]));
    assert_eq!(run_error(&model, &TensorMap::new(), &inputs), "`y` dim 0 has size 5, but `2*s0` is 6 with s0 = 3");
}
