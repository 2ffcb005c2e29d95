//! End-to-end parity: every fixture runs on the CPU plugin and matches PyTorch's eager outputs
//! within the tolerances in its meta.json.

mod common;

use std::path::Path;

use ttpu::{TensorMap, read_safetensors};

fn run_fixture(folder: &Path, name: &str, inputs_file: &str) -> TensorMap {
    let session = common::session();
    let source = std::fs::read_to_string(folder.join("model.fx")).expect("model.fx is readable");
    let model = session.load_model(&source, &common::relative_model_path(name)).expect("the model loads");
    let weights_path = folder.join("weights.safetensors");
    let weights =
        if weights_path.is_file() { read_safetensors(&weights_path).expect("weights read") } else { TensorMap::new() };
    let inputs = read_safetensors(&folder.join(inputs_file)).expect("inputs read");
    session.run(&model, &weights, &inputs).unwrap_or_else(|error| panic!("{name}: {error}"))
}

fn assert_parity(name: &str, folder: &Path, outputs: &TensorMap, expected_file: &str) {
    let expected = read_safetensors(&folder.join(expected_file)).expect("expected outputs read");
    let (rtol, atol) = common::tolerances(folder);
    let reports =
        ttpu::parity::compare(outputs, &expected, rtol, atol).unwrap_or_else(|error| panic!("{name}: {error}"));
    assert_eq!(reports.len(), expected.len());
    for report in reports {
        assert!(
            report.ok(),
            "{name} {}: {} of {} elements outside rtol {rtol} atol {atol}; max abs {:.3e}, max rel {:.3e}, worst at {:?}",
            report.key,
            report.mismatched,
            report.total,
            report.max_abs,
            report.max_rel,
            report.worst_index
        );
    }
}

#[test]
fn every_fixture_matches_pytorch() {
    let fixtures = common::fixtures();
    assert!(fixtures.len() >= 8, "fixtures went missing: {fixtures:?}");
    for (name, folder) in fixtures {
        let outputs = run_fixture(&folder, &name, "inputs.safetensors");
        assert_parity(&name, &folder, &outputs, "expected.safetensors");
    }
}

#[test]
fn dynamic_batch_runs_at_each_size_and_compiles_once_per_size() {
    let session = common::session();
    let folder = common::fixtures_dir().join("mlp_dynamic");
    let source = std::fs::read_to_string(folder.join("model.fx")).expect("model.fx is readable");
    let model = session.load_model(&source, "fixtures/mlp_dynamic/model.fx").expect("the model loads");
    let weights = read_safetensors(&folder.join("weights.safetensors")).expect("weights read");
    let (rtol, atol) = common::tolerances(&folder);
    for (inputs, expected) in [
        ("inputs.safetensors", "expected.safetensors"),
        ("inputs_b7.safetensors", "expected_b7.safetensors"),
        ("inputs.safetensors", "expected.safetensors"),
    ] {
        let outputs =
            session.run(&model, &weights, &read_safetensors(&folder.join(inputs)).expect("inputs read")).expect("runs");
        let expected = read_safetensors(&folder.join(expected)).expect("expected read");
        for report in ttpu::parity::compare(&outputs, &expected, rtol, atol).expect("same keys") {
            assert!(report.ok(), "{inputs}: {report:?}");
        }
    }
    assert_eq!(model.compile_count(), 2, "batch 4 and batch 7 compile once each; the second batch-4 run is cached");
}
