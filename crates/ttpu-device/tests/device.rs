//! The device through its Rust API, as PyTorch's dispatcher drives it: views that share storage,
//! writes through views, floats as program inputs, errors in PyTorch's words; custom ops run by user
//! kernels (StableHLO and host), eager and in recorded graphs.

use ttpu_device::{
    Backend, DType, DeviceTensor, HostTensor, Kernel, KernelBody, OpId, OpKind, OpSpec, Returned, Runtime, Shape,
    TensorType, Value,
};

fn backend() -> Backend {
    Backend::new(Runtime::cpu().expect("the CPU plugin (cargo xtask setup)")).unwrap()
}

fn f32s(data: &[f32], dims: &[i64]) -> HostTensor {
    HostTensor { dtype: DType::F32, dims: dims.to_vec(), data: data.iter().flat_map(|v| v.to_le_bytes()).collect() }
}

fn values(backend: &Backend, tensor: &DeviceTensor) -> Vec<f32> {
    let host = backend.read(tensor, "test").unwrap();
    host.data.chunks_exact(4).map(|bytes| f32::from_le_bytes(bytes.try_into().unwrap())).collect()
}

fn op(backend: &Backend, name: &str, kind: OpKind) -> OpId {
    backend.register(OpSpec { name: name.into(), kind, functional: None }).unwrap()
}

fn in_place(backend: &Backend, name: &str) -> OpId {
    op(backend, name, OpKind::Mutating { written: vec![(0, "self".into())], fresh: 0 })
}

fn tensor(returned: Returned) -> DeviceTensor {
    match returned {
        Returned::Tensor(tensor) => tensor,
        other => panic!("expected a tensor, found {other:?}"),
    }
}

fn call(backend: &Backend, op: OpId, args: Vec<Value>) -> DeviceTensor {
    tensor(backend.dispatch(op, &args, &[], None).unwrap())
}

#[test]
fn a_write_into_a_view_reaches_its_base_and_older_views_see_it() {
    let backend = backend();
    let x = backend.upload(0, &f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])).unwrap();
    let select = op(&backend, "aten.select.int", OpKind::View);
    let t = op(&backend, "aten.t.default", OpKind::View);
    let add_ = in_place(&backend, "aten.add_.Tensor");
    let mul_ = in_place(&backend, "aten.mul_.Tensor");
    let row = call(&backend, select, vec![Value::Tensor(x.clone()), Value::Int(0), Value::Int(1)]);
    assert_eq!(row.storage_id().unwrap(), x.storage_id().unwrap());
    assert_eq!(row.meta().unwrap().strides.offset, 3);
    let transposed = call(&backend, t, vec![Value::Tensor(x.clone())]);
    assert_eq!(transposed.meta().unwrap().strides.strides, vec![1, 3]);
    backend.dispatch(add_, &[Value::Tensor(row.clone()), Value::Int(10)], &[], None).unwrap();
    assert_eq!(values(&backend, &x), vec![1.0, 2.0, 3.0, 14.0, 15.0, 16.0]);
    backend.dispatch(mul_, &[Value::Tensor(x.clone()), Value::Float(2.0)], &[], None).unwrap();
    assert_eq!(values(&backend, &row), vec![28.0, 30.0, 32.0]);
    assert_eq!(values(&backend, &transposed), vec![2.0, 28.0, 4.0, 30.0, 6.0, 32.0]);
    // A write into the transposed view goes back through the inverse permutation.
    let column = call(&backend, select, vec![Value::Tensor(transposed.clone()), Value::Int(0), Value::Int(2)]);
    backend.dispatch(mul_, &[Value::Tensor(column), Value::Int(0)], &[], None).unwrap();
    assert_eq!(values(&backend, &x), vec![2.0, 4.0, 0.0, 28.0, 30.0, 0.0]);
}

#[test]
fn changing_floats_reuse_one_program() {
    let backend = backend();
    let x = backend.upload(0, &f32s(&[1.0, 2.0], &[2])).unwrap();
    let mul = op(&backend, "aten.mul.Tensor", OpKind::Functional);
    for scale in [0.5f64, 0.25, 3.75, 1e-3] {
        let y = call(&backend, mul, vec![Value::Tensor(x.clone()), Value::Float(scale)]);
        assert_eq!(values(&backend, &y), vec![scale as f32, 2.0 * scale as f32]);
    }
    let stats = backend.stats().unwrap();
    assert_eq!((stats.compiles, stats.templates), (1, 1), "{stats:?}");
    // 1.0 is a constant of its own program.
    let y = call(&backend, mul, vec![Value::Tensor(x.clone()), Value::Float(1.0)]);
    assert_eq!(values(&backend, &y), vec![1.0, 2.0]);
    assert_eq!(backend.stats().unwrap().compiles, 2);
}

