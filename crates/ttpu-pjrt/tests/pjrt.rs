//! Integration tests against a real PJRT plugin (`TTPU_PJRT_PLUGIN`, or the
//! location `cargo xtask setup` installs to): compile, transfer, execute and
//! read back, checking actual values and the exact error messages.

mod common;

use half::{bf16, f16};
use ttpu_pjrt::{Client, ElementType, Error, ErrorCode, HostBuffer, LoadedExecutable, NamedValue, Plugin};

use common::{ADD_2X3_F32, check_add, check_round_trip, check_unknown_option, client, f32_bytes, f32_values, plugin};

#[test]
fn plugin_reports_version_platform_and_devices() {
    let plugin = plugin();
    let (major, minor) = plugin.api_version();
    assert_eq!(major, 0);
    assert!(minor >= 81, "plugin api 0.{minor} is older than the 0.81 header");
    let client = client();
    assert_eq!(client.platform_name().expect("platform name"), "cpu");
    assert!(client.addressable_device_count().expect("device count") >= 1);
    let devices = client.devices().expect("devices");
    assert!(!devices.is_empty());
    assert_eq!(devices[0].kind().expect("kind").to_lowercase(), "cpu");
    assert!(devices[0].id().expect("id") >= 0);
}

#[test]
fn loading_the_same_plugin_twice_shares_it() {
    let a = plugin();
    let b = Plugin::load(a.path()).expect("second load");
    assert_eq!(a.path(), b.path());
    assert_eq!(a.api_version(), b.api_version());
}

#[test]
fn plugin_attributes_are_readable() {
    let attributes = plugin().attributes().expect("attributes");
    // The CPU plugins publish the StableHLO versions they accept (the
    // emitter may need them), as [major, minor, patch].
    let version = attributes
        .iter()
        .find(|(name, _)| name == "stablehlo_current_version")
        .unwrap_or_else(|| panic!("no stablehlo_current_version in {attributes:?}"));
    assert!(matches!(&version.1, NamedValue::Int64List(v) if v.len() == 3 && v[0] >= 1), "{version:?}");
}

#[test]
fn add_2x3_f32_computes_the_sum() {
    check_add(client());
}

#[test]
fn default_client_executes_a_multi_op_program_correctly() {
    const MODULE: &str = r#"
module {
  func.func @main(%arg0: tensor<64xf32>, %arg1: tensor<64xf32>) -> tensor<64xf32> {
    %0 = "stablehlo.add"(%arg0, %arg1) : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
    %1 = "stablehlo.multiply"(%0, %arg1) : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
    %2 = "stablehlo.subtract"(%1, %arg0) : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
    return %2 : tensor<64xf32>
  }
}
"#;
    // `Client::new` asks the CPU plugin to run programs on the calling
    // thread; results must be the same as with an asynchronous client.
    let plugin = plugin();
    let xs: Vec<f32> = (0..64).map(|i| i as f32 - 20.0).collect();
    let ys: Vec<f32> = (0..64).map(|i| 0.5 + i as f32 / 4.0).collect();
    let expected: Vec<f32> = xs.iter().zip(&ys).map(|(x, y)| (x + y) * y - x).collect();
    for client in [Client::new(&plugin).expect("client"), Client::with_options(&plugin, &[]).expect("async client")] {
        let exe = client.compile(MODULE).unwrap_or_else(|e| panic!("{e}"));
        let x = client.buffer_from_host(&f32_bytes(&xs), ElementType::F32, &[64]).expect("x");
        let y = client.buffer_from_host(&f32_bytes(&ys), ElementType::F32, &[64]).expect("y");
        for _ in 0..3 {
            let out = exe.execute(&[&x, &y]).expect("execute");
            assert_eq!(f32_values(&out[0].to_host().expect("host").data), expected);
        }
        check_add(&client);
    }
}

#[test]
fn client_options_reach_the_plugin() {
    let plugin = plugin();
    for asynchronous in [false, true] {
        let options = [("asynchronous", NamedValue::Bool(asynchronous)), ("cpu_device_count", NamedValue::Int64(3))];
        let client = Client::with_options(&plugin, &options).unwrap_or_else(|e| panic!("{e}"));
        // The 0.81 CPU plugin ignores create options; later ones honour the
        // device count.
        if plugin.api_version().1 > 81 {
            assert_eq!(client.addressable_device_count().expect("device count"), 3);
        }
        check_add(&client);
    }
}

