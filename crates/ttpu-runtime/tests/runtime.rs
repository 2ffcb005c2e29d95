//! The runtime on the CPU plugin: N devices, replicated programs, donation, the compile caches
//! (memory and disk, including damaged disk entries), XLA's options and transfers.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ttpu_ir::{BinaryOp, DType, Graph, GraphBuilder, Shape, TensorType};
use ttpu_runtime::{CacheSource, CompileSpec, HostTensor, OptionValue, Runtime, RuntimeOptions};

fn f32s(dims: &[i64]) -> TensorType {
    TensorType::new(DType::F32, Shape::from_static(dims))
}

fn tensor(values: &[f32]) -> HostTensor {
    let data = values.iter().flat_map(|value| value.to_le_bytes()).collect();
    HostTensor::new(DType::F32, vec![values.len() as i64], data).expect("a valid tensor")
}

fn values(tensor: &HostTensor) -> Vec<f32> {
    (0..tensor.len()).map(|index| tensor.get_f64(index) as f32).collect()
}

/// `(a + b, a * b)` over two `f32[n]` inputs.
fn add_and_mul(n: i64) -> Graph {
    let mut builder = GraphBuilder::new();
    let a = builder.input(f32s(&[n]), Some("a".into()));
    let b = builder.input(f32s(&[n]), Some("b".into()));
    let sum = builder.binary(BinaryOp::Add, a, b).expect("adds");
    let product = builder.binary(BinaryOp::Multiply, a, b).expect("multiplies");
    builder.finish(&[sum, product])
}

/// One runtime with 8 CPU devices for the tests that need several.
fn eight() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        Runtime::from_plugin_or_default(None, &RuntimeOptions { devices: Some(8), ..RuntimeOptions::default() })
            .unwrap_or_else(|error| panic!("no PJRT CPU plugin: {error} (run `cargo xtask setup`)"))
    })
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ttpu-runtime-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut res: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("the cache folder exists")
        .map(|entry| entry.expect("readable").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "ttpuexe"))
        .collect();
    res.sort();
    res
}

#[test]
fn the_cpu_plugin_makes_the_devices_asked_for() {
    let runtime = eight();
    assert_eq!(runtime.device_count(), 8);
    let mut ids = runtime.device_ids().to_vec();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 8, "distinct device ids: {:?}", runtime.device_ids());
    let two = Runtime::from_plugin_or_default(None, &RuntimeOptions { devices: Some(2), ..Default::default() })
        .expect("two devices");
    assert_eq!(two.device_count(), 2);
    let none = Runtime::from_plugin_or_default(None, &RuntimeOptions { devices: Some(0), ..Default::default() })
        .expect_err("zero devices is refused");
    assert!(none.to_string().starts_with("0 devices requested, but the cpu plugin has "), "{none}");
}

