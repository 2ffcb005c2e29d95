//! Cost of each pipeline stage on every committed fixture: import (parse + decompose + verify),
//! lowering to StableHLO, PJRT compilation, and a run with a warm compile cache (transfer in,
//! execute, transfer out), once uploading the weights with the run and once with them resident. A regression in any stage shows up under its own name; a new fixture
//! is a new benchmark.

use std::path::{Path, PathBuf};

use criterion::{Criterion, criterion_group, criterion_main};
use ttpu::{CompileOptions, Compiler, Session, TensorMap, read_safetensors};

fn fixtures() -> Vec<(String, PathBuf)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures");
    let mut res: Vec<(String, PathBuf)> = std::fs::read_dir(dir)
        .expect("fixtures/ exists")
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.join("model.fx").is_file())
        .map(|path| (path.file_name().expect("named").to_string_lossy().into_owned(), path))
        .collect();
    res.sort();
    res
}

fn stages(c: &mut Criterion) {
    let compiler = Compiler::new();
    let session = Session::from_plugin_or_default(None).expect("a PJRT plugin (run `cargo xtask setup`)");
    let options = CompileOptions::default();
    for (name, folder) in fixtures() {
        let source = std::fs::read_to_string(folder.join("model.fx")).expect("model.fx is readable");
        let path = format!("fixtures/{name}/model.fx");
        let mut group = c.benchmark_group(name.clone());
        group.sample_size(20);
        group.bench_function("import", |b| b.iter(|| compiler.import(&source, &path, &options).expect("imports")));
        let Ok(compiled) = compiler.compile(&source, &path, &options) else {
            // Dynamic models lower only once their sizes are known; their run bench covers them.
            group.finish();
            continue;
        };
        group.bench_function("lower", |b| b.iter(|| compiler.lower(&compiled.module).expect("lowers")));
        group.bench_function("pjrt_compile", |b| {
            b.iter(|| session.runtime().client().compile(&compiled.stablehlo).expect("compiles"))
        });
        let model = session.load_model(&source, &path).expect("loads");
        let weights_file = folder.join("weights.safetensors");
        let weights =
            if weights_file.is_file() { read_safetensors(&weights_file).expect("weights") } else { TensorMap::new() };
        let inputs = read_safetensors(&folder.join("inputs.safetensors")).expect("inputs");
        session.run(&model, &weights, &inputs).expect("runs");
        // Side by side: the one-shot path uploads every weight per run; a loaded model keeps them
        // on the device and uploads only the inputs.
        group.bench_function("run_cached", |b| b.iter(|| session.run(&model, &weights, &inputs).expect("runs")));
        let loaded = session.place(&model, &weights, 1).expect("weights upload");
        loaded.run(&inputs).expect("runs");
        group.bench_function("run_resident", |b| b.iter(|| loaded.run(&inputs).expect("runs")));
        group.finish();
    }
}

criterion_group!(benches, stages);
criterion_main!(benches);
