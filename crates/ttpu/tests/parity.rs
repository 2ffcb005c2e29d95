//! End-to-end parity: every fixture runs on the CPU plugin and matches PyTorch's eager outputs
//! within the tolerances in its meta.json.

mod common;

use std::path::Path;

use ttpu::{TensorMap, read_safetensors};

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
fn every_fixture_and_input_set_matches_pytorch() {
    let fixtures = common::fixtures();
    assert!(fixtures.len() >= 78, "fixtures went missing: {fixtures:?}");
    let session = common::session();
    for (name, folder) in fixtures {
        let source = std::fs::read_to_string(folder.join("model.fx")).expect("model.fx is readable");
        let model = session.load_model(&source, &common::relative_model_path(&name)).expect("the model loads");
        let weights_path = folder.join("weights.safetensors");
        let weights = if weights_path.is_file() {
            read_safetensors(&weights_path).expect("weights read")
        } else {
            TensorMap::new()
        };
        let sets = common::input_sets(&folder);
        assert!(!sets.is_empty(), "{name} has no inputs");
        // Chained fixtures are successive calls of one module: one resident model runs the sets
        // in order, its mutated buffers carried from call to call.
        let chained = common::chained(&folder).then(|| session.place(&model, &weights, 1).expect("weights upload"));
        for (inputs, expected) in sets {
            let inputs_map = read_safetensors(&folder.join(&inputs)).expect("inputs read");
            let outputs = match &chained {
                Some(loaded) => loaded.run(&inputs_map),
                None => session.run(&model, &weights, &inputs_map),
            }
            .unwrap_or_else(|error| panic!("{name}/{inputs}: {error}"));
            assert_parity(&format!("{name}/{inputs}"), &folder, &outputs, &expected);
        }
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

/// A deterministic stream of sizes in `[low, high]` (xorshift), so the test needs no RNG crate.
fn sizes(count: usize, low: i64, high: i64) -> Vec<i64> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    (0..count)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            low + (state % (high - low + 1) as u64) as i64
        })
        .collect()
}

fn batch_input(batch: i64) -> TensorMap {
    let values: Vec<u8> =
        (0..batch * 16).flat_map(|index| (((index * 37 % 101) as f32 - 50.0) / 25.0).to_le_bytes()).collect();
    [("x".to_owned(), ttpu::HostTensor { dtype: ttpu_ir::DType::F32, shape: vec![batch, 16], data: values })]
        .into_iter()
        .collect()
}

#[test]
fn a_paddable_batch_compiles_once_per_power_of_two_and_matches_exact_runs() {
    let folder = common::fixtures_dir().join("mlp_dynamic");
    let source = std::fs::read_to_string(folder.join("model.fx")).expect("model.fx is readable");
    let weights = read_safetensors(&folder.join("weights.safetensors")).expect("weights read");
    let bucketed = common::session();
    let model = bucketed.load_model(&source, "fixtures/mlp_dynamic/model.fx").expect("the model loads");
    assert_eq!(model.padding_verdicts()[0].1, ttpu_ir::PaddingVerdict::Pad);

    let mut exact_session = ttpu::Session::from_plugin_or_default(None).expect("plugin");
    exact_session.set_bucketing(ttpu::Bucketing::Exact);
    let exact_model = exact_session.load_model(&source, "fixtures/mlp_dynamic/model.fx").expect("the model loads");

    let all_sizes = sizes(100, 2, 1024);
    for (step, &batch) in all_sizes.iter().enumerate() {
        let inputs = batch_input(batch);
        let outputs = bucketed.run(&model, &weights, &inputs).expect("runs");
        assert_eq!(outputs["output_0"].shape, [batch, 8], "outputs are cut back to the true batch");
        // Checking every tenth size against an exact compile keeps the test quick.
        if step % 10 == 0 {
            let exact = exact_session.run(&exact_model, &weights, &inputs).expect("runs");
            for report in ttpu::parity::compare(&outputs, &exact, 1e-5, 1e-6).expect("same keys") {
                assert!(report.ok(), "batch {batch}: {report:?}");
            }
        }
    }
    let buckets: std::collections::BTreeSet<u32> =
        all_sizes.iter().map(|&size| (size as u64).next_power_of_two().trailing_zeros()).collect();
    assert_eq!(model.compile_count(), buckets.len());
    assert!(model.compile_count() <= 10, "{} compiles for 100 sizes", model.compile_count());
    assert_eq!(exact_model.compile_count(), 10);
}

