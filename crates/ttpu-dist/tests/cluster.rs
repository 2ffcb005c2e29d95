//! The control plane end to end on the CPU plugin: two runtimes of one job (process 0 and 1,
//! four CPU devices each, in two threads of this test) meet in a `file://` store, agree on the
//! global devices `[0..3, 2048..2051]`, lay a `dp=2,tp=4` mesh over them, and get ttpu's error
//! for the CPU plugin's refusal of a program across processes; a process's own devices still run
//! programs. A peer that never comes, and a store shared by jobs of two sizes, are errors that
//! name them. `ttpu launch` runs the same with real processes (`crates/ttpu/tests/launch.rs`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ttpu_dist::{FileStore, KvStore};
use ttpu_ir::{BinaryOp, DType, Graph, GraphBuilder, Mesh, ProgramSharding, Shape, Sharding, TensorType};
use ttpu_runtime::{CacheSource, CompileSpec, Distributed, HostTensor, Runtime, RuntimeOptions};

/// A store directory of its own, removed on drop.
struct StoreDir(PathBuf);

impl StoreDir {
    fn new(name: &str) -> StoreDir {
        let dir = std::env::temp_dir().join(format!("ttpu-dist-cluster-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        StoreDir(dir)
    }

    fn store(&self) -> Arc<dyn KvStore> {
        Arc::new(FileStore::open(&self.0).expect("a store directory"))
    }

    fn address(&self) -> String {
        format!("file://{}", self.0.display())
    }
}

impl Drop for StoreDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn place(process_index: usize, store: Arc<dyn KvStore>, timeout: Duration) -> RuntimeOptions {
    RuntimeOptions {
        devices: Some(4),
        distributed: Some(Distributed { timeout, ..Distributed::new(process_index, 2, store) }),
        ..RuntimeOptions::default()
    }
}

fn runtime(options: &RuntimeOptions) -> ttpu_runtime::Result<Runtime> {
    Runtime::from_plugin_or_default(None, options)
}

/// `x + x` over `f32[8, 2]`.
fn double() -> Graph {
    let mut builder = GraphBuilder::new();
    let x = builder.input(TensorType::new(DType::F32, Shape::from_static(&[8, 2])), Some("x".into()));
    let sum = builder.binary(BinaryOp::Add, x, x).expect("adds");
    builder.finish(&[sum])
}

fn tensor(values: &[f32], dims: &[i64]) -> HostTensor {
    HostTensor::new(DType::F32, dims.to_vec(), values.iter().flat_map(|value| value.to_le_bytes()).collect())
        .expect("a tensor")
}

#[test]
fn two_processes_find_each_other_and_lay_a_2x4_mesh_over_their_devices() {
    let dir = StoreDir::new("two");
    let peer = {
        let options = place(1, dir.store(), Duration::from_secs(120));
        std::thread::spawn(move || runtime(&options))
    };
    let first = runtime(&place(0, dir.store(), Duration::from_secs(120))).unwrap_or_else(|error| panic!("{error}"));
    let second = peer.join().expect("process 1's thread").unwrap_or_else(|error| panic!("{error}"));

    let global = [0, 1, 2, 3, 2048, 2049, 2050, 2051];
    for (index, runtime) in [&first, &second].into_iter().enumerate() {
        assert_eq!((runtime.process_index(), runtime.process_count()), (index, 2));
        assert_eq!(runtime.device_ids(), global, "every process sees one global list");
        assert_eq!(runtime.local_devices(), [index * 4, index * 4 + 1, index * 4 + 2, index * 4 + 3]);
        let processes: Vec<usize> = (0..8).map(|device| runtime.device_process(device).expect("a device")).collect();
        assert_eq!(processes, [0, 0, 0, 0, 1, 1, 1, 1]);
    }

    // The 2x4 layout: mesh device (dp, tp) is runtime device 4*dp + tp, so dp runs across the
    // processes and tp within each.
    let mesh = Mesh::parse("dp=2,tp=4").expect("a mesh");
    let assignment: Vec<(Vec<usize>, i32, usize)> = (0..8)
        .map(|device| (mesh.coords(device), first.device_ids()[device], first.device_process(device).expect("known")))
        .collect();
    assert_eq!(assignment[1], (vec![0, 1], 1, 0));
    assert_eq!(assignment[5], (vec![1, 1], 2049, 1));
    assert_eq!(assignment[7], (vec![1, 3], 2051, 1));

    // One program over the mesh: the CPU plugin refuses it in every process, and ttpu says what
    // can run it.
    let sharding = ProgramSharding {
        mesh: mesh.clone(),
        inputs: vec![Sharding::split(2, 0, vec!["dp".into(), "tp".into()])],
        outputs: vec![Sharding::replicated(2)],
    };
    let graph = double();
    for runtime in [&first, &second] {
        let error = runtime.graph_executable(&graph, &CompileSpec::sharded(sharding.clone())).expect_err("refused");
        assert!(matches!(error, ttpu_runtime::Error::CrossProcess { .. }), "{error:?}");
        assert_eq!(
            error.to_string(),
            "the cpu plugin cannot run one program over devices of 2 processes (device ids [0, 1, 2, 3, 2048, 2049, \
             2050, 2051]): its collectives reach only the devices of one process; a plugin with cross-process \
             collectives can, such as a GPU plugin with NCCL (the CUDA plugin, `jax-cuda12-pjrt`), or one process \
             can run all the devices"
        );
        let source = std::error::Error::source(&error).expect("the plugin's refusal is kept").to_string();
        assert_eq!(
            source,
            "pjrt plugin error (invalid argument): Multiprocess computations aren't implemented on the CPU backend."
        );
    }

    // Each process runs programs on its own devices, and refuses data for another's.
    let x = tensor(&(0..16).map(|value| value as f32).collect::<Vec<_>>(), &[8, 2]);
    let local = CompileSpec { devices: second.local_devices().to_vec(), ..CompileSpec::default() };
    let executable = second.graph_executable(&graph, &local).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(executable.local_devices(), [4, 5, 6, 7]);
    let buffers: Vec<_> = (4..8).map(|device| second.upload(&x, device).expect("an upload")).collect();
    let lists: Vec<Vec<&ttpu_runtime::Buffer>> = buffers.iter().map(|buffer| vec![buffer]).collect();
    let refs: Vec<&[&ttpu_runtime::Buffer]> = lists.iter().map(Vec::as_slice).collect();
    let outputs = executable.run_replicated(&refs).unwrap_or_else(|error| panic!("{error}"));
    let doubled = second.download(&outputs[3][0]).expect("a download");
    assert_eq!(doubled, tensor(&(0..16).map(|value| 2.0 * value as f32).collect::<Vec<_>>(), &[8, 2]));
    assert_eq!(
        first.upload(&x, 5).expect_err("process 1's device").to_string(),
        "device 5 (id 2049) belongs to process 1; process 0 can only use its own devices"
    );
    // The job's layout is part of the disk cache's key: a program compiled in the job is never
    // served to a single process with the same device ids, nor the other way round.
    let cache = dir.0.join("compiled");
    let alone =
        Runtime::from_plugin_or_default(None, &RuntimeOptions { devices: Some(4), ..RuntimeOptions::default() })
            .unwrap_or_else(|error| panic!("{error}"));
    let on_device_0 = CompileSpec::on(0);
    for (runtime, expected) in
        [(&first, CacheSource::Compiled), (&alone, CacheSource::Compiled), (&alone, CacheSource::Memory)]
    {
        runtime.set_disk_cache(&cache).expect("a cache folder");
        let (_, info) = runtime
            .executable_with_info(&graph, &on_device_0, || Ok::<_, ttpu_runtime::Error>(graph.clone()))
            .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(info.source, expected);
    }
    let again =
        Runtime::from_plugin_or_default(None, &RuntimeOptions { devices: Some(4), ..RuntimeOptions::default() })
            .unwrap_or_else(|error| panic!("{error}"));
    again.set_disk_cache(&cache).expect("a cache folder");
    let (_, info) = again
        .executable_with_info(&graph, &on_device_0, || Ok::<_, ttpu_runtime::Error>(graph.clone()))
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(info.source, CacheSource::Disk, "a second single process finds the first one's entry");

    let repeated = CompileSpec { devices: vec![0, 1, 0], ..CompileSpec::default() };
    assert_eq!(
        first.graph_executable(&graph, &repeated).expect_err("a device twice").to_string(),
        "the program is placed on device 0 twice (devices [0, 1, 0]); each device runs one part"
    );
}

#[test]
fn a_peer_that_never_comes_is_a_timeout_naming_it() {
    let dir = StoreDir::new("missing");
    let error = runtime(&place(0, dir.store(), Duration::from_millis(50))).expect_err("process 1 never comes");
    assert_eq!(
        error.to_string(),
        format!(
            "process 1 of 2 did not join the job: timed out after 50ms waiting for key `ttpu/devices/1` in {}",
            dir.address()
        )
    );
}

#[test]
fn jobs_of_two_sizes_or_foreign_keys_in_one_store_are_refused() {
    let dir = StoreDir::new("foreign");
    let store = dir.store();
    store.put("ttpu/devices/1", b"processes=3 devices=2048,2049,2050,2051").expect("put");
    let error = runtime(&place(0, Arc::clone(&store), Duration::from_secs(5))).expect_err("another job's key");
    assert_eq!(
        error.to_string(),
        "process 1 belongs to a job of 3 processes, but process 0 to one of 2: they share a key-value store"
    );
    store.put("ttpu/devices/1", b"hello").expect("put");
    let error = runtime(&place(0, store, Duration::from_secs(5))).expect_err("garbage");
    assert_eq!(
        error.to_string(),
        "process 1 published `hello` under `ttpu/devices/1`, which is not a ttpu device list"
    );
    let options =
        RuntimeOptions { distributed: Some(Distributed::new(2, 2, dir.store())), ..RuntimeOptions::default() };
    assert_eq!(
        runtime(&options).expect_err("no process 2").to_string(),
        "process 2 of a job of 2 processes does not exist"
    );
}