#[test]
fn calls_are_deferred_until_a_read_and_fused_into_one_program() {
    let backend = backend();
    let x = backend.upload(0, &f32s(&[-1.0, 2.0, -3.0], &[3])).unwrap();
    let relu = op(&backend, "aten.relu.default", OpKind::Functional);
    let exp = op(&backend, "aten.exp.default", OpKind::Functional);
    let y = call(&backend, relu, vec![Value::Tensor(x.clone())]);
    let z = call(&backend, exp, vec![Value::Tensor(y.clone())]);
    assert_eq!(backend.stats().unwrap().executions, 0, "nothing ran yet");
    let expected: Vec<f32> = [0.0f32, 2.0, 0.0].iter().map(|v| v.exp()).collect();
    let got = values(&backend, &z);
    for (a, b) in got.iter().zip(&expected) {
        assert!((a - b).abs() <= 1e-6 * b.abs().max(1.0), "{got:?} vs {expected:?}");
    }
    let stats = backend.stats().unwrap();
    assert_eq!((stats.executions, stats.flushes.get("test").copied()), (1, Some(1)), "{stats:?}");
    assert_eq!(values(&backend, &y), vec![0.0, 2.0, 0.0], "y was computed by the same program");
    assert_eq!(backend.stats().unwrap().executions, 1);
}

#[test]
fn pytorch_errors_for_devices_and_in_place_shapes() {
    let backend = backend();
    let x = backend.upload(0, &f32s(&[1.0, 2.0, 3.0], &[3])).unwrap();
    let add = op(&backend, "aten.add.Tensor", OpKind::Functional);
    let add_ = in_place(&backend, "aten.add_.Tensor");
    let host = Value::Host(f32s(&[1.0, 2.0, 3.0], &[3]));
    let error = backend.dispatch(add, &[Value::Tensor(x.clone()), host], &[], None).unwrap_err();
    assert_eq!(
        error.to_string(),
        "Expected all tensors to be on the same device, but found at least two devices, ttpu:0 and cpu!"
    );
    // A zero-dim CPU tensor joins like a number.
    let scalar = Value::Host(f32s(&[2.0], &[]));
    let y = call(&backend, add, vec![Value::Tensor(x.clone()), scalar]);
    assert_eq!(values(&backend, &y), vec![3.0, 4.0, 5.0]);
    let wide = backend.upload(0, &f32s(&[0.0; 6], &[2, 3])).unwrap();
    let error = backend.dispatch(add_, &[Value::Tensor(x), Value::Tensor(wide)], &[], None).unwrap_err();
    assert_eq!(error.to_string(), "aten.add_.Tensor: output with shape [3] doesn't match the broadcast shape [2, 3]");
    let unknown = op(&backend, "aten.no_such_op.default", OpKind::Functional);
    assert!(!backend.supports(unknown).unwrap());
    let error = backend.dispatch(unknown, &[], &[], None).unwrap_err();
    assert_eq!(
        error.to_string(),
        "`aten.no_such_op.default` is not supported on the ttpu device (see docs/ops.md for the supported overloads)"
    );
}