#[test]
fn a_replicated_program_runs_on_every_device() {
    let runtime = eight();
    let executable = runtime.graph_executable(&add_and_mul(3), &CompileSpec::replicated(8)).expect("compiles");
    assert_eq!(executable.devices(), &[0, 1, 2, 3, 4, 5, 6, 7]);
    // The same inputs everywhere: every device computes the same outputs.
    let (a, b) = (tensor(&[1.0, 2.0, 3.0]), tensor(&[0.5, -1.0, 4.0]));
    let buffers: Vec<_> = (0..8)
        .map(|device| (runtime.upload(&a, device).expect("upload"), runtime.upload(&b, device).expect("upload")))
        .collect();
    let lists: Vec<Vec<_>> = buffers.iter().map(|(a, b)| vec![a, b]).collect();
    let refs: Vec<&[_]> = lists.iter().map(Vec::as_slice).collect();
    let outputs = executable.run_replicated(&refs).expect("runs");
    assert_eq!(outputs.len(), 8);
    for (device, outputs) in outputs.iter().enumerate() {
        assert_eq!(outputs[0].device_id().expect("a device"), runtime.device_ids()[device]);
        assert_eq!(values(&runtime.download(&outputs[0]).expect("reads")), vec![1.5, 1.0, 7.0]);
        assert_eq!(values(&runtime.download(&outputs[1]).expect("reads")), vec![0.5, -2.0, 12.0]);
    }
    // Other inputs per device: each device computes its own.
    let lists: Vec<Vec<_>> = (0..8)
        .map(|device| {
            let a = runtime.upload(&tensor(&[device as f32; 3]), device).expect("upload");
            let b = runtime.upload(&tensor(&[1.0, 2.0, 3.0]), device).expect("upload");
            vec![a, b]
        })
        .collect();
    let refs: Vec<Vec<_>> = lists.iter().map(|list| list.iter().collect()).collect();
    let refs: Vec<&[_]> = refs.iter().map(Vec::as_slice).collect();
    let outputs = executable.run_replicated(&refs).expect("runs");
    for (device, outputs) in outputs.iter().enumerate() {
        let d = device as f32;
        assert_eq!(values(&runtime.download(&outputs[1]).expect("reads")), vec![d, 2.0 * d, 3.0 * d]);
    }
    // Argument lists must match the devices and the inputs.
    let error = executable.run_replicated(&refs[..3]).expect_err("three lists for eight devices");
    assert_eq!(error.to_string(), "execute: 3 argument lists for a program on 8 devices");
}

#[test]
fn single_device_programs_run_where_they_are_placed() {
    // A runtime of its own: the counters below must see this test's compiles alone.
    let runtime =
        &Runtime::from_plugin_or_default(None, &RuntimeOptions { devices: Some(8), ..RuntimeOptions::default() })
            .expect("8 CPU devices");
    let graph = add_and_mul(2);
    let before = runtime.counters();
    let on_three = runtime.graph_executable(&graph, &CompileSpec::on(3)).expect("compiles");
    let on_five = runtime.graph_executable(&graph, &CompileSpec::on(5)).expect("compiles");
    let again = runtime.graph_executable(&graph, &CompileSpec::on(3)).expect("cached");
    let counters = runtime.counters();
    assert_eq!(counters.compiles - before.compiles, 2, "the placement is part of the key");
    assert_eq!(counters.cache_hits - before.cache_hits, 1);
    assert!(std::sync::Arc::ptr_eq(&on_three, &again));
    let (a, b) =
        (runtime.upload(&tensor(&[1.0, 2.0]), 5).expect("up"), runtime.upload(&tensor(&[3.0, 4.0]), 5).expect("up"));
    let outputs = on_five.run(&[&a, &b]).expect("runs");
    assert_eq!(outputs[0].device_id().expect("device"), runtime.device_ids()[5]);
    assert_eq!(values(&runtime.download(&outputs[0]).expect("reads")), vec![4.0, 6.0]);
    let error = runtime.upload(&tensor(&[1.0]), 8).expect_err("no device 8");
    assert_eq!(error.to_string(), "device 8 does not exist: the runtime has 8 devices");
}

#[test]
fn an_aliased_input_is_donated_and_not_readable_afterwards() {
    let runtime = Runtime::cpu().expect("the CPU plugin");
    let spec = CompileSpec::on(0).with_aliases(vec![(0, 0)]);
    let executable = runtime.graph_executable(&add_and_mul(4), &spec).expect("compiles");
    assert_eq!(executable.donated_inputs(), &[0]);
    let mut state = runtime.upload(&tensor(&[1.0, 2.0, 3.0, 4.0]), 0).expect("upload");
    let step = runtime.upload(&tensor(&[1.0, 1.0, 1.0, 1.0]), 0).expect("upload");
    let mut old = Vec::new();
    for expected in [[2.0f32, 3.0, 4.0, 5.0], [3.0, 4.0, 5.0, 6.0], [4.0, 5.0, 6.0, 7.0]] {
        let mut outputs = executable.run(&[&state, &step]).expect("runs");
        let new_state = outputs.swap_remove(0);
        assert!(state.is_deleted().expect("asks"), "the state buffer was donated");
        assert_eq!(values(&runtime.download(&new_state).expect("reads")), expected);
        old.push(std::mem::replace(&mut state, new_state));
    }
    // The step input was not aliased: it is still readable.
    assert_eq!(values(&runtime.download(&step).expect("reads")), vec![1.0; 4]);
    // A donated buffer is a clear error to read or to run with, never old data or a crash.
    let error = runtime.download(&old[0]).expect_err("donated");
    assert_eq!(error.to_string(), "the buffer was donated to an earlier execution and can no longer be read or used");
    let error = executable.run(&[&old[1], &step]).expect_err("donated argument");
    assert_eq!(error.to_string(), "the buffer was donated to an earlier execution and can no longer be read or used");
}