#[test]
fn unknown_client_options_are_ignored_or_rejected_by_name() {
    let plugin = plugin();
    for (name, value) in [
        ("ttpu_unknown_string", NamedValue::String("value".to_owned())),
        ("ttpu_unknown_int", NamedValue::Int64(3)),
        ("ttpu_unknown_list", NamedValue::Int64List(vec![1, 2, 3])),
        ("ttpu_unknown_float", NamedValue::Float(0.5)),
        ("ttpu_unknown_bool", NamedValue::Bool(true)),
    ] {
        check_unknown_option(&plugin, name, value);
    }
}

#[test]
fn every_element_type_round_trips_bit_exactly() {
    let client = client();
    let f16_bits: Vec<u8> = [
        f16::from_f32(1.5),
        f16::NEG_ZERO,
        f16::from_bits(0x0001), // smallest subnormal
        f16::INFINITY,
        f16::from_bits(0x7e01), // NaN with a payload
        f16::MAX,
    ]
    .iter()
    .flat_map(|v| v.to_ne_bytes())
    .collect();
    let bf16_bits: Vec<u8> = [
        bf16::from_f32(-2.75),
        bf16::NEG_ZERO,
        bf16::from_bits(0x0001),
        bf16::NEG_INFINITY,
        bf16::from_bits(0x7fc1),
        bf16::MAX,
    ]
    .iter()
    .flat_map(|v| v.to_ne_bytes())
    .collect();
    let cases: Vec<(ElementType, Vec<u8>)> = vec![
        (
            ElementType::F64,
            [1.0f64, -0.0, f64::MIN_POSITIVE, f64::MAX, 1e-310, -3.5].iter().flat_map(|v| v.to_ne_bytes()).collect(),
        ),
        (ElementType::F32, f32_bytes(&[1.0, -0.0, f32::MIN_POSITIVE, f32::MAX, 1e-40, -3.5])),
        (ElementType::F16, f16_bits),
        (ElementType::BF16, bf16_bits),
        (ElementType::S64, [i64::MIN, -1, 0, 1, i64::MAX, 42].iter().flat_map(|v| v.to_ne_bytes()).collect()),
        (ElementType::S32, [i32::MIN, -1, 0, 1, i32::MAX, 42].iter().flat_map(|v| v.to_ne_bytes()).collect()),
        (ElementType::S16, [i16::MIN, -1, 0, 1, i16::MAX, 42].iter().flat_map(|v| v.to_ne_bytes()).collect()),
        (ElementType::S8, [i8::MIN, -1, 0, 1, i8::MAX, 42].iter().flat_map(|v| v.to_ne_bytes()).collect()),
        (ElementType::U8, vec![0, 1, 127, 128, 254, 255]),
        (ElementType::U16, [0u16, 1, 255, 256, 65534, 65535].iter().flat_map(|v| v.to_ne_bytes()).collect()),
        (ElementType::U32, [0u32, 1, 255, 256, u32::MAX - 1, u32::MAX].iter().flat_map(|v| v.to_ne_bytes()).collect()),
        (ElementType::U64, [0u64, 1, 255, 256, u64::MAX - 1, u64::MAX].iter().flat_map(|v| v.to_ne_bytes()).collect()),
        (ElementType::Pred, vec![1, 0, 0, 1, 1, 0]),
        // (real, imaginary) pairs: a swapped pair would show up as mismatched bytes.
        (
            ElementType::C64,
            f32_bytes(&[1.0, -2.0, -0.0, f32::MAX, 1e-40, 3.5, f32::INFINITY, 0.5, -7.0, 8.0, 9.0, -10.0]),
        ),
        (
            ElementType::C128,
            [1.0f64, -2.0, -0.0, f64::MAX, 1e-310, 3.5, f64::NEG_INFINITY, 0.5, -7.0, 8.0, 9.0, -10.0]
                .iter()
                .flat_map(|v| v.to_ne_bytes())
                .collect(),
        ),
    ];
    assert_eq!(cases.len(), ElementType::ALL.len(), "a case per element type");
    for (element_type, data) in cases {
        assert_eq!(data.len(), 6 * element_type.byte_size());
        check_round_trip(client, &HostBuffer { element_type, dims: vec![2, 3], data });
    }
}