#[test]
fn a_recorded_graph_runs_as_one_step_on_device_tensors() {
    use ttpu_device::{Arg, Recorded, Strides};
    let backend = backend();
    let mut recorder = backend.recorder();
    let x = recorder.input(DType::F32, Strides::contiguous(&[2, 3])).unwrap();
    let w = recorder.input(DType::F32, Strides::contiguous(&[3, 2])).unwrap();
    let product =
        match recorder.call("aten.mm.default", &[Arg::Tensor(x as usize), Arg::Tensor(w as usize)], &[]).unwrap() {
            Recorded::Value(index, DType::F32, strides) => {
                assert_eq!(strides.sizes, vec![2, 2]);
                index
            }
            other => panic!("{other:?}"),
        };
    let scaled = match recorder.call("aten.mul.Tensor", &[Arg::Tensor(product as usize), Arg::Float(0.5)], &[]).unwrap()
    {
        Recorded::Value(index, ..) => index,
        other => panic!("{other:?}"),
    };
    let error = recorder.call("aten.mm.default", &[Arg::Tensor(x as usize), Arg::Tensor(x as usize)], &[]).unwrap_err();
    assert_eq!(
        error.to_string(),
        "aten.mm.default: `dot_general`: lhs dim 1 of f32[2, 3] does not match rhs dim 0 of f32[2, 3]"
    );
    let program = recorder.finish(&[scaled, product]).unwrap();
    let xs = backend.upload(0, &f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])).unwrap();
    let ws = backend.upload(0, &f32s(&[1.0, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2])).unwrap();
    let results = backend.run_program(&program, &[xs.clone(), ws.clone()]).unwrap();
    assert_eq!(backend.stats().unwrap().executions, 0, "recorded, not run");
    assert_eq!(values(&backend, &results[0]), vec![2.0, 2.5, 5.0, 5.5]);
    assert_eq!(values(&backend, &results[1]), vec![4.0, 5.0, 10.0, 11.0]);
    let error = backend.run_program(&program, &[ws, xs]).unwrap_err();
    assert_eq!(error.to_string(), "compiled graph: input 0 is f32[3, 2], the graph was compiled for f32[2, 3]");
}

/// SiLU on `f32[2, 3]` as a StableHLO module (generic op form, as registries take it).
const SILU: &str = r#"module {
  func.func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
    %gate = "stablehlo.logistic"(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>
    %res = "stablehlo.multiply"(%x, %gate) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    return %res : tensor<2x3xf32>
  }
}"#;

fn silu_kernel() -> std::sync::Arc<Kernel> {
    let ty = TensorType::new(DType::F32, Shape::from_static(&[2, 3]));
    std::sync::Arc::new(Kernel {
        name: "mylib::silu".into(),
        inputs: vec![ty.clone()],
        results: vec![ty],
        body: KernelBody::StableHlo(SILU.into()),
    })
}

fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

fn assert_close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (a, b) in got.iter().zip(want) {
        assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{got:?} vs {want:?}");
    }
}

fn functional(name: &str) -> OpSpec {
    OpSpec { name: name.into(), kind: OpKind::Functional, functional: None }
}

#[test]
fn a_custom_ops_kernel_runs_deferred_and_fused_with_its_neighbours() {
    let backend = backend();
    let kernel = backend.register_kernel(functional("mylib.silu.default"), silu_kernel()).unwrap();
    assert!(backend.supports(kernel).unwrap());
    let mul = op(&backend, "aten.mul.Tensor", OpKind::Functional);
    let add = op(&backend, "aten.add.Tensor", OpKind::Functional);
    let data = [-2.0f32, -0.5, 0.0, 0.5, 1.0, 3.0];
    let x = backend.upload(0, &f32s(&data, &[2, 3])).unwrap();
    let doubled = call(&backend, mul, vec![Value::Tensor(x.clone()), Value::Float(2.0)]);
    let activated = call(&backend, kernel, vec![Value::Tensor(doubled)]);
    assert_eq!(activated.meta().unwrap().strides, ttpu_device::Strides::contiguous(&[2, 3]));
    let out = call(&backend, add, vec![Value::Tensor(activated.clone()), Value::Int(1)]);
    assert_eq!(backend.stats().unwrap().executions, 0, "nothing ran yet");
    let want: Vec<f32> = data.iter().map(|&x| silu(2.0 * x) + 1.0).collect();
    assert_close(&values(&backend, &out), &want);
    let stats = backend.stats().unwrap();
    assert_eq!((stats.executions, stats.compiles), (1, 1), "one program for the three calls: {stats:?}");
    let want: Vec<f32> = data.iter().map(|&x| silu(2.0 * x)).collect();
    assert_close(&values(&backend, &activated), &want);
    assert_eq!(backend.stats().unwrap().executions, 1, "the kernel's result came from the same program");

    // Another call of the kernel builds nothing; a view operand passes its values, not its memory.
    let templates = backend.stats().unwrap().templates;
    let t = op(&backend, "aten.t.default", OpKind::View);
    let wide = backend.upload(0, &f32s(&data, &[3, 2])).unwrap();
    let transposed = call(&backend, t, vec![Value::Tensor(wide)]);
    assert!(!transposed.meta().unwrap().strides.is_contiguous());
    let activated = call(&backend, kernel, vec![Value::Tensor(transposed)]);
    let want: Vec<f32> = [0, 2, 4, 1, 3, 5].iter().map(|&i| silu(data[i])).collect();
    assert_close(&values(&backend, &activated), &want);
    assert_eq!(backend.stats().unwrap().templates, templates + 1, "only `t` built a template");
}