#[test]
fn aliases_must_join_an_input_and_an_output_of_one_type() {
    let runtime = Runtime::cpu().expect("the CPU plugin");
    let mut builder = GraphBuilder::new();
    let a = builder.input(f32s(&[2]), None);
    let b = builder.input(f32s(&[3]), None);
    let graph = builder.finish(&[a, b]);
    let error =
        runtime.graph_executable(&graph, &CompileSpec::on(0).with_aliases(vec![(0, 1)])).expect_err("types differ");
    assert_eq!(error.to_string(), "cannot alias input 0 to output 1: types differ (f32[2] and f32[3])");
    let error =
        runtime.graph_executable(&graph, &CompileSpec::on(0).with_aliases(vec![(0, 7)])).expect_err("no output 7");
    assert_eq!(error.to_string(), "cannot alias input 0 to output 7: the graph has 2 inputs and 2 outputs");
}

#[test]
fn the_disk_cache_is_shared_across_runtimes_and_ignores_damage() {
    let dir = scratch("disk");
    let graph = add_and_mul(5);
    let run = |expect: CacheSource| {
        let runtime = Runtime::cpu().expect("the CPU plugin");
        runtime.set_disk_cache(&dir).expect("cache folder");
        let (executable, info) = runtime
            .executable_with_info(&graph, &CompileSpec::default(), || Ok::<_, ttpu_runtime::Error>(graph.clone()))
            .expect("compiles");
        assert_eq!(info.source, expect);
        let a = runtime.upload(&tensor(&[1.0; 5]), 0).expect("up");
        let outputs = executable.run(&[&a, &a]).expect("runs");
        assert_eq!(values(&runtime.download(&outputs[0]).expect("reads")), vec![2.0; 5]);
        let counters = runtime.counters();
        let expected = match expect {
            CacheSource::Disk => (0, 1),
            _ => (1, 0),
        };
        assert_eq!((counters.compiles, counters.disk_hits), expected, "{counters:?}");
    };
    run(CacheSource::Compiled);
    run(CacheSource::Disk);
    let files = entries(&dir);
    assert_eq!(files.len(), 1, "{files:?}");
    let good = std::fs::read(&files[0]).expect("entry");
    // A torn write: the entry loses its tail.
    std::fs::write(&files[0], &good[..good.len() / 2]).expect("write");
    run(CacheSource::Compiled);
    // One flipped bit in the payload.
    let mut flipped = good.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    std::fs::write(&files[0], &flipped).expect("write");
    run(CacheSource::Compiled);
    // Garbage under the right name.
    std::fs::write(&files[0], b"not an executable").expect("write");
    run(CacheSource::Compiled);
    // Another program's intact entry under this name (a name collision, or a renamed file).
    let other_dir = scratch("disk-other");
    let other = Runtime::cpu().expect("the CPU plugin");
    other.set_disk_cache(&other_dir).expect("cache folder");
    other.graph_executable(&add_and_mul(6), &CompileSpec::default()).expect("compiles");
    std::fs::copy(&entries(&other_dir)[0], &files[0]).expect("copy");
    run(CacheSource::Compiled);
    // Each bad entry was replaced by a good one.
    run(CacheSource::Disk);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&other_dir);
}

