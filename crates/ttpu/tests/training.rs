//! Training against PyTorch: joint graphs (loss and gradients), 20 steps of SGD and AdamW per
//! training fixture (per-step losses and final weights against torch.optim), on one device and
//! laid out over 8 CPU devices, checkpoints that resume bit for bit, and damaged checkpoints
//! refused.

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ttpu::train::{StepData, read_checkpoint};
use ttpu::{AdamW, Optimizer, Parallelism, Plan, Runtime, RuntimeOptions, Session, Sgd, TensorMap, Trainer};

const FIXTURES: [&str; 4] = ["train_mlp", "train_gpt", "train_cnn_bn", "train_hf_llama"];

fn session() -> &'static Session {
    static SESSION: OnceLock<Session> = OnceLock::new();
    SESSION.get_or_init(|| {
        let runtime = Runtime::from_plugin_or_default(None, &RuntimeOptions { devices: Some(8), ..Default::default() })
            .unwrap_or_else(|error| panic!("no PJRT CPU plugin: {error} (run `cargo xtask setup`)"));
        Session::with_runtime(runtime)
    })
}

fn folder(name: &str) -> PathBuf {
    common::fixtures_dir().join(name)
}

fn read(folder: &Path, file: &str) -> TensorMap {
    ttpu::read_safetensors(&folder.join(file)).unwrap_or_else(|error| panic!("{file}: {error}"))
}

fn meta(folder: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(folder.join("meta.json")).expect("meta.json")).expect("JSON")
}

/// The fixture's optimizer options, as torch.optim got them.
fn optimizer(folder: &Path, name: &str) -> Optimizer {
    let options = &meta(folder)["training"][name];
    let number = |key: &str| options[key].as_f64().unwrap_or_else(|| panic!("{name}.{key}"));
    match name {
        "sgd" => Optimizer::Sgd(Sgd {
            lr: number("lr"),
            momentum: number("momentum"),
            dampening: number("dampening"),
            weight_decay: number("weight_decay"),
            nesterov: options["nesterov"].as_bool().expect("nesterov"),
            maximize: false,
        }),
        _ => Optimizer::AdamW(AdamW {
            lr: number("lr"),
            betas: (options["betas"][0].as_f64().expect("beta1"), options["betas"][1].as_f64().expect("beta2")),
            eps: number("eps"),
            weight_decay: number("weight_decay"),
            amsgrad: options["amsgrad"].as_bool().expect("amsgrad"),
            maximize: false,
        }),
    }
}

fn joint(session: &Session, name: &str) -> ttpu::Model {
    let source = std::fs::read_to_string(folder(name).join("model.fx")).expect("model.fx");
    session.load_model(&source, &common::relative_model_path(name)).expect("the joint graph imports")
}

/// `Err` names the first value outside `rtol`/`atol`.
fn close(what: &str, got: &TensorMap, want: &TensorMap, rtol: f64, atol: f64) -> Result<(), String> {
    let reports = ttpu::parity::compare(got, want, rtol, atol).map_err(|error| format!("{what}: {error}"))?;
    match reports.iter().find(|report| !report.ok()) {
        Some(report) => Err(format!(
            "{what} {}: {} of {} outside rtol {rtol} atol {atol}; max abs {:.3e}",
            report.key, report.mismatched, report.total, report.max_abs
        )),
        None => Ok(()),
    }
}

/// Trains 20 steps and compares each step's loss and the final weights with PyTorch's.
fn train_and_compare(name: &str, optimizer_name: &str, parallelism: Option<&Parallelism>) -> Result<(), String> {
    let session = session();
    let folder = folder(name);
    let training = &meta(&folder)["training"];
    let (rtol, atol) = (training["rtol"].as_f64().expect("rtol"), training["atol"].as_f64().expect("atol"));
    let steps = training["steps"].as_u64().expect("steps");
    let reference = read(&folder, &format!("train_{optimizer_name}.safetensors"));
    let data = StepData::new(read(&folder, "data.safetensors")).expect("data");
    let trainer = Trainer::new(
        session,
        &joint(session, name),
        &read(&folder, "weights.safetensors"),
        optimizer(&folder, optimizer_name),
        parallelism,
    )
    .map_err(|error| error.to_string())?;
    let mut losses = Vec::new();
    for step in 0..steps {
        losses.push(trainer.step(&data.batch(step)).map_err(|error| error.to_string())? as f32);
    }
    let what = format!("{name} {optimizer_name}");
    let got: TensorMap = [("losses".to_owned(), f32s(&losses))].into_iter().collect();
    let want: TensorMap = [("losses".to_owned(), reference["losses"].clone())].into_iter().collect();
    close(&what, &got, &want, rtol, atol)?;
    let mut weights = trainer.weights().map_err(|error| error.to_string())?;
    let mut expected = reference.clone();
    expected.shift_remove("losses");
    weights.retain(|key, _| expected.contains_key(key));
    close(&what, &weights, &expected, rtol, atol)
}