#[test]
fn a_kernel_call_of_other_types_or_arguments_is_the_kernels_error() {
    let backend = backend();
    let kernel = backend.register_kernel(functional("mylib.silu.default"), silu_kernel()).unwrap();
    let refused = |args: Vec<Value>, kwargs: Vec<(String, Value)>| {
        backend.dispatch(kernel, &args, &kwargs, None).unwrap_err().to_string()
    };
    let doubles = HostTensor {
        dtype: DType::F64,
        dims: vec![2, 3],
        data: [0.0f64; 6].iter().flat_map(|v| v.to_le_bytes()).collect(),
    };
    let doubles = backend.upload(0, &doubles).unwrap();
    assert_eq!(
        refused(vec![Value::Tensor(doubles)], vec![]),
        "mylib.silu.default: argument 0 is f64[2, 3], but kernel `mylib::silu` takes f32[2, 3]"
    );
    let short = backend.upload(0, &f32s(&[1.0, 2.0, 3.0], &[3])).unwrap();
    assert_eq!(
        refused(vec![Value::Tensor(short)], vec![]),
        "mylib.silu.default: argument 0 is f32[3], but kernel `mylib::silu` takes f32[2, 3]"
    );
    let x = backend.upload(0, &f32s(&[0.0; 6], &[2, 3])).unwrap();
    // The right operand types with an argument the kernel cannot take: refused, though the
    // kernel's template for those types is built already.
    call(&backend, kernel, vec![Value::Tensor(x.clone())]);
    assert_eq!(
        refused(vec![Value::Tensor(x.clone()), Value::Float(0.5)], vec![]),
        "mylib.silu.default: argument 1 of kernel `mylib::silu` is not a tensor"
    );
    assert_eq!(
        refused(vec![], vec![("x".into(), Value::Tensor(x.clone()))]),
        "mylib.silu.default: kernel `mylib::silu` takes tensors positionally, not `x=`"
    );
    assert_eq!(refused(vec![], vec![]), "mylib.silu.default: kernel `mylib::silu` takes 1 tensors, the call passes 0");
    assert_eq!(backend.stats().unwrap().executions, 0, "a refused call records nothing");

    let written = OpSpec {
        name: "mylib.silu_.default".into(),
        kind: OpKind::Mutating { written: vec![(0, "x".into())], fresh: 0 },
        functional: None,
    };
    let error = backend.register_kernel(written, silu_kernel()).unwrap_err();
    assert_eq!(
        error.to_string(),
        "`mylib.silu_.default` mutates or aliases its arguments, and its kernel `mylib::silu` can only stand for a \
         custom op that returns new tensors (`mutates_args=()`) on the ttpu device"
    );
    let symbolic = Kernel {
        inputs: vec![TensorType::new(DType::F32, Shape(std::iter::once(ttpu_ir::Dim::Sym("s0".into())).collect()))],
        ..(*silu_kernel()).clone()
    };
    let error = backend.register_kernel(functional("mylib.silu.default"), symbolic.into()).unwrap_err();
    assert_eq!(error.to_string(), "kernel `mylib::silu`: the type f32[s0] is symbolic; kernel types are static");
}

#[test]
fn a_host_kernel_with_two_results_gives_two_fresh_tensors() {
    let f32s3 = TensorType::new(DType::F32, Shape::from_static(&[3]));
    ttpu_runtime::register_host_kernel(
        "devicetest::shift_square",
        std::sync::Arc::new(|inputs, outputs| {
            let x: Vec<f32> =
                inputs[0].data.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes"))).collect();
            let (shifted, squared) = outputs.split_at_mut(1);
            for (i, v) in x.iter().enumerate() {
                shifted[0].data[4 * i..4 * i + 4].copy_from_slice(&(v + 1.0).to_le_bytes());
                squared[0].data[4 * i..4 * i + 4].copy_from_slice(&(v * v).to_le_bytes());
            }
            Ok(())
        }),
    )
    .unwrap();
    let kernel = Kernel {
        name: "devicetest::shift_square".into(),
        inputs: vec![f32s3.clone()],
        results: vec![f32s3.clone(), f32s3],
        body: KernelBody::Host,
    };
    let backend = backend();
    let id = backend.register_kernel(functional("devicetest.shift_square.default"), kernel.into()).unwrap();
    let x = backend.upload(0, &f32s(&[1.0, -2.0, 3.0], &[3])).unwrap();
    let Returned::List(results) = backend.dispatch(id, &[Value::Tensor(x)], &[], None).unwrap() else {
        panic!("two results")
    };
    let [shifted, squared] = <[Returned; 2]>::try_from(results).unwrap().map(tensor);
    assert_ne!(shifted.storage_id().unwrap(), squared.storage_id().unwrap());
    assert_eq!(values(&backend, &shifted), vec![2.0, -1.0, 4.0]);
    assert_eq!(values(&backend, &squared), vec![1.0, 4.0, 9.0]);
}