#[test]
fn the_disk_cache_keeps_its_byte_budget() {
    let dir = scratch("budget");
    let runtime = Runtime::cpu().expect("the CPU plugin");
    runtime.set_disk_cache_with_budget(&dir, 1).expect("cache folder");
    runtime.graph_executable(&add_and_mul(7), &CompileSpec::default()).expect("compiles");
    let first = entries(&dir);
    runtime.graph_executable(&add_and_mul(8), &CompileSpec::default()).expect("compiles");
    let second = entries(&dir);
    assert_eq!((first.len(), second.len()), (1, 1), "only the newest entry stays within 1 byte");
    assert_ne!(first, second);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `xla_dump_to` makes the plugin write its HLO dumps, which shows the option reached XLA; the
/// options are part of the compile-cache keys (memory and disk), so the same program with and
/// without them compiles twice, and a second runtime finds each on disk under its own options.
#[test]
fn xla_options_reach_the_plugin_and_key_the_compile_caches() {
    let dump = scratch("xla-dump");
    let cache = scratch("xla-options-cache");
    let graph = add_and_mul(9);
    let options = vec![("xla_dump_to".to_owned(), OptionValue::String(dump.display().to_string()))];
    let with_options = CompileSpec::default().with_xla_options(options);
    let compile = |runtime: &Runtime, spec: &CompileSpec| {
        let (executable, info) = runtime
            .executable_with_info(&graph, spec, || Ok::<_, ttpu_runtime::Error>(graph.clone()))
            .expect("compiles");
        let a = runtime.upload(&tensor(&[2.0; 9]), 0).expect("up");
        let outputs = executable.run(&[&a, &a]).expect("runs");
        assert_eq!(values(&runtime.download(&outputs[1]).expect("reads")), vec![4.0; 9]);
        info.source
    };
    let runtime = Runtime::cpu().expect("the CPU plugin");
    runtime.set_disk_cache(&cache).expect("cache folder");
    assert_eq!(compile(&runtime, &CompileSpec::default()), CacheSource::Compiled);
    assert!(!dump.exists(), "no dump without the option");
    assert_eq!(compile(&runtime, &with_options), CacheSource::Compiled);
    let dumped: Vec<String> = std::fs::read_dir(&dump)
        .expect("the plugin made the dump folder")
        .map(|entry| entry.expect("readable").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(dumped.iter().any(|name| name.ends_with("after_optimizations.txt")), "{dumped:?}");
    assert_eq!(compile(&runtime, &with_options), CacheSource::Memory);
    assert_eq!(runtime.counters().compiles, 2);
    assert_eq!(entries(&cache).len(), 2, "one disk entry per set of options");
    let again = Runtime::cpu().expect("the CPU plugin");
    again.set_disk_cache(&cache).expect("cache folder");
    assert_eq!(compile(&again, &with_options), CacheSource::Disk);
    assert_eq!(compile(&again, &CompileSpec::default()), CacheSource::Disk);
    let _ = std::fs::remove_dir_all(&dump);
    let _ = std::fs::remove_dir_all(&cache);
}

/// A name XLA does not know, or a value of the wrong type, fails the compile with the plugin's
/// own message; nothing aborts, and the runtime compiles other programs afterwards.
#[test]
fn unknown_xla_options_and_wrong_types_are_plugin_errors() {
    let runtime = Runtime::cpu().expect("the CPU plugin");
    let graph = add_and_mul(10);
    let compile = |name: &str, value: OptionValue| {
        let spec = CompileSpec::default().with_xla_options(vec![(name.to_owned(), value)]);
        runtime.graph_executable(&graph, &spec).map(|_| ())
    };
    let error = compile("xla_no_such_option", OptionValue::Bool(true)).expect_err("an unknown name");
    assert_eq!(error.to_string(), "pjrt plugin error (invalid argument): No such compile option: 'xla_no_such_option'");
    let error = compile("xla_cpu_multi_thread_eigen", OptionValue::Int(3)).expect_err("an int for a bool");
    assert!(error.to_string().contains("is not a valid bool value"), "{error}");
    compile("xla_cpu_multi_thread_eigen", OptionValue::Bool(false)).expect("a known option compiles");
    assert_eq!(runtime.counters().compiles, 1);
}

/// A 3x3 convolution of `x: f32[1, 2, 6, 6]` (channels first) with `k: f32[3, 2, 3, 3]`, unpadded.
fn convolution_graph() -> Graph {
    let mut builder = GraphBuilder::new();
    let x = builder.input(f32s(&[1, 2, 6, 6]), Some("x".into()));
    let k = builder.input(f32s(&[3, 2, 3, 3]), Some("k".into()));
    let dims = ttpu_ir::ConvDims {
        input_batch: 0,
        input_feature: 1,
        input_spatial: [2, 3].into_iter().collect(),
        kernel_input_feature: 1,
        kernel_output_feature: 0,
        kernel_spatial: [2, 3].into_iter().collect(),
        output_batch: 0,
        output_feature: 1,
        output_spatial: [2, 3].into_iter().collect(),
        window_strides: [1, 1].into_iter().collect(),
        padding: [(0, 0), (0, 0)].into_iter().collect(),
        lhs_dilation: [1, 1].into_iter().collect(),
        rhs_dilation: [1, 1].into_iter().collect(),
        feature_group_count: 1,
        batch_group_count: 1,
    };
    let y = builder.convolution(x, k, dims).expect("convolves");
    builder.finish(&[y])
}

/// The one option found whose executables the CPU plugin cannot serialize (a convolution
/// compiled with oneDNN custom calls: storing it in the disk cache would abort the process)
/// compiles and runs without the disk cache.
#[test]
fn options_the_plugin_cannot_serialize_skip_the_disk_cache() {
    let cache = scratch("unserializable");
    let runtime = Runtime::cpu().expect("the CPU plugin");
    runtime.set_disk_cache(&cache).expect("cache folder");
    let graph = convolution_graph();
    let spec = CompileSpec::default()
        .with_xla_options(vec![(ttpu_runtime::NOT_SERIALIZABLE_WITH[0].to_owned(), OptionValue::Bool(true))]);
    let executable = runtime.graph_executable(&graph, &spec).expect("compiles");
    let x = HostTensor::new(DType::F32, vec![1, 2, 6, 6], 1f32.to_le_bytes().repeat(72)).expect("x");
    let k = HostTensor::new(DType::F32, vec![3, 2, 3, 3], 0.5f32.to_le_bytes().repeat(54)).expect("k");
    let (x, k) = (runtime.upload(&x, 0).expect("up"), runtime.upload(&k, 0).expect("up"));
    let outputs = executable.run(&[&x, &k]).expect("runs");
    // Each output sums 2 * 3 * 3 products of 1 and 0.5.
    assert_eq!(values(&runtime.download(&outputs[0]).expect("reads")), vec![9.0; 48]);
    assert!(entries(&cache).is_empty(), "nothing was stored");
    let _ = std::fs::remove_dir_all(&cache);
}

#[test]
fn transfers_are_counted_and_checked() {
    let runtime = Runtime::cpu().expect("the CPU plugin");
    let buffer = runtime.upload(&tensor(&[1.0, 2.0, 3.0]), 0).expect("up");
    assert_eq!(runtime.download(&buffer).expect("down"), tensor(&[1.0, 2.0, 3.0]));
    let counters = runtime.counters();
    assert_eq!((counters.bytes_to_device, counters.bytes_to_host), (12, 12));
    let error = runtime.upload_bytes(&[0; 7], DType::F32, &[2], 0).expect_err("short data");
    assert_eq!(error.to_string(), "a tensor of type f32[2] needs 8 bytes, found 7");
    let error = runtime.upload_bytes(&[], DType::F32, &[i64::MAX, 2], 0).expect_err("overflow");
    assert_eq!(error.to_string(), format!("invalid shape [{}, 2]", i64::MAX));
}

/// `x @ w` for `x: f32[m, k]`, `w: f32[k, n]`.
fn matmul_graph(m: i64, k: i64, n: i64) -> Graph {
    let mut builder = GraphBuilder::new();
    let x = builder.input(f32s(&[m, k]), Some("x".into()));
    let w = builder.input(f32s(&[k, n]), Some("w".into()));
    let dims = ttpu_ir::DotDims {
        lhs_contracting: [1].into_iter().collect(),
        rhs_contracting: [0].into_iter().collect(),
        ..Default::default()
    };
    let y = builder.dot_general(x, w, dims).expect("matmul");
    builder.finish(&[y])
}

fn matrix(rows: i64, cols: i64, seed: f32) -> HostTensor {
    let values: Vec<f32> = (0..rows * cols).map(|index| ((index as f32) * 0.37 + seed).sin()).collect();
    HostTensor::new(DType::F32, vec![rows, cols], values.iter().flat_map(|v| v.to_le_bytes()).collect()).expect("valid")
}

fn host_matmul(x: &HostTensor, w: &HostTensor) -> Vec<f32> {
    let (m, k, n) = (x.shape[0] as usize, x.shape[1] as usize, w.shape[1] as usize);
    let (xs, ws) = (values(x), values(w));
    let mut out = vec![0f32; m * n];
    for row in 0..m {
        for col in 0..n {
            out[row * n + col] = (0..k).map(|inner| xs[row * k + inner] * ws[inner * n + col]).sum();
        }
    }
    out
}

/// Runs `x @ w` sharded as given on the mesh and returns the assembled output.
fn sharded_matmul(mesh: &str, x_dims: Vec<Vec<String>>, w_dims: Vec<Vec<String>>, out: Vec<Vec<String>>) -> Vec<f32> {
    use ttpu_ir::{Mesh, ProgramSharding, Sharding};
    let runtime = eight();
    let mesh = Mesh::parse(mesh).expect("mesh");
    let (x, w) = (matrix(8, 16, 0.1), matrix(16, 8, 0.7));
    let sharding = ProgramSharding {
        mesh: mesh.clone(),
        inputs: vec![Sharding { dims: x_dims }, Sharding { dims: w_dims }],
        outputs: vec![Sharding { dims: out }],
    };
    let executable =
        runtime.graph_executable(&matmul_graph(8, 16, 8), &CompileSpec::sharded(sharding.clone())).expect("compiles");
    let x_shards = ttpu_runtime::shard::split(&x, &sharding.inputs[0], &mesh).expect("splits");
    let w_shards = ttpu_runtime::shard::split(&w, &sharding.inputs[1], &mesh).expect("splits");
    let buffers: Vec<Vec<_>> = (0..8)
        .map(|device| {
            vec![
                runtime.upload(&x_shards[device], device).expect("up"),
                runtime.upload(&w_shards[device], device).expect("up"),
            ]
        })
        .collect();
    let lists: Vec<Vec<_>> = buffers.iter().map(|list| list.iter().collect()).collect();
    let refs: Vec<&[_]> = lists.iter().map(Vec::as_slice).collect();
    let outputs = executable.run_replicated(&refs).expect("runs");
    let shards: Vec<HostTensor> = outputs.iter().map(|list| runtime.download(&list[0]).expect("reads")).collect();
    let whole = ttpu_runtime::shard::assemble(&shards, &sharding.outputs[0], &mesh, &[8, 8]).expect("assembles");
    let expected = host_matmul(&x, &w);
    let got = values(&whole);
    for (index, (got, want)) in got.iter().zip(&expected).enumerate() {
        assert!((got - want).abs() <= 1e-4 * (1.0 + want.abs()), "element {index}: {got} vs {want}");
    }
    got
}

fn axes(names: &[&str]) -> Vec<String> {
    names.iter().map(|name| name.to_string()).collect()
}

#[test]
fn sharded_matmuls_match_on_eight_devices() {
    // Rows of x over all devices; w replicated; output rows stay split.
    sharded_matmul("x=8", vec![axes(&["x"]), vec![]], vec![vec![], vec![]], vec![axes(&["x"]), vec![]]);
    // Column parallel: w's columns split, the output's columns split (a wrong device order
    // puts columns in the wrong place).
    sharded_matmul("x=8", vec![vec![], vec![]], vec![vec![], axes(&["x"])], vec![vec![], axes(&["x"])]);
    // Row parallel: the contracted dim split on both sides; the partitioner all-reduces into a
    // replicated output.
    sharded_matmul("x=8", vec![vec![], axes(&["x"])], vec![axes(&["x"]), vec![]], vec![vec![], vec![]]);
    // A 2-D mesh: batch over dp, columns over tp.
    sharded_matmul(
        "dp=2,tp=4",
        vec![axes(&["dp"]), vec![]],
        vec![vec![], axes(&["tp"])],
        vec![axes(&["dp"]), axes(&["tp"])],
    );
}

#[test]
fn a_sharding_that_does_not_fit_is_refused() {
    use ttpu_ir::{Mesh, ProgramSharding, Sharding};
    let runtime = eight();
    let mesh = Mesh::parse("x=4").expect("mesh");
    let sharding = ProgramSharding {
        mesh,
        inputs: vec![Sharding::replicated(2), Sharding::replicated(2)],
        outputs: vec![Sharding::replicated(2)],
    };
    let spec = CompileSpec { devices: (0..8).collect(), ..CompileSpec::sharded(sharding.clone()) };
    let error = runtime.graph_executable(&matmul_graph(8, 16, 8), &spec).expect_err("4 mesh devices on 8");
    assert_eq!(error.to_string(), "mesh x=4 has 4 devices, but the program is placed on 8");
    let uneven = ProgramSharding {
        mesh: Mesh::parse("x=8").expect("mesh"),
        inputs: vec![Sharding::split(2, 1, axes(&["x"])), Sharding::replicated(2)],
        outputs: vec![Sharding::replicated(2)],
    };
    let error =
        runtime.graph_executable(&matmul_graph(8, 12, 8), &CompileSpec::sharded(uneven)).expect_err("12 over 8");
    assert_eq!(error.to_string(), "sharding: input 0: dim 1 has size 12, which 8 devices (x) cannot split evenly");
}

/// Runs `collective` on 8 replicas, device `d` holding `input(d)` of `dims`; each device's output.
fn on_eight_replicas(
    collective: ttpu_ir::Collective,
    dims: &[i64],
    input: impl Fn(usize) -> Vec<f32>,
) -> Vec<Vec<f32>> {
    let runtime = eight();
    let mut builder = GraphBuilder::new();
    let x = builder.input(f32s(dims), None);
    let y = builder.collective(collective, x).expect("a valid collective");
    let graph = builder.finish(&[y]);
    let executable = runtime.graph_executable(&graph, &CompileSpec::replicated(8)).expect("compiles");
    let buffers: Vec<_> = (0..8)
        .map(|device| {
            let data: Vec<u8> = input(device).iter().flat_map(|v| v.to_le_bytes()).collect();
            runtime.upload(&HostTensor::new(DType::F32, dims.to_vec(), data).expect("valid"), device).expect("up")
        })
        .collect();
    let lists: Vec<Vec<_>> = buffers.iter().map(|buffer| vec![buffer]).collect();
    let refs: Vec<&[_]> = lists.iter().map(Vec::as_slice).collect();
    let outputs = executable.run_replicated(&refs).expect("runs");
    outputs.iter().map(|list| values(&runtime.download(&list[0]).expect("reads"))).collect()
}

#[test]
fn collectives_run_across_eight_replicas() {
    use ttpu_ir::{Collective, ReduceKind};
    let all = vec![(0..8).collect::<Vec<i64>>()];
    let halves = vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]];

    let sums = on_eight_replicas(Collective::AllReduce { kind: ReduceKind::Sum, groups: all.clone() }, &[2], |d| {
        vec![d as f32, 1.0]
    });
    assert!(sums.iter().all(|out| out == &vec![28.0, 8.0]), "{sums:?}");

    let maxima =
        on_eight_replicas(Collective::AllReduce { kind: ReduceKind::Max, groups: halves.clone() }, &[1], |d| {
            vec![d as f32]
        });
    assert_eq!(maxima, [[3.0]; 4].iter().chain(&[[7.0]; 4]).map(|v| v.to_vec()).collect::<Vec<_>>());

    let gathered = on_eight_replicas(Collective::AllGather { dimension: 0, groups: halves.clone() }, &[1, 2], |d| {
        vec![d as f32, -(d as f32)]
    });
    assert_eq!(gathered[1], vec![0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 3.0, -3.0]);
    assert_eq!(gathered[6], vec![4.0, -4.0, 5.0, -5.0, 6.0, -6.0, 7.0, -7.0]);

    // Element i of the sum over devices lands on device i.
    let scattered = on_eight_replicas(
        Collective::ReduceScatter { kind: ReduceKind::Sum, dimension: 0, groups: all.clone() },
        &[8],
        |d| (0..8).map(|i| (10 * i + d) as f32).collect(),
    );
    for (device, out) in scattered.iter().enumerate() {
        assert_eq!(out, &vec![(80 * device + 28) as f32], "device {device}");
    }

    // Block j of device d goes to device j, which concatenates in sender order.
    let exchanged = on_eight_replicas(
        Collective::AllToAll { split_dimension: 0, concat_dimension: 0, groups: all.clone() },
        &[8],
        |d| (0..8).map(|j| (10 * d + j) as f32).collect(),
    );
    for (device, out) in exchanged.iter().enumerate() {
        let expected: Vec<f32> = (0..8).map(|sender| (10 * sender + device) as f32).collect();
        assert_eq!(out, &expected, "device {device}");
    }

    // A ring without 7 -> 0: device 0 is no target and gets zeros.
    let pairs: Vec<(i64, i64)> = (0..7).map(|d| (d, d + 1)).collect();
    let shifted = on_eight_replicas(Collective::CollectivePermute { pairs }, &[1], |d| vec![d as f32 + 1.0]);
    let expected: Vec<Vec<f32>> = (0..8).map(|d| vec![d as f32]).collect();
    assert_eq!(shifted, expected);
}