#[test]
fn scalars_empty_and_higher_rank_arrays_round_trip() {
    let client = client();
    check_round_trip(client, &HostBuffer { element_type: ElementType::F32, dims: vec![], data: f32_bytes(&[7.25]) });
    check_round_trip(client, &HostBuffer { element_type: ElementType::S32, dims: vec![0, 3], data: vec![] });
    // A transposing device layout would show up here as shuffled values.
    let values: Vec<f32> = (0..24).map(|i| i as f32).collect();
    check_round_trip(
        client,
        &HostBuffer { element_type: ElementType::F32, dims: vec![2, 3, 4], data: f32_bytes(&values) },
    );
}

#[test]
fn multiple_results_come_back_as_separate_buffers() {
    const MODULE: &str = r#"
module {
  func.func @main(%arg0: tensor<2x3xf32>, %arg1: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xi32>, tensor<f32>) {
    %0 = "stablehlo.multiply"(%arg0, %arg1) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    %1 = "stablehlo.convert"(%arg0) : (tensor<2x3xf32>) -> tensor<2x3xi32>
    %2 = "stablehlo.constant"() {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
    return %0, %1, %2 : tensor<2x3xf32>, tensor<2x3xi32>, tensor<f32>
  }
}
"#;
    let client = client();
    let exe = client.compile(MODULE).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(exe.num_outputs(), 3);
    let a = client.buffer_from_host(&f32_bytes(&[1.5, 2.0, 3.0, 4.0, 5.0, 6.0]), ElementType::F32, &[2, 3]).expect("a");
    let b = client.buffer_from_host(&f32_bytes(&[2.0; 6]), ElementType::F32, &[2, 3]).expect("b");
    let out = exe.execute(&[&a, &b]).expect("execute");
    assert_eq!(out.len(), 3);

    let product = out[0].to_host().expect("product");
    assert_eq!((product.element_type, product.dims.as_slice()), (ElementType::F32, &[2, 3][..]));
    assert_eq!(f32_values(&product.data), vec![3.0, 4.0, 6.0, 8.0, 10.0, 12.0]);

    let converted = out[1].to_host().expect("converted");
    assert_eq!((converted.element_type, converted.dims.as_slice()), (ElementType::S32, &[2, 3][..]));
    let ints: Vec<i32> = converted.data.chunks_exact(4).map(|c| i32::from_ne_bytes(c.try_into().expect("4"))).collect();
    assert_eq!(ints, vec![1, 2, 3, 4, 5, 6]);

    let scalar = out[2].to_host().expect("scalar");
    assert_eq!((scalar.element_type, scalar.dims.as_slice()), (ElementType::F32, &[][..]));
    assert_eq!(f32_values(&scalar.data), vec![0.5]);
}

#[test]
fn arguments_survive_execution_and_can_be_reused() {
    let client = client();
    let exe = client.compile(ADD_2X3_F32).expect("compile");
    let a = client.buffer_from_host(&f32_bytes(&[1.0; 6]), ElementType::F32, &[2, 3]).expect("a");
    let first = exe.execute(&[&a, &a]).expect("first");
    let second = exe.execute(&[&first[0], &a]).expect("second");
    assert_eq!(f32_values(&second[0].to_host().expect("host").data), vec![3.0; 6]);
    assert_eq!(f32_values(&a.to_host().expect("a again").data), vec![1.0; 6]);
}

#[test]
fn serialized_executable_loads_and_runs() {
    let client = client();
    let exe = client.compile(ADD_2X3_F32).expect("compile");
    let bytes = exe.serialize().expect("serialize");
    assert!(!bytes.is_empty());
    let loaded = client.deserialize_executable(&bytes).expect("deserialize");
    assert_eq!(loaded.num_outputs(), 1);
    let a = client.buffer_from_host(&f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), ElementType::F32, &[2, 3]).expect("a");
    let out = loaded.execute(&[&a, &a]).expect("execute");
    assert_eq!(f32_values(&out[0].to_host().expect("host").data), vec![2.0, 4.0, 6.0, 8.0, 10.0, 12.0]);
}