/// `hidden_states` of `batch` sequences of `length` tokens; row `r` is the same whatever the batch.
fn sequence_input(batch: i64, length: i64) -> TensorMap {
    let values: Vec<u8> = (0..batch)
        .flat_map(|row| (0..length * 32).map(move |index| (row * 7919 + index * 37) % 211))
        .flat_map(|value| ((value as f32 - 105.0) / 70.0).to_le_bytes())
        .collect();
    let tensor = ttpu::HostTensor { dtype: ttpu_ir::DType::F32, shape: vec![batch, length, 32], data: values };
    [("hidden_states".to_owned(), tensor)].into_iter().collect()
}

/// The first `rows` rows (dim 0) of an f32 tensor.
fn first_rows(tensor: &ttpu::HostTensor, rows: i64) -> ttpu::HostTensor {
    let row_bytes = tensor.data.len() / tensor.shape[0] as usize;
    let mut shape = tensor.shape.clone();
    shape[0] = rows;
    ttpu::HostTensor { dtype: tensor.dtype, shape, data: tensor.data[..row_bytes * rows as usize].to_vec() }
}

#[test]
fn a_sequence_model_pads_the_batch_compiles_each_length_and_each_size_is_right() {
    let folder = common::fixtures_dir().join("gpt2_block_dynamic");
    let source = std::fs::read_to_string(folder.join("model.fx")).expect("model.fx is readable");
    let weights = read_safetensors(&folder.join("weights.safetensors")).expect("weights read");
    let session = common::session();
    let model = session.load_model(&source, "fixtures/gpt2_block_dynamic/model.fx").expect("the model loads");
    // The attention input's view merges batch and sequence into `s47*s87` with the batch outside:
    // padding the batch appends whole sequences at the end, so it is paddable. The sequence is
    // inside that merge (and the causal mask slices along it): it compiles exactly.
    let verdicts = model.padding_verdicts();
    assert_eq!(verdicts[0].1, ttpu_ir::PaddingVerdict::Pad);
    match &verdicts[1].1 {
        ttpu_ir::PaddingVerdict::Exact(reason) => assert!(reason.ends_with("mixes positions along `s87`"), "{reason}"),
        ttpu_ir::PaddingVerdict::Pad => panic!("s87 may be padded"),
    }
    // 100 (batch, length) pairs in the ranges s47 in [1, 16], s87 in [2, 15]. Every size is
    // checked against the full batch of 16 at the same length: attention never crosses
    // sequences, so each row must match (PyTorch's own values at three sizes are checked by
    // `every_fixture_and_input_set_matches_pytorch`).
    let pairs: Vec<(i64, i64)> = sizes(100, 1, 16).into_iter().zip(sizes(107, 2, 15).into_iter().skip(7)).collect();
    let mut full_batch: std::collections::BTreeMap<i64, TensorMap> = std::collections::BTreeMap::new();
    for &(batch, length) in &pairs {
        let outputs = session.run(&model, &weights, &sequence_input(batch, length)).expect("runs");
        assert_eq!(outputs["output_0"].shape, [batch, length, 32]);
        let full = full_batch
            .entry(length)
            .or_insert_with(|| session.run(&model, &weights, &sequence_input(16, length)).expect("runs at batch 16"));
        let expected: TensorMap = [("output_0".to_owned(), first_rows(&full["output_0"], batch))].into_iter().collect();
        for report in ttpu::parity::compare(&outputs, &expected, 1e-5, 1e-6).expect("same keys") {
            assert!(report.ok(), "batch {batch}, length {length}: {report:?}");
        }
    }
    // One compile per (batch bucket, length): exactly per size these would be 83 compiles, 39 here.
    let bucket = |batch: i64| (batch as u64).next_power_of_two() as i64;
    let distinct: std::collections::BTreeSet<(i64, i64)> = pairs
        .iter()
        .map(|&(batch, length)| (bucket(batch), length))
        .chain(full_batch.keys().map(|&length| (16, length)))
        .collect();
    assert_eq!(model.compile_count(), distinct.len(), "one compile per bucket and length, none per repeat");
}