#[test]
fn malformed_collectives_are_refused_by_inference() {
    use ttpu_ir::{Collective, ReduceKind};
    let mut builder = GraphBuilder::new();
    let x = builder.input(f32s(&[6]), None);
    let cases = [
        (
            Collective::AllReduce { kind: ReduceKind::Sum, groups: vec![] },
            "`all_reduce`: needs at least one replica group",
        ),
        (
            Collective::AllGather { dimension: 0, groups: vec![vec![0, 1], vec![2]] },
            "`all_gather`: replica groups must be non-empty and of one size",
        ),
        (
            Collective::ReduceScatter { kind: ReduceKind::Sum, dimension: 0, groups: vec![vec![0, 1, 2, 3]] },
            "`reduce_scatter`: dim 0 of size 6 does not fit the replica groups",
        ),
        (
            Collective::AllToAll { split_dimension: 1, concat_dimension: 0, groups: vec![vec![0, 1]] },
            "`all_to_all`: dim 1 is out of range for rank 1",
        ),
        (
            Collective::CollectivePermute { pairs: vec![(0, 1), (2, 1)] },
            "`collective_permute`: replica 1 is a target twice",
        ),
        (
            Collective::AllReduce { kind: ReduceKind::Sum, groups: vec![vec![0, 1], vec![1, 2]] },
            "`all_reduce`: replica 1 is in more than one place of the groups",
        ),
    ];
    for (collective, message) in cases {
        assert_eq!(builder.collective(collective, x).expect_err("malformed").to_string(), message);
    }
}