fn f32s(values: &[f32]) -> ttpu::HostTensor {
    let data = values.iter().flat_map(|value| value.to_le_bytes()).collect();
    ttpu::HostTensor::new(ttpu::DType::F32, vec![values.len() as i64], data).expect("valid")
}

#[test]
fn twenty_steps_of_sgd_and_adamw_match_torch_optim() {
    for name in FIXTURES {
        for optimizer in ["sgd", "adamw"] {
            train_and_compare(name, optimizer, None).unwrap_or_else(|error| panic!("{error}"));
        }
    }
}

#[test]
fn data_parallel_training_on_eight_devices_matches_torch_optim() {
    for plan in [Plan::Ddp, Plan::Fsdp] {
        let parallelism = Parallelism::new(None, Some(8), plan).expect("plan");
        for name in FIXTURES {
            for optimizer in ["sgd", "adamw"] {
                train_and_compare(name, optimizer, Some(&parallelism)).unwrap_or_else(|error| panic!("{error}"));
            }
        }
    }
}

#[test]
fn a_wrong_training_loop_is_caught() {
    // The checker must fail for a trainer that ignores its optimizer's options: AdamW's
    // reference against SGD's run.
    let error = {
        let session = session();
        let folder = folder("train_mlp");
        let data = StepData::new(read(&folder, "data.safetensors")).expect("data");
        let trainer = Trainer::new(
            session,
            &joint(session, "train_mlp"),
            &read(&folder, "weights.safetensors"),
            optimizer(&folder, "sgd"),
            None,
        )
        .expect("trainer");
        for step in 0..20 {
            trainer.step(&data.batch(step)).expect("step");
        }
        let mut reference = read(&folder, "train_adamw.safetensors");
        reference.shift_remove("losses");
        let mut weights = trainer.weights().expect("weights");
        weights.retain(|key, _| reference.contains_key(key));
        close("sgd vs adamw", &weights, &reference, 1e-3, 1e-5)
    };
    assert!(error.is_err(), "SGD's weights passed for AdamW's");
}

#[test]
fn a_resumed_run_ends_bit_for_bit_where_an_uninterrupted_one_does() {
    let session = session();
    let folder = folder("train_cnn_bn");
    let data = StepData::new(read(&folder, "data.safetensors")).expect("data");
    let weights = read(&folder, "weights.safetensors");
    let model = joint(session, "train_cnn_bn");
    let adamw = optimizer(&folder, "adamw");
    let straight = Trainer::new(session, &model, &weights, adamw.clone(), None).expect("trainer");
    for step in 0..6 {
        straight.step(&data.batch(step)).expect("step");
    }
    let dir = std::env::temp_dir().join(format!("ttpu-resume-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let checkpoint = dir.join("step-3.safetensors");
    {
        let interrupted = Trainer::new(session, &model, &weights, adamw.clone(), None).expect("trainer");
        for step in 0..3 {
            interrupted.step(&data.batch(step)).expect("step");
        }
        interrupted.save_checkpoint(&checkpoint).expect("checkpoint");
    }
    let resumed = Trainer::resume(session, &model, &checkpoint, adamw.clone(), None).expect("resumes");
    assert_eq!(resumed.steps_done().expect("step"), 3);
    for step in 3..6 {
        resumed.step(&data.batch(step)).expect("step");
    }
    assert_eq!(resumed.state().expect("state"), straight.state().expect("state"), "every bit, optimizer state too");

    // Another optimizer is refused; so are a torn and a foreign file.
    let error = Trainer::resume(session, &model, &checkpoint, optimizer(&folder, "sgd"), None).err().expect("sgd");
    assert!(error.to_string().contains("was written with optimizer"), "{error}");
    let bytes = std::fs::read(&checkpoint).expect("read");
    let torn = dir.join("torn.safetensors");
    std::fs::write(&torn, &bytes[..bytes.len() / 2]).expect("write");
    let error = read_checkpoint(&torn).expect_err("torn");
    assert!(error.to_string().contains("it may be torn or corrupt"), "{error}");
    let foreign = dir.join("weights.safetensors");
    std::fs::copy(folder.join("weights.safetensors"), &foreign).expect("copy");
    let error = read_checkpoint(&foreign).expect_err("not a checkpoint");
    assert_eq!(
        error.to_string(),
        format!("training: checkpoint {}: not a ttpu checkpoint (no `format` metadata)", foreign.display())
    );
    let _ = std::fs::remove_dir_all(&dir);
}
