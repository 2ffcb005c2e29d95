//! Loaded models: weights uploaded once, buffer mutations updated in place through donation,
//! outputs on the device, and data-parallel runs on 8 CPU devices, all against PyTorch's outputs.

mod common;

use std::path::Path;

use ttpu::{LoadedModel, Runtime, RuntimeOptions, Session, TensorMap, read_safetensors};

fn read(folder: &Path, file: &str) -> TensorMap {
    read_safetensors(&folder.join(file)).unwrap_or_else(|error| panic!("{file}: {error}"))
}

fn load(session: &Session, name: &str, replicas: usize) -> LoadedModel {
    let folder = common::fixtures_dir().join(name);
    let source = std::fs::read_to_string(folder.join("model.fx")).expect("model.fx is readable");
    let model = session.load_model(&source, &common::relative_model_path(name)).expect("the model loads");
    session.place(&model, &read(&folder, "weights.safetensors"), replicas).expect("the weights upload")
}

/// Every output within the fixture's tolerances; `Err` says which is not.
fn matches(folder: &Path, outputs: &TensorMap, expected: &TensorMap) -> Result<(), String> {
    let (rtol, atol) = common::tolerances(folder);
    let reports = ttpu::parity::compare(outputs, expected, rtol, atol).map_err(|error| error.to_string())?;
    match reports.iter().find(|report| !report.ok()) {
        Some(report) => Err(format!("{}: max abs {:.3e}", report.key, report.max_abs)),
        None => Ok(()),
    }
}

const CALLS: [(&str, &str); 3] = [
    ("inputs.safetensors", "expected.safetensors"),
    ("inputs_call2.safetensors", "expected_call2.safetensors"),
    ("inputs_call3.safetensors", "expected_call3.safetensors"),
];

#[test]
fn a_stateful_model_run_three_times_matches_three_pytorch_calls() {
    // A runtime of its own: the transfer counters below must see this test's transfers alone.
    let session = &Session::with_runtime(Runtime::cpu().expect("the CPU plugin"));
    let folder = common::fixtures_dir().join("buffer_mutation_calls");
    let loaded = load(session, "buffer_mutation_calls", 1);
    let runtime = session.runtime();
    for (inputs, expected) in CALLS {
        let inputs = read(&folder, inputs);
        let before = runtime.counters();
        let outputs = loaded.run(&inputs).expect("runs");
        matches(&folder, &outputs, &read(&folder, expected)).unwrap_or_else(|error| panic!("{expected}: {error}"));
        // Only the input crossed to the device: the weights and the state stayed there.
        let input_bytes: u64 = inputs.values().map(|tensor| tensor.data.len() as u64).sum();
        assert_eq!(runtime.counters().bytes_to_device - before.bytes_to_device, input_bytes);
        // The resident state is the new value.
        assert_eq!(loaded.state("running_mean", 0).expect("reads"), outputs["running_mean"]);
    }
}

#[test]
fn state_that_is_not_carried_over_is_caught() {
    // The check above must fail for a model that forgets its state: the one-shot path starts
    // every call from the initial weights, so the second call differs from PyTorch's.
    let session = common::session();
    let folder = common::fixtures_dir().join("buffer_mutation_calls");
    let source = std::fs::read_to_string(folder.join("model.fx")).expect("model.fx");
    let model = session.load_model(&source, "fixtures/buffer_mutation_calls/model.fx").expect("loads");
    let outputs = session.run(&model, &read(&folder, "weights.safetensors"), &read(&folder, CALLS[1].0)).expect("runs");
    let error = matches(&folder, &outputs, &read(&folder, CALLS[1].1)).expect_err("stale state differs");
    assert!(
        error.starts_with("output_0") || error.starts_with("count") || error.starts_with("running_mean"),
        "{error}"
    );
}

#[test]
fn a_donated_state_buffer_is_a_clear_error_to_read() {
    let session = common::session();
    let folder = common::fixtures_dir().join("buffer_mutation_calls");
    let loaded = load(session, "buffer_mutation_calls", 1);
    let old = loaded.state_buffer("running_mean", 0).expect("resident");
    let weights = loaded.state_buffer("fc.weight", 0).expect("resident");
    loaded.run(&read(&folder, CALLS[0].0)).expect("runs");
    assert!(old.is_deleted().expect("asks"), "the mutated buffer was updated in place (donated)");
    let error = session.runtime().download(&old).expect_err("donated");
    assert_eq!(error.to_string(), "the buffer was donated to an earlier execution and can no longer be read or used");
    // Parameters are read, never donated.
    assert!(!weights.is_deleted().expect("asks"));
    let error = loaded.state("no.such", 0).expect_err("unknown key");
    assert_eq!(
        error.to_string(),
        "the model has no weight or buffer `no.such`; it has `fc.weight`, `fc.bias`, `running_mean`, `count`"
    );
}