#[test]
fn a_recorded_graph_calls_a_kernel_with_the_eager_calls_template() {
    use ttpu_device::{Arg, Recorded, Strides};
    let backend = backend();
    let kernel = silu_kernel();
    let mut recorder = backend.recorder();
    let x = recorder.input(DType::F32, Strides::contiguous(&[2, 3])).unwrap() as usize;
    let scaled = match recorder.call("aten.mul.Tensor", &[Arg::Tensor(x), Arg::Float(0.5)], &[]).unwrap() {
        Recorded::Value(index, ..) => index as usize,
        other => panic!("{other:?}"),
    };
    let activated = match recorder.call_kernel("mylib.silu.default", &kernel, &[Arg::Tensor(scaled)], &[]).unwrap() {
        Recorded::Value(index, DType::F32, strides) => {
            assert_eq!(strides, Strides::contiguous(&[2, 3]));
            index
        }
        other => panic!("{other:?}"),
    };
    let error = recorder.call_kernel("mylib.silu.default", &kernel, &[Arg::Tensor(x), Arg::Int(1)], &[]).unwrap_err();
    assert_eq!(error.to_string(), "mylib.silu.default: argument 1 of kernel `mylib::silu` is not a tensor");
    let program = recorder.finish(&[activated]).unwrap();
    let templates = backend.stats().unwrap().templates;
    let data = [-3.0f32, -1.0, 0.0, 1.0, 2.0, 4.0];
    let xs = backend.upload(0, &f32s(&data, &[2, 3])).unwrap();
    let results = backend.run_program(&program, std::slice::from_ref(&xs)).unwrap();
    let want: Vec<f32> = data.iter().map(|&x| silu(0.5 * x)).collect();
    assert_close(&values(&backend, &results[0]), &want);
    // An eager call of the kernel finds the template the graph was recorded with.
    let id = backend.register_kernel(functional("mylib.silu.default"), kernel).unwrap();
    let eager = call(&backend, id, vec![Value::Tensor(xs)]);
    assert_close(&values(&backend, &eager), &data.iter().map(|&x| silu(x)).collect::<Vec<_>>());
    assert_eq!(backend.stats().unwrap().templates, templates);
}

#[test]
fn a_tensor_larger_than_the_device_is_refused_when_recorded() {
    let backend = backend();
    let limit = backend.tensor_byte_limit();
    let empty = op(&backend, "aten.empty.memory_format", OpKind::Functional);
    // 2^31 x 2^31 f32 elements: 2^64 bytes, which saturates.
    let sizes = Value::List(vec![Value::Int(1 << 31), Value::Int(1 << 31)]);
    let error = backend.dispatch(empty, &[sizes], &[], Some(0)).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "ttpu:0 out of memory: aten.empty.memory_format would make a tensor of {} bytes, more than the {limit} \
             bytes one tensor may take on this device",
            u64::MAX
        )
    );
    // Nothing was recorded: the device still runs what comes next.
    let x = backend.upload(0, &f32s(&[1.0, 2.0], &[2])).unwrap();
    let add = op(&backend, "aten.add.Tensor", OpKind::Functional);
    let y = call(&backend, add, vec![Value::Tensor(x.clone()), Value::Tensor(x)]);
    assert_eq!(values(&backend, &y), vec![2.0, 4.0]);
    // A tensor within the limit is recorded.
    let small = Value::List(vec![Value::Int(2), Value::Int(3)]);
    assert!(backend.dispatch(empty, &[small], &[], Some(0)).is_ok());
}

