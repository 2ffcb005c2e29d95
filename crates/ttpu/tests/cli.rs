//! The `ttpu` binary's contract: the command forms outside tools depend on.

mod common;

use std::path::Path;
use std::process::{Command, Output};

fn ttpu(args: &[&str]) -> Output {
    // Compiled programs go to a folder of this test process, never the user's cache.
    let cache = std::env::temp_dir().join(format!("ttpu-cli-cache-{}", std::process::id()));
    ttpu_with_cache(args, &cache)
}

fn ttpu_with_cache(args: &[&str], cache: &Path) -> Output {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    Command::new(env!("CARGO_BIN_EXE_ttpu"))
        .args(args)
        .env("TTPU_CACHE_DIR", cache)
        .current_dir(root)
        .output()
        .expect("the binary starts")
}

const MLP_DATA: [&str; 4] =
    ["--weights", "fixtures/mlp/weights.safetensors", "--inputs", "fixtures/mlp/inputs.safetensors"];

#[test]
fn bench_json_has_the_stable_keys_and_the_second_process_hits_the_disk_cache() {
    let cache = std::env::temp_dir().join(format!("ttpu-cli-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    let bench = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec!["bench", "fixtures/mlp/model.fx"];
        args.extend(MLP_DATA);
        args.extend(["--runs", "4", "--warmup", "1", "--json"]);
        args.extend(extra);
        let out = ttpu_with_cache(&args, &cache);
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_str(stdout(&out).trim()).unwrap_or_else(|error| panic!("{error}: {}", stdout(&out)))
    };
    let first = bench(&[]);
    for key in ["compile_s", "first_run_ms", "transfer_in_ms", "transfer_out_ms", "import_s", "lower_s"] {
        assert!(first[key].as_f64().is_some_and(|value| value >= 0.0), "{key} in {first}");
    }
    assert_eq!(first["cache_hit"], serde_json::Value::Bool(false), "{first}");
    assert_eq!(first["cache"], "none");
    assert_eq!(first["warm_ms"]["runs"], 4);
    let warm = &first["warm_ms"];
    let (p10, median, p90) = (warm["p10"].as_f64(), warm["median"].as_f64(), warm["p90"].as_f64());
    assert!(p10 <= median && median <= p90 && p10.is_some_and(|p10| p10 > 0.0), "{warm}");
    assert_eq!(first["devices"], 1);
    // The CPU plugin has no cost analysis: ttpu's estimate, saying so. The MLP's three matrix
    // products (4x16 by 16x32, 4x32 by 32x32, 4x32 by 32x8) are most of its flops; the erf GELU
    // and the bias adds are the rest.
    assert!(first["cost"]["source"].as_str().is_some_and(|source| source.starts_with("ttpu")), "{first}");
    let matmuls = 2 * 4 * (16 * 32 + 32 * 32 + 32 * 8);
    let flops = first["cost"]["flops"].as_u64().unwrap_or(0);
    assert!((matmuls..matmuls * 3 / 2).contains(&flops), "{first}");
    assert!(first["cost"]["bytes_accessed"].as_u64().is_some_and(|bytes| bytes > 7456), "{first}");
    let second = bench(&["--one-shot"]);
    assert_eq!((second["cache_hit"].as_bool(), second["cache"].as_str()), (Some(true), Some("disk")), "{second}");
    assert_eq!(second["one_shot_ms"]["runs"], 4);
    // --no-cache neither reads nor writes the folder.
    let third = bench(&["--no-cache"]);
    assert_eq!(third["cache_hit"], serde_json::Value::Bool(false), "{third}");
    let _ = std::fs::remove_dir_all(&cache);
}

#[test]
fn run_and_bench_write_a_chrome_trace_of_every_stage() {
    let trace = std::env::temp_dir().join(format!("ttpu-cli-trace-{}.json", std::process::id()));
    let output = std::env::temp_dir().join(format!("ttpu-cli-trace-out-{}.safetensors", std::process::id()));
    let mut args = vec!["run", "fixtures/mlp/model.fx", "--no-cache", "-o", output.to_str().unwrap()];
    args.extend(MLP_DATA);
    args.extend(["--trace", trace.to_str().unwrap()]);
    let out = ttpu(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&trace).expect("the trace is written");
    let trace_json: serde_json::Value = serde_json::from_str(&text).expect("the trace is JSON");
    let events = trace_json["traceEvents"].as_array().expect("traceEvents");
    let names: Vec<&str> =
        events.iter().filter(|event| event["ph"] == "X").filter_map(|event| event["name"].as_str()).collect();
    for stage in [
        "parse",
        "import",
        "fuse",
        "weights_in",
        "run",
        "prepare",
        "compile",
        "lower",
        "transfer_in",
        "execute",
        "to_host",
        "transfer_out",
    ] {
        assert!(names.contains(&stage), "no `{stage}` span in {names:?}");
    }
    for event in events.iter().filter(|event| event["ph"] == "X") {
        assert!(event["ts"].as_f64().is_some() && event["dur"].as_f64().is_some_and(|dur| dur >= 0.0), "{event}");
    }
    let compile = events.iter().find(|event| event["name"] == "compile").expect("a compile span");
    assert_eq!(compile["args"]["source"], "compiled", "{compile}");
    assert!(
        trace_json["metadata"]["device_events"]
            .as_str()
            .is_some_and(|note| note.starts_with("none: the plugin exports no PJRT profiler extension")),
        "{}",
        trace_json["metadata"]
    );
    let _ = std::fs::remove_file(&trace);
    let _ = std::fs::remove_file(&output);
}

#[test]
fn bench_runs_on_several_devices() {
    let mut args = vec!["bench", "fixtures/mlp/model.fx"];
    args.extend(MLP_DATA);
    args.extend(["--runs", "2", "--warmup", "0", "--devices", "4", "--no-cache"]);
    let out = ttpu(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for line in ["model          fixtures/mlp/model.fx", "(4 devices)", "compile        ", "warm run       median "] {
        assert!(text.contains(line), "`{line}` missing from:\n{text}");
    }
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn lower_prints_stablehlo_and_ir() {
    let out = ttpu(&["lower", "fixtures/mlp/model.fx"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("module"), "{text}");
    assert!(text.contains("stablehlo.dot_general"), "{text}");
    assert!(text.contains("func.func @main(%arg0: tensor<32x16xf32>"), "{text}");

    let out = ttpu(&["lower", "fixtures/mlp/model.fx", "--emit", "ir"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("graph @main(%0: f32[32, 16] \"p_fc1_weight\""), "{}", stdout(&out));
}

#[test]
fn lower_writes_to_a_file() {
    let file = std::env::temp_dir().join(format!("ttpu-cli-lower-{}.mlir", std::process::id()));
    let out = ttpu(&["lower", "fixtures/mlp/model.fx", "-o", file.to_str().expect("utf-8 temp path")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&file).expect("the output file exists");
    std::fs::remove_file(&file).ok();
    assert!(text.starts_with("module"));
}

#[test]
fn run_writes_outputs_and_parity_passes() {
    let file = std::env::temp_dir().join(format!("ttpu-cli-run-{}.safetensors", std::process::id()));
    let out = ttpu(&[
        "run",
        "fixtures/buffer_mutation/model.fx",
        "--weights",
        "fixtures/buffer_mutation/weights.safetensors",
        "--inputs",
        "fixtures/buffer_mutation/inputs.safetensors",
        "-o",
        file.to_str().expect("utf-8 temp path"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let outputs = ttpu::read_safetensors(&file).expect("outputs written");
    std::fs::remove_file(&file).ok();
    let mut keys: Vec<&str> = outputs.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(keys, ["count", "output_0", "running_mean"]);

    let out = ttpu(&[
        "parity",
        "fixtures/buffer_mutation/model.fx",
        "--weights",
        "fixtures/buffer_mutation/weights.safetensors",
        "--inputs",
        "fixtures/buffer_mutation/inputs.safetensors",
        "--expected",
        "fixtures/buffer_mutation/expected.safetensors",
    ]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("all outputs match"), "{}", stdout(&out));
}

#[test]
fn parity_reports_max_abs_max_rel_and_the_worst_index_per_output() {
    // docs/numerics.md documents this line; tolerances are judged from these numbers.
    let out = ttpu(&[
        "parity",
        "fixtures/ops_mix/model.fx",
        "--weights",
        "fixtures/ops_mix/weights.safetensors",
        "--inputs",
        "fixtures/ops_mix/inputs.safetensors",
        "--expected",
        "fixtures/ops_mix/expected.safetensors",
    ]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.first(), Some(&"parity (rtol 1e-4, atol 1e-5):"), "{text}");
    assert_eq!(lines.last(), Some(&"all outputs match"), "{text}");
    let outputs = &lines[1..lines.len() - 1];
    assert_eq!(outputs.len(), 13, "one line per output: {text}");
    for (index, line) in outputs.iter().enumerate() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields[..2], [format!("output_{index}").as_str(), "ok"], "{line}");
        assert_eq!([fields[2], fields[3], fields[5], fields[6], fields[8]], ["max", "abs", "max", "rel", "mismatched"]);
        for number in [fields[4], fields[7]] {
            assert!(number.parse::<f64>().is_ok_and(|value| value >= 0.0), "{line}");
        }
        assert!(fields[9].starts_with("0/"), "{line}");
        assert_eq!(fields[10..12], ["worst", "at"], "{line}");
        assert!(line.ends_with(']') && fields[12].starts_with('['), "{line}");
    }
    // The integer output (i32, exact) and the 3-d f32 output name a full index.
    assert!(outputs[7].contains("max abs 0.000e0  max rel 0.000e0"), "{}", outputs[7]);
    assert!(outputs[0].contains(" worst at [") && outputs[0].matches(',').count() == 2, "{}", outputs[0]);
}

#[test]
fn parity_fails_with_a_nonzero_exit_when_outputs_differ() {
    // Comparing the MLP against the bf16 MLP's expectations cannot pass: dtypes differ.
    let out = ttpu(&[
        "parity",
        "fixtures/mlp/model.fx",
        "--weights",
        "fixtures/mlp/weights.safetensors",
        "--inputs",
        "fixtures/mlp/inputs.safetensors",
        "--expected",
        "fixtures/mlp_bf16/expected.safetensors",
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("output `output_0`: expected bf16[4, 8], the model produced f32[4, 8]"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_malformed_model_reports_file_line_and_column() {
    let out = ttpu(&["lower", "fixtures/errors/unknown_op.fx"]);
    assert!(!out.status.success());
    let expected =
        std::fs::read_to_string(common::fixtures_dir().join("errors/unknown_op.expected")).expect("expected message");
    assert!(stderr(&out).contains(expected.trim_end()), "{}", stderr(&out));
}

#[test]
fn a_dynamic_model_lowers_with_sizes_and_explains_without() {
    let out = ttpu(&["lower", "fixtures/mlp_dynamic/model.fx"]);
    assert!(!out.status.success());
    let message = stderr(&out);
    assert!(
        message.contains(
            "value %6 has the symbolic type f32[s77, 16]: give the symbols values, or lower shape-polymorphic"
        ),
        "{message}"
    );
    assert!(message.contains("--sym NAME=SIZE"), "{message}");
    assert!(message.contains("--dynamic"), "{message}");

    let out = ttpu(&["lower", "fixtures/mlp_dynamic/model.fx", "--sym", "s77=5"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("tensor<5x16xf32>"), "{}", stdout(&out));

    let out = ttpu(&["lower", "fixtures/mlp_dynamic/model.fx", "--sym", "s77=5000"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("s77"), "{}", stderr(&out));
}

#[test]
fn dynamic_prints_one_shape_polymorphic_module() {
    let out = ttpu(&["lower", "--dynamic", "fixtures/gpt2_block_dynamic/model.fx"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let module = stdout(&out);
    assert!(module.contains("func.func @main("), "{module}");
    assert!(module.contains("tensor<?x?x32xf32>"), "{module}");
    for op in ["get_dimension_size", "dynamic_reshape", "dynamic_broadcast_in_dim", "real_dynamic_slice"] {
        assert!(module.contains(&format!("\"stablehlo.{op}\"")), "{op} missing:\n{module}");
    }
    let out = ttpu(&["lower", "--dynamic", "--sym", "s77=4", "fixtures/mlp_dynamic/model.fx"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("cannot be used with"), "{}", stderr(&out));
}

#[test]
fn explain_dynamic_gives_each_symbols_verdict() {
    let out = ttpu(&["lower", "fixtures/mlp_dynamic/model.fx", "--explain-dynamic"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "s77 in [2, 1024]: padded to the next power of two; outputs are sliced back (no op mixes positions along it)\n"
    );
}

#[test]
fn emit_fused_prints_the_rewritten_ir_and_no_fuse_turns_it_off() {
    let out = ttpu(&["lower", "fixtures/mlp/model.fx", "--emit", "fused"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).starts_with("fuse: 75 -> 56 ops, cost "), "{}", stderr(&out));
    assert!(!stdout(&out).contains("transpose("), "the transposes fold into dot_general: {}", stdout(&out));

    let fused = stdout(&ttpu(&["lower", "fixtures/mlp/model.fx"]));
    let unfused = stdout(&ttpu(&["lower", "fixtures/mlp/model.fx", "--no-fuse"]));
    assert!(!fused.contains("stablehlo.transpose"), "{fused}");
    assert!(unfused.contains("stablehlo.transpose"), "{unfused}");
}

#[test]
fn lower_lays_a_model_out_over_a_mesh() {
    let out = ttpu(&["lower", "fixtures/mlp/model.fx", "--devices", "8", "--parallel", "fsdp"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains(r#""sdy.mesh"() {mesh = #sdy.mesh<["devices"=8]>, sym_name = "mesh"}"#), "{text}");
    assert!(
        text.contains(r#"%arg0: tensor<32x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"devices"}, {}]>}"#),
        "fc1.weight split along dim 0: {text}"
    );
    assert!(text.contains(r#"-> (tensor<4x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>})"#), "{text}");
    let out = ttpu(&["lower", "fixtures/gpt2_block/model.fx", "--plan", "fixtures/plans/gpt2_block_tp.toml"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains(r#"#sdy.mesh<["dp"=2, "tp"=4]>"#), "{}", stdout(&out));
}

#[test]
fn parity_holds_under_a_parallel_plan_and_bad_plans_are_explained() {
    let mut args = vec!["parity", "fixtures/mlp/model.fx"];
    args.extend(MLP_DATA);
    args.extend(["--expected", "fixtures/mlp/expected.safetensors", "--mesh", "dp=2,tp=4", "--parallel", "fsdp"]);
    let out = ttpu(&args);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("all outputs match"), "{}", stdout(&out));

    let run = |extra: &[&str]| {
        let mut args = vec!["run", "fixtures/mlp/model.fx", "-o", "/dev/null"];
        args.extend(MLP_DATA);
        args.extend(extra);
        let out = ttpu(&args);
        assert!(!out.status.success(), "{extra:?} should fail");
        stderr(&out)
    };
    let message = run(&["--devices", "8"]);
    assert!(message.contains("--devices runs a model over several devices with a plan"), "{message}");
    let message = run(&["--devices", "4", "--mesh", "dp=2,tp=4", "--parallel", "ddp"]);
    assert!(message.contains("mesh dp=2,tp=4 has 8 devices, but --devices says 4"), "{message}");
    let message = run(&["--devices", "8", "--parallel", "ddp"]);
    assert!(
        message.contains("input `x` has batch size 4 (dim 0 of f32[4, 16]), which 8 devices cannot split"),
        "{message}"
    );
    let message = run(&["--mesh", "dp=2"]);
    assert!(message.contains("--mesh needs a plan"), "{message}");
}

#[test]
fn train_resumes_exactly_and_logs_each_step() {
    let dir = std::env::temp_dir().join(format!("ttpu-cli-train-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let path = |name: &str| dir.join(name).to_str().expect("utf-8").to_owned();
    let run = |steps: &str, extra: &[&str]| {
        let mut args = vec![
            "train",
            "fixtures/train_mlp/model.fx",
            "--data",
            "fixtures/train_mlp/data.safetensors",
            "--optimizer",
            "sgd",
            "--lr",
            "0.05",
            "--momentum",
            "0.9",
            "--steps",
            steps,
        ];
        args.extend(extra);
        ttpu(&args)
    };
    let train = |steps: &str, extra: &[&str]| {
        let out = run(steps, extra);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    let (straight, resumed, log, checkpoints) =
        (path("straight.safetensors"), path("resumed.safetensors"), path("log.jsonl"), path("ck"));
    let weights = ["--weights", "fixtures/train_mlp/weights.safetensors"];
    let text = train("6", &[weights[0], weights[1], "-o", &straight]);
    assert!(text.contains("trained 6 steps; wrote 6 tensors to"), "{text}");
    train(
        "4",
        &[
            weights[0],
            weights[1],
            "-o",
            &path("half.safetensors"),
            "--checkpoint-every",
            "2",
            "--checkpoint-dir",
            &checkpoints,
            "--log",
            &log,
        ],
    );
    train("6", &["-o", &resumed, "--resume", &checkpoints, "--log", &log]);
    assert_eq!(std::fs::read(&straight).expect("a"), std::fs::read(&resumed).expect("b"), "bit for bit");
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .expect("log")
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    assert_eq!(lines.iter().map(|line| line["step"].as_u64().expect("step")).collect::<Vec<_>>(), [0, 1, 2, 3, 4, 5]);
    assert!(lines.iter().all(|line| line["loss"].as_f64().is_some_and(f64::is_finite)));
    // A damaged newest checkpoint is refused, not trusted.
    let newest = dir.join("ck/step-00000004.safetensors");
    let bytes = std::fs::read(&newest).expect("checkpoint");
    std::fs::write(&newest, &bytes[..bytes.len() - 100]).expect("truncate");
    let out = run("6", &["-o", &resumed, "--resume", &checkpoints]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("it may be torn or corrupt"), "{}", stderr(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn xla_options_reach_the_plugin_and_unknown_ones_are_clean_errors() {
    let dump = std::env::temp_dir().join(format!("ttpu-cli-xla-dump-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dump);
    let output = std::env::temp_dir().join(format!("ttpu-cli-xla-{}.safetensors", std::process::id()));
    let run = |options: &[String]| {
        let mut args = vec!["run", "fixtures/mlp/model.fx", "--no-cache"];
        args.extend(MLP_DATA);
        args.extend(["--output", output.to_str().expect("utf-8 temp path")]);
        for option in options {
            args.extend(["--xla-option", option.as_str()]);
        }
        ttpu(&args)
    };
    // `xla_dump_to` makes XLA write its HLO: the option reached the compile.
    let out = run(&[format!("xla_dump_to={}", dump.display()), "xla_cpu_multi_thread_eigen=false".into()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let dumped = std::fs::read_dir(&dump).map(|entries| entries.count()).unwrap_or(0);
    assert!(dumped > 0, "no files in {}", dump.display());
    let out = run(&["xla_no_such_option=1".into()]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("pjrt plugin error (invalid argument): No such compile option: 'xla_no_such_option'"),
        "{}",
        stderr(&out)
    );
    let out = run(&["xla_cpu_multi_thread_eigen".into()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("expected NAME=VALUE, found `xla_cpu_multi_thread_eigen`"), "{}", stderr(&out));
    let _ = std::fs::remove_dir_all(&dump);
    let _ = std::fs::remove_file(&output);
}
