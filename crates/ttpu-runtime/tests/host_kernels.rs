//! Host kernels on the CPU plugin: a Rust function registered as an XLA FFI handler runs inside
//! a compiled program, its errors reach the caller, and a kernel without a function is refused
//! before anything compiles.

use std::sync::{Arc, OnceLock};

use ttpu_ir::{BinaryOp, DType, Graph, GraphBuilder, Kernel, KernelBody, Shape, TensorType};
use ttpu_runtime::{CompileSpec, HostTensor, Runtime};

fn f32s(dims: &[i64]) -> TensorType {
    TensorType::new(DType::F32, Shape::from_static(dims))
}

fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        Runtime::cpu().unwrap_or_else(|error| panic!("no PJRT CPU plugin: {error} (run `cargo xtask setup`)"))
    })
}

fn host(name: &str, inputs: Vec<TensorType>, results: Vec<TensorType>) -> Arc<Kernel> {
    Arc::new(Kernel { name: name.into(), inputs, results, body: KernelBody::Host })
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|chunk| f32::from_le_bytes(chunk.try_into().expect("4 bytes"))).collect()
}

/// `(x + 1, kernel(x + 1))`, so the kernel's input is computed on the device first.
fn around(kernel: Arc<Kernel>) -> Graph {
    let mut b = GraphBuilder::new();
    let x = b.input(f32s(&[4]), Some("x".into()));
    let one = b.constant(ttpu_ir::Literal::splat(DType::F32, &[4], ttpu_ir::Scalar::Float(1.0)));
    let shifted = b.binary(BinaryOp::Add, x, one).unwrap();
    let mut outputs = vec![shifted];
    outputs.extend(b.kernel(kernel, &[shifted]).unwrap());
    b.finish(&outputs)
}

fn run(graph: &Graph, x: &[f32]) -> Result<Vec<Vec<f32>>, ttpu_runtime::Error> {
    run_on(runtime(), graph, x)
}

fn run_on(runtime: &Runtime, graph: &Graph, x: &[f32]) -> Result<Vec<Vec<f32>>, ttpu_runtime::Error> {
    let executable = runtime.graph_executable(graph, &CompileSpec::on(0))?;
    let data = x.iter().flat_map(|value| value.to_le_bytes()).collect();
    let input = runtime.upload(&HostTensor::new(DType::F32, vec![x.len() as i64], data)?, 0)?;
    let outputs = executable.run(&[&input])?;
    outputs.iter().map(|buffer| Ok(floats(&runtime.download(buffer)?.data))).collect()
}

#[test]
fn a_rust_function_runs_as_a_host_kernel() {
    // A cumulative sum and the input's maximum: work a StableHLO module would need a loop for.
    ttpu_pjrt::register_host_kernel(
        "test::cumsum_max",
        Arc::new(|inputs, outputs| {
            let values = floats(inputs[0].data);
            let mut total = 0.0f32;
            let sums: Vec<u8> = values
                .iter()
                .flat_map(|value| {
                    total += value;
                    total.to_le_bytes()
                })
                .collect();
            let [sums_out, max_out] = outputs else { return Err(format!("{} results", outputs.len())) };
            sums_out.data.copy_from_slice(&sums);
            let max = values.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            max_out.data.copy_from_slice(&max.to_le_bytes());
            Ok(())
        }),
    )
    .unwrap();
    let kernel = host("test::cumsum_max", vec![f32s(&[4])], vec![f32s(&[4]), f32s(&[])]);
    let outputs = run(&around(kernel), &[1.0, -2.0, 3.5, 0.25]).unwrap();
    assert_eq!(outputs, vec![vec![2.0, -1.0, 4.5, 1.25], vec![2.0, 1.0, 5.5, 6.75], vec![4.5]]);
}

#[test]
fn a_host_kernel_error_fails_the_run_with_its_message() {
    ttpu_pjrt::register_host_kernel("test::refuses", Arc::new(|_, _| Err("the input is not sorted".into()))).unwrap();
    let kernel = host("test::refuses", vec![f32s(&[4])], vec![f32s(&[4])]);
    let error = run(&around(kernel), &[1.0, 2.0, 3.0, 4.0]).unwrap_err().to_string();
    assert!(error.contains("host kernel `test::refuses`: the input is not sorted"), "{error}");
}

#[test]
fn a_kernel_without_a_function_is_refused_before_compiling() {
    let kernel = host("test::never_registered", vec![f32s(&[4])], vec![f32s(&[4])]);
    // A runtime of its own: the other tests compile on the shared one at the same time.
    let own = Runtime::cpu().unwrap_or_else(|error| panic!("no PJRT CPU plugin: {error} (run `cargo xtask setup`)"));
    let error = run_on(&own, &around(kernel), &[0.0; 4]).unwrap_err();
    assert_eq!(
        error.to_string(),
        "host kernel `test::never_registered`: no function is registered under this name in this process"
    );
    assert_eq!(own.counters().compiles, 0);
}