#[test]
fn fill_values_that_do_not_fit_their_type_are_refused_as_pytorch_does() {
    use ttpu_device::DType;
    let backend = backend();
    let full = op(&backend, "aten.full.default", OpKind::Functional);
    let fill = |value: Value, dtype: DType| {
        let kwargs = vec![("dtype".to_string(), Value::DType(dtype))];
        backend.dispatch(full, &[Value::List(vec![Value::Int(2)]), value], &kwargs, Some(0))
    };
    let refused = [
        (Value::Float(f64::NAN), DType::I32, "int"),
        (Value::Float(f64::INFINITY), DType::I64, "int64_t"),
        (Value::Int(300), DType::U8, "uint8_t"),
        (Value::Int(-256), DType::U8, "uint8_t"),
        (Value::Float(-0.5), DType::U8, "uint8_t"),
        (Value::Float(256.0), DType::U8, "uint8_t"),
        (Value::Int(-129), DType::I8, "int8_t"),
        (Value::Int(1 << 31), DType::I32, "int"),
        (Value::Float(1e39), DType::F32, "float"),
        // Complex fills check the real value against their op math, `complex<float>`.
        (Value::Float(1e39), DType::C64, "c10::complex<float>"),
        (Value::Float(1e39), DType::C32, "c10::complex<float>"),
    ];
    for (value, dtype, name) in refused {
        let error = fill(value.clone(), dtype).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("aten.full.default: value cannot be converted to type {name} without overflow"),
            "{value:?} as {dtype}"
        );
    }
    // What PyTorch accepts: -1 wraps into uint8, a float truncates into range, and f16's
    // overflow rounds to infinity (the fill converts through f32).
    for (value, dtype) in [
        (Value::Int(-1), DType::U8),
        (Value::Float(255.9), DType::U8),
        (Value::Float(70000.0), DType::F16),
        (Value::Float(f64::INFINITY), DType::F16),
        (Value::Float(f64::NAN), DType::BF16),
        (Value::Bool(true), DType::I8),
        (Value::Float(1e5), DType::C32),
        (Value::Float(f64::INFINITY), DType::C128),
    ] {
        assert!(fill(value.clone(), dtype).is_ok(), "{value:?} as {dtype}");
    }
    // masked_fill checks against the element type itself.
    let x = backend.upload(0, &HostTensor { dtype: DType::F16, dims: vec![1], data: vec![0, 0] }).unwrap();
    let mask = backend.upload(0, &HostTensor { dtype: DType::Bool, dims: vec![1], data: vec![1] }).unwrap();
    let masked_fill = op(&backend, "aten.masked_fill.Scalar", OpKind::Functional);
    let args = [Value::Tensor(x), Value::Tensor(mask), Value::Float(70000.0)];
    let error = backend.dispatch(masked_fill, &args, &[], None).unwrap_err();
    assert_eq!(
        error.to_string(),
        "aten.masked_fill.Scalar: value cannot be converted to type c10::Half without overflow"
    );
    // ... as does a complex32's: its parts are halves.
    let z = backend.upload(0, &HostTensor { dtype: DType::C32, dims: vec![1], data: vec![0, 0, 0, 0] }).unwrap();
    let mask = backend.upload(0, &HostTensor { dtype: DType::Bool, dims: vec![1], data: vec![1] }).unwrap();
    let args = [Value::Tensor(z), Value::Tensor(mask), Value::Float(70000.0)];
    let error = backend.dispatch(masked_fill, &args, &[], None).unwrap_err();
    assert_eq!(
        error.to_string(),
        "aten.masked_fill.Scalar: value cannot be converted to type c10::complex<c10::Half> without overflow"
    );
}

fn i64s(data: &[i64], dims: &[i64]) -> HostTensor {
    HostTensor { dtype: DType::I64, dims: dims.to_vec(), data: data.iter().flat_map(|v| v.to_le_bytes()).collect() }
}

