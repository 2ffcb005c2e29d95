//! Jobs of several processes through the binary: two real `ttpu run` processes placed by
//! `TTPU_*` variables meet in a `file://` store, agree on the devices `[0..3, 2048..2051]` of a
//! `dp=2,tp=4` mesh and both end in ttpu's error for the CPU plugin's limit; `ttpu launch` sets
//! those variables, prefixes each process's lines, removes its store and stops the job at the
//! first failure; a launch environment that is incomplete is refused with what to set. In a
//! job, a sharded model keeps only its own devices' shards in each process.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Variables of the three launch conventions, cleared so the test's own environment never
/// places a process.
const LAUNCH_VARS: [&str; 14] = [
    "TTPU_COORDINATOR",
    "TTPU_NUM_PROCESSES",
    "TTPU_PROCESS_ID",
    "TTPU_RUN_ID",
    "JAX_COORDINATOR_ADDRESS",
    "JAX_NUM_PROCESSES",
    "JAX_PROCESS_ID",
    "JAX_LOCAL_DEVICE_IDS",
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "TORCHELASTIC_RUN_ID",
];

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ttpu-launch-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// The binary with a clean launch environment, run from the repository root.
fn ttpu(args: &[&str], vars: &[(&str, String)], cache: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ttpu"));
    command.args(args).current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."));
    for name in LAUNCH_VARS {
        command.env_remove(name);
    }
    command.env("TTPU_CACHE_DIR", cache).envs(vars.iter().map(|(name, value)| (*name, value)));
    command
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const RUN_MLP_ON_2X4: [&str; 11] = [
    "run",
    "fixtures/mlp/model.fx",
    "--weights",
    "fixtures/mlp/weights.safetensors",
    "--inputs",
    "fixtures/mlp/inputs.safetensors",
    "--mesh",
    "dp=2,tp=4",
    "--parallel",
    "fsdp",
    "--no-cache",
];

const CPU_LIMIT: &str = "the cpu plugin cannot run one program over devices of 2 processes (device ids [0, 1, 2, \
                         3, 2048, 2049, 2050, 2051]): its collectives reach only the devices of one process; a \
                         plugin with cross-process collectives can, such as a GPU plugin with NCCL (the CUDA \
                         plugin, `jax-cuda12-pjrt`), or one process can run all the devices";

#[test]
fn two_processes_meet_in_a_file_store_and_get_the_cpu_plugins_limit() {
    let dir = scratch("two");
    let store = format!("file://{}", dir.join("store").display());
    let output = dir.join("out.safetensors");
    let mut args = RUN_MLP_ON_2X4.to_vec();
    let output_arg = output.display().to_string();
    args.extend(["-o", &output_arg]);
    let children: Vec<_> = (0..2)
        .map(|process| {
            let vars = [
                ("TTPU_COORDINATOR", store.clone()),
                ("TTPU_NUM_PROCESSES", "2".to_owned()),
                ("TTPU_PROCESS_ID", process.to_string()),
            ];
            ttpu(&args, &vars, &dir.join("cache"))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("the binary starts")
        })
        .collect();
    let outputs: Vec<Output> = children.into_iter().map(|child| child.wait_with_output().expect("it ends")).collect();
    let global = "[0, 1, 2, 3, 2048, 2049, 2050, 2051]";
    let own = ["[0, 1, 2, 3]", "[2048, 2049, 2050, 2051]"];
    for (process, out) in outputs.iter().enumerate() {
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "process {process}: {stderr}");
        let placed = format!("process {process} of 2 (TTPU_*): devices {} of the job's {global}", own[process]);
        assert_eq!(stderr.lines().next(), Some(placed.as_str()), "process {process}: {stderr}");
        assert!(stderr.contains(&format!("× {CPU_LIMIT}")), "process {process}: {stderr}");
    }
    assert!(!output.exists(), "nothing ran, so nothing was written");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn launch_places_each_process_and_stops_the_job_at_the_first_failure() {
    let dir = scratch("launch");
    // Each process prints its place and its store; process 1 fails with code 3 after process 0
    // has printed, and process 2 would wait forever were it not stopped.
    let script = "echo \"$TTPU_PROCESS_ID/$TTPU_NUM_PROCESSES $LOCAL_RANK $TTPU_COORDINATOR\"; \
                  case $TTPU_PROCESS_ID in 0) ;; 1) while [ ! -e \"$0.ready\" ]; do sleep 0.01; done; echo bad >&2; exit 3;; \
                  *) touch \"$0.ready\"; exec sleep 600;; esac";
    let marker = dir.join("job").display().to_string();
    let out = ttpu(&["launch", "-n", "3", "--", "sh", "-c", script, &marker], &[], &dir.join("cache"))
        .output()
        .expect("the binary starts");
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stdout}{stderr}");
    let mut lines: Vec<&str> = stdout.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines.len(), 3, "{stdout}");
    let store = lines[0].rsplit_once(' ').map(|(_, store)| store).expect("a store").to_owned();
    assert!(store.starts_with("file://"), "{store}");
    for (process, line) in lines.iter().enumerate() {
        assert_eq!(*line, format!("[{process}] {process}/3 {process} {store}"));
    }
    assert!(stderr.lines().any(|line| line == "[1] bad"), "{stderr}");
    assert!(
        stderr.lines().any(|line| line == "process 1 of 3 failed (exit status: 3); the others were stopped"),
        "{stderr}"
    );
    let store_dir = store.strip_prefix("file://").expect("a file store");
    assert!(!Path::new(store_dir).exists(), "the job's store is removed");

    let ok = ttpu(&["launch", "-n", "2", "--", "true"], &[], &dir.join("cache")).output().expect("starts");
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    let missing =
        ttpu(&["launch", "-n", "2", "--", "/no/such/program"], &[], &dir.join("cache")).output().expect("starts");
    assert_eq!(missing.status.code(), Some(1));
    assert!(text(&missing.stderr).contains("launch: cannot start `/no/such/program`"), "{}", text(&missing.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_incomplete_launch_environment_is_refused_with_what_to_set() {
    let dir = scratch("env");
    let mut args = RUN_MLP_ON_2X4.to_vec();
    args.extend(["-o", "unused.safetensors"]);
    let refused = |vars: &[(&str, String)], args: &[&str]| -> String {
        let out = ttpu(args, vars, &dir.join("cache")).output().expect("the binary starts");
        assert_eq!(out.status.code(), Some(1));
        text(&out.stderr)
    };
    let no_store = refused(&[("TTPU_NUM_PROCESSES", "2".into()), ("TTPU_PROCESS_ID", "0".into())], &args);
    assert!(
        no_store.contains(
            "launch environment: TTPU_NUM_PROCESSES=2 asks for a job of several processes, but no store is set: \
             set TTPU_COORDINATOR (file:///a/shared/directory or redis://host:port)"
        ),
        "{no_store}"
    );
    let store = format!("file://{}", dir.join("store").display());
    let vars = [("TTPU_COORDINATOR", store), ("TTPU_NUM_PROCESSES", "2".into()), ("TTPU_PROCESS_ID", "0".into())];
    let mut uneven = args.clone();
    uneven[7] = "dp=3";
    let uneven = refused(&vars, &uneven);
    assert!(
        uneven.contains("the job's 3 devices (--devices or --mesh) do not split evenly over its 2 processes"),
        "{uneven}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn each_process_of_a_job_keeps_only_its_own_shards() {
    use std::sync::Arc;
    use std::time::Duration;

    use ttpu::{Distributed, Mesh, Parallelism, Plan, Runtime, RuntimeOptions, Session, read_safetensors};

    let dir = scratch("shards");
    let store: Arc<dyn ttpu::KvStore> = Arc::new(ttpu_dist::FileStore::open(&dir.join("store")).expect("a store"));
    let options = |process| RuntimeOptions {
        devices: Some(4),
        distributed: Some(Distributed {
            timeout: Duration::from_secs(120),
            ..Distributed::new(process, 2, Arc::clone(&store))
        }),
        ..RuntimeOptions::default()
    };
    let peer = {
        let options = options(0);
        std::thread::spawn(move || Runtime::from_plugin_or_default(None, &options))
    };
    let runtime = Runtime::from_plugin_or_default(None, &options(1)).unwrap_or_else(|error| panic!("{error}"));
    let _process_0 = peer.join().expect("process 0's thread").unwrap_or_else(|error| panic!("{error}"));

    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/mlp");
    let source = std::fs::read_to_string(root.join("model.fx")).expect("the model");
    let weights = read_safetensors(&root.join("weights.safetensors")).expect("the weights");
    let total: usize = weights.values().map(|tensor| tensor.data.len()).sum();
    let session = Session::with_runtime(runtime);
    let model = session.load_model(&source, "model.fx").expect("imports");
    let mesh = Mesh::parse("dp=2,tp=4").expect("a mesh");

    // Replicated weights: process 1 holds them whole on each of its four devices.
    let ddp = Parallelism::new(Some(mesh.clone()), None, Plan::Ddp).expect("a plan");
    let loaded = session.shard(&model, &weights, &ddp).unwrap_or_else(|error| panic!("{error}"));
    for (key, tensor) in &weights {
        assert_eq!(&loaded.state(key, 0).expect("whole on every device"), tensor, "{key}");
    }

    // Split weights (fsdp: every weight of the MLP divides by 8): process 1 keeps the four
    // eighths of its devices, and a whole weight is not in any one process.
    let fsdp = Parallelism::new(Some(mesh), None, Plan::Fsdp).expect("a plan");
    let loaded = session.shard(&model, &weights, &fsdp).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(loaded.resident_bytes_per_device().expect("sizes"), total / 8);
    let key = weights.keys().next().expect("a weight");
    assert_eq!(
        loaded.state(key, 0).expect_err("half the rows lie in process 0").to_string(),
        "sharding: the block of mesh devices [0] is on none of the devices given; a tensor split over other \
         processes' devices is read through a replicated (all-gathered) output of the program"
    );

    // A mesh of process 0's devices alone leaves process 1 nothing to run.
    let small = Parallelism::new(Some(Mesh::one_d(4).expect("a mesh")), None, Plan::Ddp).expect("a plan");
    let error = session.shard(&model, &weights, &small).err().expect("no device of process 1");
    assert_eq!(
        error.to_string(),
        "sharding: mesh devices=4 takes devices 0..4 of the job's 8, none of them process 1's: a mesh spans every \
         process's devices"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
