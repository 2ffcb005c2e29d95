//! The device through its Rust API, as PyTorch's dispatcher drives it: views that share storage,
//! writes through views, floats as program inputs, errors in PyTorch's words.

use ttpu_device::{Backend, DType, DeviceTensor, HostTensor, OpId, OpKind, OpSpec, Returned, Runtime, Value};

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