#[test]
fn outputs_can_stay_on_the_device() {
    // A runtime of its own: the transfer counters below must see this test's transfers alone.
    let session = &Session::with_runtime(Runtime::cpu().expect("the CPU plugin"));
    let folder = common::fixtures_dir().join("mlp");
    let loaded = load(session, "mlp", 1);
    let inputs = read(&folder, "inputs.safetensors");
    let before = session.runtime().counters().bytes_to_host;
    let outputs = loaded.execute(loaded.prepare(&[&inputs]).expect("prepares")).expect("runs");
    assert_eq!(session.runtime().counters().bytes_to_host, before, "nothing was read back yet");
    assert_eq!(outputs.keys().collect::<Vec<_>>(), ["output_0"]);
    let buffer = outputs.buffer("output_0", 0).expect("on the device");
    assert_eq!(buffer.dims().expect("dims"), vec![4, 8]);
    let host = outputs.to_host().expect("reads").pop().expect("one replica");
    matches(&folder, &host, &read(&folder, "expected.safetensors")).expect("matches PyTorch");
}

#[test]
fn eight_devices_run_one_replicated_program() {
    let runtime = Runtime::from_plugin_or_default(None, &RuntimeOptions { devices: Some(8), ..Default::default() })
        .expect("8 CPU devices");
    let session = Session::with_runtime(runtime.clone());
    let folder = common::fixtures_dir().join("gpt2_block");
    let loaded = load(&session, "gpt2_block", 8);
    let inputs = read(&folder, "inputs.safetensors");
    let expected = read(&folder, "expected.safetensors");
    let outputs = loaded.run_replicated(&[&inputs; 8]).expect("runs on 8 devices");
    assert_eq!(outputs.len(), 8);
    for (device, output) in outputs.iter().enumerate() {
        matches(&folder, output, &expected).unwrap_or_else(|error| panic!("device {device}: {error}"));
        assert_eq!(output, &outputs[0], "device {device} computed other bits");
    }
    // One per-call program and one preparation of the weight-only work, for all eight devices.
    assert_eq!(runtime.counters().compiles, 2, "one program (and its preparation) for all devices");
    let error = loaded.run_replicated(&[&inputs; 3]).expect_err("3 input sets for 8 devices");
    assert_eq!(error.to_string(), "3 input sets for a model loaded on 8 devices: give one per device");

    // Stateful replicas: each device's buffers evolve on their own, as 8 PyTorch modules would.
    let folder = common::fixtures_dir().join("buffer_mutation_calls");
    let loaded = load(&session, "buffer_mutation_calls", 8);
    for (inputs, expected) in CALLS {
        let inputs = read(&folder, inputs);
        let outputs = loaded.run_replicated(&[&inputs; 8]).expect("runs");
        for output in &outputs {
            matches(&folder, output, &read(&folder, expected)).unwrap_or_else(|error| panic!("{expected}: {error}"));
        }
    }
}

#[test]
fn loading_checks_the_weights() {
    let session = common::session();
    let folder = common::fixtures_dir().join("mlp");
    let source = std::fs::read_to_string(folder.join("model.fx")).expect("model.fx");
    let mut weights = read(&folder, "weights.safetensors");
    weights.shift_remove("fc2.bias");
    let error = session.load(&source, "fixtures/mlp/model.fx", &weights).err().expect("a weight is missing");
    assert_eq!(error.to_string(), "missing weight `fc2.bias`: the model expects f32[32]");
    let model = session.load_model(&source, "fixtures/mlp/model.fx").expect("loads");
    let error = session.place(&model, &read(&folder, "weights.safetensors"), 9).err().expect("one device only");
    assert!(
        error.to_string().starts_with("a program of 9 replicas needs as many devices, but the runtime has "),
        "{error}"
    );
}

#[test]
fn a_module_built_in_rust_needs_static_shapes() {
    let session = common::session();
    let source = std::fs::read_to_string(common::fixtures_dir().join("mlp_dynamic/model.fx")).expect("model.fx");
    let dynamic = session.load_model(&source, "fixtures/mlp_dynamic/model.fx").expect("loads");
    let error = session.model_from_module(dynamic.module().clone()).err().expect("symbolic batch");
    assert_eq!(
        error.to_string(),
        "input `x` has the symbolic type f32[s77, 16]; a module built in Rust needs static shapes"
    );
}
