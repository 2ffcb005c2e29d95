//! PyTorch parity of whole models written with eager ops: the committed `mlp` and `gpt2_block`
//! fixtures are rebuilt op by op from their `model.fx` graphs, run on their weights and inputs,
//! and compared with PyTorch's own outputs at each fixture's tolerances, in the default mode and
//! in `DeferNever`.

use std::collections::HashMap;
use std::path::PathBuf;

use ttpu_eager::{Device, Mode, Tensor};

use crate::common::{device, device_in};

/// A fixture's tensors on a device, by safetensors key, and its tolerances.
struct Fixture {
    weights: HashMap<String, Tensor>,
    inputs: HashMap<String, Tensor>,
    expected: Vec<f32>,
    expected_dims: Vec<i64>,
    rtol: f64,
    atol: f64,
}

impl Fixture {
    fn load(device: &Device, name: &str) -> Fixture {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").join(name);
        let read = |file: &str| std::fs::read(dir.join(file)).unwrap_or_else(|error| panic!("{name}/{file}: {error}"));
        let tensors = |file: &str| -> HashMap<String, Tensor> {
            Tensor::from_safetensors(device, &read(file)).unwrap().into_iter().collect()
        };
        let meta: serde_json::Value = serde_json::from_slice(&read("meta.json")).expect("meta.json is JSON");
        let expected = tensors("expected.safetensors").remove("output_0").expect("one output, `output_0`");
        Fixture {
            weights: tensors("weights.safetensors"),
            inputs: tensors("inputs.safetensors"),
            expected: expected.to_vec::<f32>().unwrap(),
            expected_dims: expected.dims(),
            rtol: meta_number(&meta, "rtol"),
            atol: meta_number(&meta, "atol"),
        }
    }

    fn weight(&self, key: &str) -> &Tensor {
        self.weights.get(key).unwrap_or_else(|| panic!("no weight `{key}`"))
    }

    fn input(&self, key: &str) -> &Tensor {
        self.inputs.get(key).unwrap_or_else(|| panic!("no input `{key}`"))
    }

    /// Asserts `output` matches PyTorch's: `|a - e| <= atol + rtol * |e|` for every element.
    fn check(&self, output: &Tensor) {
        assert_eq!(output.dims(), self.expected_dims);
        let actual = output.to_vec::<f32>().unwrap();
        for (index, (&got, &want)) in actual.iter().zip(&self.expected).enumerate() {
            let (got, want) = (f64::from(got), f64::from(want));
            let allowed = self.atol + self.rtol * want.abs();
            assert!((got - want).abs() <= allowed, "element {index}: {got} vs PyTorch's {want} (allowed {allowed})");
        }
    }
}

/// The number `key` of a fixture's `meta.json`.
fn meta_number(meta: &serde_json::Value, key: &str) -> f64 {
    meta[key].as_f64().unwrap_or_else(|| panic!("meta.json has no number `{key}`"))
}

/// `fixtures/mlp`: Linear 16->32, ReLU, Linear 32->32, GELU (erf), Linear 32->8.
fn mlp(fixture: &Fixture) -> Tensor {
    let linear = |x: &Tensor, layer: &str| {
        x.linear(fixture.weight(&format!("{layer}.weight")), Some(fixture.weight(&format!("{layer}.bias")))).unwrap()
    };
    let hidden = linear(fixture.input("x"), "fc1").relu().unwrap();
    let hidden = linear(&hidden, "fc2").gelu().unwrap();
    linear(&hidden, "fc3")
}

/// `fixtures/gpt2_block`: GPT-2's pre-norm block with 4 heads of 8 over `hidden_states` `[2, 8, 32]`.
fn gpt2_block(fixture: &Fixture) -> Tensor {
    let weight = |key: &str| fixture.weight(key);
    let linear = |x: &Tensor, layer: &str| {
        x.linear(weight(&format!("{layer}.weight")), Some(weight(&format!("{layer}.bias")))).unwrap()
    };
    let layer_norm = |x: &Tensor, layer: &str| {
        x.layer_norm(&[32], Some(weight(&format!("{layer}.weight"))), Some(weight(&format!("{layer}.bias"))), 1e-5)
            .unwrap()
    };
    let (batch, length, heads, head_dim) = (2, 8, 4, 8);
    let hidden_states = fixture.input("hidden_states");

    let qkv = linear(&layer_norm(hidden_states, "ln_1"), "attn.c_attn");
    let split_heads = |start: i64| {
        let part = qkv.slice(2, start, start + heads * head_dim, 1).unwrap();
        part.reshape(&[batch, length, heads, head_dim]).unwrap().permute(&[0, 2, 1, 3]).unwrap()
    };
    let (query, key, value) = (split_heads(0), split_heads(32), split_heads(64));
    let scores = query.matmul(&key.transpose(-1, -2).unwrap()).unwrap().div_scalar((head_dim as f32).sqrt()).unwrap();
    // The causal mask is the top-left corner of the bool tril buffer; masked scores become
    // finfo(f32).min, as in HF's GPT-2.
    let mask = weight("attn.bias").slice(2, 0, length, 1).unwrap().slice(3, 0, length, 1).unwrap();
    let masked = mask.where_(&scores, &Tensor::scalar(hidden_states.device(), f32::MIN).unwrap()).unwrap();
    let attention = masked.softmax(-1).unwrap().matmul(&value).unwrap();
    let merged = attention.permute(&[0, 2, 1, 3]).unwrap().reshape(&[batch, length, heads * head_dim]).unwrap();
    let hidden = linear(&merged, "attn.c_proj").add(hidden_states).unwrap();

    let feed_forward = linear(&layer_norm(&hidden, "ln_2"), "mlp.c_fc").gelu_tanh().unwrap();
    linear(&feed_forward, "mlp.c_proj").add(&hidden).unwrap()
}

fn check_in_both_modes(name: &str, model: fn(&Fixture) -> Tensor) {
    for device in [device(), device_in(Mode::DeferNever)] {
        let fixture = Fixture::load(&device, name);
        fixture.check(&model(&fixture));
    }
}

#[test]
fn mlp_matches_pytorch() {
    check_in_both_modes("mlp", mlp);
}

#[test]
fn gpt2_block_matches_pytorch() {
    check_in_both_modes("gpt2_block", gpt2_block);
}
