//! Models laid out over 8 CPU devices by XLA's SPMD partitioner: every fixture under FSDP,
//! tensor-parallel plans for gpt2_block and hf_llama, DDP, each checked against PyTorch's outputs
//! and the single-device run; per-device resident bytes; the errors of plans that do not fit.

mod common;

use std::path::Path;
use std::sync::OnceLock;

use ttpu::{Mesh, Parallelism, Plan, PlanFile, Runtime, RuntimeOptions, Session, TensorMap, read_safetensors};

fn eight() -> &'static Session {
    static SESSION: OnceLock<Session> = OnceLock::new();
    SESSION.get_or_init(|| {
        let runtime = Runtime::from_plugin_or_default(None, &RuntimeOptions { devices: Some(8), ..Default::default() })
            .unwrap_or_else(|error| panic!("no PJRT CPU plugin with 8 devices: {error} (run `cargo xtask setup`)"));
        Session::with_runtime(runtime)
    })
}

fn read(folder: &Path, file: &str) -> TensorMap {
    if !folder.join(file).is_file() {
        return TensorMap::new();
    }
    read_safetensors(&folder.join(file)).unwrap_or_else(|error| panic!("{file}: {error}"))
}

/// Every output within `rtol`/`atol` of `expected`.
fn check(what: &str, outputs: &TensorMap, expected: &TensorMap, rtol: f64, atol: f64) {
    let reports =
        ttpu::parity::compare(outputs, expected, rtol, atol).unwrap_or_else(|error| panic!("{what}: {error}"));
    assert_eq!(reports.len(), expected.len(), "{what}");
    for report in reports {
        assert!(
            report.ok(),
            "{what} {}: {} of {} outside rtol {rtol} atol {atol}; max abs {:.3e} at {:?}",
            report.key,
            report.mismatched,
            report.total,
            report.max_abs,
            report.worst_index
        );
    }
}

/// Runs fixture `name` laid out by `parallelism` over every input set (in order on one loaded
/// model when the fixture's sets are chained calls) and checks PyTorch's outputs and the
/// single-device run.
fn run_fixture(session: &Session, name: &str, parallelism: &Parallelism) {
    let folder = common::fixtures_dir().join(name);
    let source = std::fs::read_to_string(folder.join("model.fx")).expect("model.fx");
    let model = session.load_model(&source, &common::relative_model_path(name)).expect("loads");
    let weights = read(&folder, "weights.safetensors");
    let (rtol, atol) = common::tolerances(&folder);
    let chained = common::chained(&folder);
    let mut sharded = None;
    let mut single = None;
    for (inputs, expected) in common::input_sets(&folder) {
        let inputs = read(&folder, &inputs);
        if sharded.is_none() || !chained {
            sharded =
                Some(session.shard(&model, &weights, parallelism).unwrap_or_else(|error| panic!("{name}: {error}")));
            single = Some(session.place(&model, &weights, 1).expect("one device"));
        }
        let what = format!("{name}/{expected} on mesh {}", parallelism.mesh);
        let outputs = sharded.as_ref().expect("loaded").run(&inputs).unwrap_or_else(|error| panic!("{what}: {error}"));
        check(&what, &outputs, &read(&folder, &expected), rtol, atol);
        let alone = single.as_ref().expect("loaded").run(&inputs).expect("runs on one device");
        check(&format!("{what} vs one device"), &outputs, &alone, rtol, atol);
    }
}

#[test]
fn every_fixture_matches_pytorch_under_fsdp_on_eight_devices() {
    let fsdp = Parallelism::new(None, Some(8), Plan::Fsdp).expect("plan");
    let fixtures = common::fixtures();
    assert!(fixtures.len() >= 36);
    for (name, _) in fixtures {
        run_fixture(eight(), &name, &fsdp);
    }
}

#[test]
fn tensor_parallel_plans_match_pytorch() {
    for name in ["gpt2_block", "hf_llama"] {
        let file = PlanFile::read(&common::fixtures_dir().join(format!("plans/{name}_tp.toml"))).expect("plan file");
        let plan = Parallelism::new(None, Some(8), Plan::Explicit(file)).expect("plan");
        assert_eq!(plan.mesh.to_string(), "dp=2,tp=4");
        run_fixture(eight(), name, &plan);
    }
}

#[test]
fn ddp_splits_the_batch_and_refuses_what_does_not_divide() {
    let two = Parallelism::new(Some(Mesh::parse("dp=2").expect("mesh")), None, Plan::Ddp).expect("plan");
    run_fixture(eight(), "gpt2_block", &two);
    let folder = common::fixtures_dir().join("gpt2_block");
    let source = std::fs::read_to_string(folder.join("model.fx")).expect("model.fx");
    let model = eight().load_model(&source, "fixtures/gpt2_block/model.fx").expect("loads");
    let ddp = Parallelism::new(None, Some(8), Plan::Ddp).expect("plan");
    let loaded = eight().shard(&model, &read(&folder, "weights.safetensors"), &ddp).expect("weights replicate");
    let error = loaded.run(&read(&folder, "inputs.safetensors")).expect_err("batch 2 on 8 devices");
    assert_eq!(
        error.to_string(),
        "sharding: input `hidden_states` has batch size 2 (dim 0 of f32[2, 8, 32]), which 8 devices cannot split \
         evenly; --parallel ddp splits dim 0 of every input"
    );
}

#[test]
fn fsdp_keeps_an_eighth_of_the_large_weights_per_device() {
    let folder = common::fixtures_dir().join("hf_llama");
    let source = std::fs::read_to_string(folder.join("model.fx")).expect("model.fx");
    let model = eight().load_model(&source, "fixtures/hf_llama/model.fx").expect("loads");
    let weights = read(&folder, "weights.safetensors");
    let total: usize = weights.values().map(|tensor| tensor.data.len()).sum();
    let replicated = eight().place(&model, &weights, 1).expect("one device");
    let fsdp =
        eight().shard(&model, &weights, &Parallelism::new(None, Some(8), Plan::Fsdp).expect("plan")).expect("shards");
    let (whole, sharded) =
        (replicated.resident_bytes_per_device().expect("bytes"), fsdp.resident_bytes_per_device().expect("bytes"));
    assert!(whole >= total, "one device holds every weight: {whole} of {total}");
    // Every hf_llama weight has a dim that 8 divides except the few small ones.
    assert!(sharded * 6 < total, "fsdp keeps {sharded} of {total} bytes per device");
    assert_eq!(fsdp.state("model.lm_head.weight", 0).expect("assembles"), weights["model.lm_head.weight"]);
}

#[test]
fn a_mesh_larger_than_the_runtime_is_refused() {
    let runtime = Runtime::from_plugin_or_default(None, &RuntimeOptions { devices: Some(2), ..Default::default() })
        .expect("2 devices");
    let session = Session::with_runtime(runtime);
    let folder = common::fixtures_dir().join("mlp");
    let source = std::fs::read_to_string(folder.join("model.fx")).expect("model.fx");
    let model = session.load_model(&source, "fixtures/mlp/model.fx").expect("loads");
    let plan = Parallelism::new(Some(Mesh::parse("dp=2,tp=4").expect("mesh")), None, Plan::Fsdp).expect("plan");
    let error = session.shard(&model, &read(&folder, "weights.safetensors"), &plan).err().expect("8 > 2");
    assert_eq!(error.to_string(), "sharding: mesh dp=2,tp=4 needs 8 devices, but the runtime has 2");
}