#[test]
fn concurrent_execution_from_many_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Client>();
    assert_send_sync::<LoadedExecutable>();
    assert_send_sync::<ttpu_pjrt::Buffer>();

    let client = client();
    let exe = client.compile(ADD_2X3_F32).expect("compile");
    std::thread::scope(|s| {
        for t in 0..4 {
            let exe = &exe;
            s.spawn(move || {
                for i in 0..10 {
                    let x = (t * 100 + i) as f32;
                    let a = client.buffer_from_host(&f32_bytes(&[x; 6]), ElementType::F32, &[2, 3]).expect("a");
                    let out = exe.execute(&[&a, &a]).expect("execute");
                    assert_eq!(f32_values(&out[0].to_host().expect("host").data), vec![2.0 * x; 6]);
                }
            });
        }
    });
}

#[test]
fn bad_mlir_reports_the_plugin_message() {
    let err = client().compile("module { func.func @main( }").expect_err("must not compile");
    let Error::Plugin { code, message } = &err else { panic!("expected a plugin error, got {err:?}") };
    // The MLIR parser's diagnostic, with its location, passes through.
    assert!(message.contains("expected non-function type"), "{message}");
    assert_eq!(err.to_string(), format!("pjrt plugin error ({code}): {message}"));
    assert!(err.to_string().starts_with("pjrt plugin error ("));
}

#[test]
fn wrong_argument_count_reports_the_plugin_message() {
    let client = client();
    let exe = client.compile(ADD_2X3_F32).expect("compile");
    let a = client.buffer_from_host(&f32_bytes(&[1.0; 6]), ElementType::F32, &[2, 3]).expect("a");
    let err = exe.execute(&[&a]).expect_err("one argument too few");
    let Error::Plugin { code, message } = &err else { panic!("expected a plugin error, got {err:?}") };
    assert_eq!(*code, ErrorCode::InvalidArgument);
    // Wording differs between plugin versions ("arguments" or "buffers").
    assert!(message.contains("supplied 1 ") && message.contains("expected 2"), "{message}");
}

#[test]
fn host_data_of_the_wrong_length_is_rejected() {
    let err = client().buffer_from_host(&[0u8; 20], ElementType::F32, &[2, 3]).expect_err("20 != 24 bytes");
    assert!(matches!(err, Error::SizeMismatch { expected: 24, actual: 20 }));
    assert_eq!(err.to_string(), "host data has 20 bytes but dims and element type need 24");

    let err = client().buffer_from_host(&[], ElementType::F32, &[2, -3]).expect_err("negative dim");
    assert_eq!(err.to_string(), "invalid dimensions [2, -3]");
}

#[test]
fn buffers_of_another_client_are_rejected() {
    let other = Client::new(&plugin()).expect("second client");
    let foreign = other.buffer_from_host(&f32_bytes(&[1.0; 6]), ElementType::F32, &[2, 3]).expect("foreign");
    let exe = client().compile(ADD_2X3_F32).expect("compile");
    let ours = client().buffer_from_host(&f32_bytes(&[1.0; 6]), ElementType::F32, &[2, 3]).expect("ours");
    let err = exe.execute(&[&ours, &foreign]).expect_err("foreign buffer");
    assert_eq!(err.to_string(), "argument 1 belongs to a different pjrt client");
}

#[test]
fn missing_plugin_path_is_a_load_error() {
    let err = Plugin::load("/nonexistent/ttpu/pjrt_plugin.so").expect_err("no such file");
    assert!(matches!(&err, Error::Load { path, .. } if path.to_str() == Some("/nonexistent/ttpu/pjrt_plugin.so")));
    assert_eq!(err.to_string(), "failed to load pjrt plugin /nonexistent/ttpu/pjrt_plugin.so: file not found");
}