#[test]
fn an_index_out_of_range_is_raised_at_the_next_host_read() {
    let backend = backend();
    let weight = backend.upload(0, &f32s(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], &[3, 2])).unwrap();
    let embedding = op(&backend, "aten.embedding.default", OpKind::Functional);
    let index = op(&backend, "aten.index.Tensor", OpKind::Functional);
    let gather = op(&backend, "aten.gather.default", OpKind::Functional);
    let lookup = |ids: &[i64]| {
        let ids = backend.upload(0, &i64s(ids, &[ids.len() as i64])).unwrap();
        call(&backend, embedding, vec![Value::Tensor(weight.clone()), Value::Tensor(ids)])
    };
    // In range: the values, and no error.
    assert_eq!(values(&backend, &lookup(&[2, 0])), vec![4.0, 5.0, 0.0, 1.0]);
    // Out of range (embedding takes no negative index): the read raises instead of clamping, and
    // a later read of other work does not raise it again.
    for bad in [3, -1] {
        let rows = lookup(&[0, bad]);
        let error = backend.read(&rows, "test").unwrap_err();
        assert_eq!(
            error.to_string(),
            "index out of range on the ttpu device: `aten.embedding.default`: an index is out of bounds for \
             dimension 0 with size 3 (the valid range is [0, 3)); found when the pending work ran, at this host read \
             (as CUDA reports a device-side assert at the next synchronizing call)"
        );
        assert_eq!(values(&backend, &lookup(&[1])), vec![2.0, 3.0]);
    }
    // `x[idx]` counts a negative index from the end, down to -size.
    let at = |ids: &[i64]| {
        let ids = backend.upload(0, &i64s(ids, &[ids.len() as i64])).unwrap();
        let list = Value::List(vec![Value::None, Value::Tensor(ids)]);
        call(&backend, index, vec![Value::Tensor(weight.clone()), list])
    };
    assert_eq!(values(&backend, &at(&[-2, 1])), vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let rows = at(&[-3]);
    // A flush alone (the optimizer step's) reads nothing back; reading the checks raises.
    backend.synchronize("test").unwrap();
    let error = backend.read_index_checks().unwrap_err().to_string();
    assert!(
        error.contains(
            "`aten.index.Tensor`: an index is out of bounds for dimension 1 with size 2 (the valid range is [-2, 2))"
        ),
        "{error}"
    );
    drop(rows);
    // The first failure is the one reported, and a passing check after it does not hide it.
    let ids = backend.upload(0, &i64s(&[0, 5], &[1, 2])).unwrap();
    let gathered =
        call(&backend, gather, vec![Value::Tensor(weight.clone()), Value::Int(0), Value::Tensor(ids.clone())]);
    let _fine = lookup(&[0]);
    let error = backend.read(&gathered, "test").unwrap_err().to_string();
    assert!(error.contains("`aten.gather.default`: an index is out of bounds for dimension 0 with size 3"), "{error}");
    // The checks' reads are counted.
    assert!(backend.stats().unwrap().to_host.get("index checks").copied().unwrap_or(0) >= 4);
}

#[test]
fn a_compiled_graph_checks_its_indices_too() {
    use ttpu_device::{Arg, Recorded, Strides};
    let backend = backend();
    let mut recorder = backend.recorder();
    let weight = recorder.input(DType::F32, Strides::contiguous(&[3, 2])).unwrap() as usize;
    let ids = recorder.input(DType::I64, Strides::contiguous(&[2])).unwrap() as usize;
    let rows = match recorder.call("aten.embedding.default", &[Arg::Tensor(weight), Arg::Tensor(ids)], &[]).unwrap() {
        Recorded::Value(index, ..) => index,
        other => panic!("{other:?}"),
    };
    let program = recorder.finish(&[rows]).unwrap();
    assert_eq!(program.outputs().len(), 1, "the checks' code is not one of the graph's results");
    let weights = backend.upload(0, &f32s(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], &[3, 2])).unwrap();
    let run = |ids: &[i64]| {
        let ids = backend.upload(0, &i64s(ids, &[2])).unwrap();
        backend.run_program(&program, &[weights.clone(), ids]).unwrap().remove(0)
    };
    assert_eq!(values(&backend, &run(&[2, 1])), vec![4.0, 5.0, 2.0, 3.0]);
    // The first failure is reported, whether it came from an eager call or a compiled graph.
    let bad = run(&[1, 3]);
    let gather = op(&backend, "aten.index_select.default", OpKind::Functional);
    let ids = backend.upload(0, &i64s(&[-1], &[1])).unwrap();
    let _later = call(&backend, gather, vec![Value::Tensor(weights.clone()), Value::Int(0), Value::Tensor(ids)]);
    let error = backend.read(&bad, "test").unwrap_err().to_string();
    assert!(
        error.contains("`aten.embedding.default`: an index is out of bounds for dimension 0 with size 3"),
        "{error}"
    );
    assert_eq!(values(&backend, &run(&[0, 0])), vec![0.0, 1.0, 0.0, 1.0]);
}
