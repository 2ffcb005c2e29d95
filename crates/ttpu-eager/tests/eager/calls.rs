//! Graphs called as steps (several results each), and donation of buffers no tensor holds.

use ttpu_eager::{CallGraph, DType, Shape};
use ttpu_ir::{BinaryOp, GraphBuilder, TensorType, UnaryOp};

use crate::common::{assert_close, device, message, tensor};

/// `(x + y, tanh(x * y))` over two `f32[n]`.
fn sum_and_tanh_product(n: i64) -> CallGraph {
    let ty = TensorType::new(DType::F32, Shape::from_static(&[n]));
    let mut b = GraphBuilder::new();
    let x = b.input(ty.clone(), None);
    let y = b.input(ty, None);
    let sum = b.binary(BinaryOp::Add, x, y).unwrap();
    let product = b.binary(BinaryOp::Multiply, x, y).unwrap();
    let tanh = b.unary(UnaryOp::Tanh, product).unwrap();
    CallGraph::new(b.finish(&[sum, tanh])).unwrap()
}

#[test]
fn a_called_graph_gives_one_tensor_per_output() {
    let device = device();
    let call = sum_and_tanh_product(3);
    let (x, y) = (tensor(&device, &[1.0, 2.0, -3.0], &[3]), tensor(&device, &[0.5, 0.25, 0.125], &[3]));
    let results = device.call(&call, &[&x, &y]).unwrap();
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(ttpu_eager::Tensor::is_pending));
    // A second call of the same graph on the first's result joins the same program.
    let again = device.call(&call, &[&results[0], &y]).unwrap();
    assert_eq!(again[0].to_vec::<f32>().unwrap(), vec![2.0, 2.5, -2.75]);
    assert_eq!(results[0].to_vec::<f32>().unwrap(), vec![1.5, 2.25, -2.875]);
    let expected: Vec<f64> = [0.5f64, 0.5, -0.375].iter().map(|value| value.tanh()).collect();
    assert_close(&results[1].to_vec::<f32>().unwrap(), &expected, 1e-6);
    assert_eq!(device.counters().compiles, 1, "one program for both calls");
}

#[test]
fn operands_must_have_the_types_of_the_graph_inputs() {
    let device = device();
    let call = sum_and_tanh_product(3);
    let wide = tensor(&device, &[1.0, 2.0, 3.0, 4.0], &[4]);
    assert_eq!(message(device.call(&call, &[&wide, &wide])), "call: operand 0 is f32[4], not f32[3]");
    assert_eq!(device.pending_ops().unwrap(), 0, "a refused call records nothing");
}

#[test]
fn a_buffer_no_tensor_holds_is_donated_to_the_result_of_its_type() {
    let device = device();
    let mut x = tensor(&device, &[1.0, 2.0], &[2]);
    x.materialize().unwrap();
    for _ in 0..3 {
        // The old `x` is dropped by the assignment: its buffer can take the new value.
        x = x.add_scalar(1.0f32).unwrap();
        x.materialize().unwrap();
    }
    assert_eq!(x.to_vec::<f32>().unwrap(), vec![4.0, 5.0]);
    assert_eq!(device.donated_buffers(), 3);
    // A buffer a live tensor still holds is never donated.
    let kept = x.clone();
    let y = x.add_scalar(1.0f32).unwrap();
    y.materialize().unwrap();
    assert_eq!(device.donated_buffers(), 3);
    assert_eq!((kept.to_vec::<f32>().unwrap(), y.to_vec::<f32>().unwrap()), (vec![4.0, 5.0], vec![5.0, 6.0]));
}

#[test]
fn host_values_are_inputs_packed_per_dtype_and_not_part_of_the_program() {
    let device = device();
    let x = tensor(&device, &[1.0, 2.0], &[2]);
    for (scale, shift) in [(2.0f32, 10i64), (-0.5, 3)] {
        let scale_value = device.host(DType::F32, &[], scale.to_le_bytes().to_vec()).unwrap();
        let shift_value = device.host(DType::I64, &[1], shift.to_le_bytes().to_vec()).unwrap();
        let offset =
            device.host(DType::F32, &[2], [0.25f32, 0.5].iter().flat_map(|v| v.to_le_bytes()).collect()).unwrap();
        let y = x.mul(&scale_value).unwrap().add(&shift_value).unwrap().add(&offset).unwrap();
        let expected: Vec<f32> =
            [1.0f32, 2.0].iter().zip([0.25f32, 0.5]).map(|(v, o)| v * scale + shift as f32 + o).collect();
        assert_eq!(y.to_vec::<f32>().unwrap(), expected);
    }
    assert_eq!((device.counters().compiles, device.counters().cache_hits), (1, 1), "values are not the key");
    assert_eq!(message(device.host(DType::F32, &[2], vec![0; 4])), "shape [2] needs 2 elements, found 1");
}