#[test]
fn sessions_on_one_runtime_share_its_shape_keyed_compile_cache() {
    let folder = common::fixtures_dir().join("mlp_dynamic");
    let source = std::fs::read_to_string(folder.join("model.fx")).expect("model.fx is readable");
    let weights = read_safetensors(&folder.join("weights.safetensors")).expect("weights read");
    let runtime = ttpu::Runtime::cpu().expect("the CPU plugin");
    let sessions = [ttpu::Session::with_runtime(runtime.clone()), ttpu::Session::with_runtime(runtime.clone())];
    let mut outputs = Vec::new();
    for session in &sessions {
        let model = session.load_model(&source, "fixtures/mlp_dynamic/model.fx").expect("the model loads");
        outputs.push(session.run(&model, &weights, &batch_input(5)).expect("runs"));
    }
    // The second session's specialisation has the same structure and shapes: a cache hit.
    let counters = runtime.counters();
    assert_eq!((counters.compiles, counters.cache_hits), (1, 1), "{counters:?}");
    assert_eq!(outputs[0]["output_0"], outputs[1]["output_0"]);
    // Another bucket is another shape, hence another compile.
    sessions[0].run(&sessions[0].load_model(&source, "m.fx").expect("loads"), &weights, &batch_input(9)).expect("runs");
    assert_eq!(runtime.counters().compiles, 2);
}

/// With fast-math the batch norms of the convolution networks fold into the convolutions before
/// them (the optimizer reports the fold), and the outputs still match PyTorch within each
/// fixture's tolerances. The folded models also run their load-time preparation, which computes
/// the scaled kernels.
#[test]
fn fast_math_folds_batch_norms_and_still_matches_pytorch() {
    let fuse = ttpu_fuse::FuseOptions { fast_math: true, ..ttpu_fuse::FuseOptions::default() };
    let options = ttpu::CompileOptions { fuse: Some(fuse), ..ttpu::CompileOptions::default() };
    let mut session = ttpu::Session::with_runtime(common::session().runtime().clone());
    session.set_compile_options(options.clone());
    for name in ["cnn", "tv_resnet18", "tv_mobilenet_v3_small", "tv_efficientnet_b0"] {
        let folder = common::fixtures_dir().join(name);
        let source = std::fs::read_to_string(folder.join("model.fx")).expect("model.fx is readable");
        let path = common::relative_model_path(name);
        let program = ttpu_fx::parse(&source, &path).expect("the model parses");
        let (_, report) = ttpu::Compiler::new().import_with_report(&program, &options).expect("the model imports");
        let report = report.expect("the optimizer ran");
        assert!(
            report.rules_fired.iter().any(|(rule, _)| *rule == "fold-scale-into-convolution"),
            "{name}: no batch norm folded\n{report}"
        );
        let model = session.load_model(&source, &path).expect("the model loads");
        let weights = read_safetensors(&folder.join("weights.safetensors")).expect("weights read");
        let inputs = read_safetensors(&folder.join("inputs.safetensors")).expect("inputs read");
        let outputs = session.run(&model, &weights, &inputs).unwrap_or_else(|error| panic!("{name}: {error}"));
        assert_parity(name, &folder, &outputs, "expected.safetensors");
    }
}