#[test]
fn a_file_that_is_not_a_plugin_is_a_load_error() {
    let dir = std::env::temp_dir().join(format!("ttpu-pjrt-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("not_a_plugin.so");
    std::fs::write(&path, b"not an elf file").expect("write");
    let err = Plugin::load(&path).expect_err("not a library");
    let text = err.to_string();
    std::fs::remove_dir_all(&dir).expect("clean up");
    assert!(text.starts_with(&format!("failed to load pjrt plugin {}: ", path.display())), "{text}");
}

/// A store in memory for one test process: enough for the CPU plugin, which takes the callbacks
/// but never calls them.
#[derive(Debug, Default)]
struct MemoryStore(std::sync::Mutex<std::collections::HashMap<String, Vec<u8>>>);

impl ttpu_pjrt::KvStore for MemoryStore {
    fn put(&self, key: &str, value: &[u8]) -> Result<(), ttpu_pjrt::KvError> {
        self.0.lock().expect("not poisoned").insert(key.to_owned(), value.to_vec());
        Ok(())
    }

    fn get(&self, key: &str, timeout: std::time::Duration) -> Result<Vec<u8>, ttpu_pjrt::KvError> {
        self.try_get(key)?.ok_or_else(|| ttpu_pjrt::KvError::Timeout {
            key: key.to_owned(),
            waited: timeout,
            store: "memory".to_owned(),
        })
    }

    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>, ttpu_pjrt::KvError> {
        Ok(self.0.lock().expect("not poisoned").get(key).cloned())
    }
}

#[test]
fn a_client_of_a_multi_process_job_numbers_its_devices_by_process() {
    let plugin = plugin();
    let store = std::sync::Arc::new(MemoryStore::default());
    let options = [("cpu_device_count", NamedValue::Int64(2)), ("process_id", NamedValue::Int64(1))];
    let client = Client::with_store(&plugin, &options, store.clone(), std::time::Duration::from_secs(1))
        .unwrap_or_else(|e| panic!("{e}"));
    let ids: Vec<i32> = client.addressable_devices().expect("devices").iter().map(|d| d.id().expect("id")).collect();
    assert_eq!(ids, [2048, 2049]);
    let listed: Vec<i32> = client.devices().expect("devices").iter().map(|d| d.id().expect("id")).collect();
    assert_eq!(listed, [2048, 2049], "the CPU plugin lists its own devices only");
    let processes: Vec<i32> =
        client.devices().expect("devices").iter().map(|d| d.process_index().expect("process")).collect();
    assert_eq!((client.process_index().expect("process index"), processes), (1, vec![1, 1]));
    check_add(&client);
    // The CPU plugin runs nothing across processes: naming another process's device (0) fails.
    let options = ttpu_pjrt::CompileOptions::partitioned(&[0, 2048]);
    let error = client.compile_with(ADD_2X3_F32, &options).expect_err("another process's device");
    assert!(matches!(error, Error::Plugin { code: ErrorCode::InvalidArgument, .. }), "{error:?}");
    assert_eq!(
        error.to_string(),
        "pjrt plugin error (invalid argument): Multiprocess computations aren't implemented on the CPU backend."
    );
    drop(client);
    assert!(store.0.lock().expect("not poisoned").is_empty(), "the CPU plugin never calls the store");
}

#[test]
fn the_cpu_plugin_has_no_cost_analysis() {
    // The 0.115 CPU plugin leaves PJRT_Executable_GetCostAnalysis unimplemented, so callers fall
    // back to an estimate of their own (`ttpu bench` says which it reports).
    let exe = client().compile(ADD_2X3_F32).unwrap_or_else(|e| panic!("{e}"));
    let error = exe.cost_analysis().expect_err("unimplemented on the CPU plugin");
    assert!(matches!(&error, Error::Plugin { code: ErrorCode::Unimplemented, .. }), "{error:?}");
    assert_eq!(error.to_string(), "pjrt plugin error (unimplemented): GetCostAnalysis is not implemented.");
}

#[test]
fn the_cpu_plugin_has_the_ffi_extension_and_no_profiler_extension() {
    // PJRT_Extension_Type: 1 Profiler, 4 Layouts, 5 FFI, 6 MemoryDescriptions, 9 PhaseCompile;
    // 19 and 24 are past the 0.81 header.
    assert_eq!(plugin().extension_types(), vec![24, 19, 9, 5, 6, 4]);
    assert!(plugin().supports_host_kernels());
    assert!(!plugin().has_profiler_extension());
}
