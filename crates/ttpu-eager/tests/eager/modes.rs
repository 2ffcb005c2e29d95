//! DeferAndFuse against DeferNever: same results, and the counters each mode implies.

use ttpu_eager::{DType, Device, Mode, Tensor};

use crate::common::{assert_close, device, device_in, tensor};

/// Ops whose result is exactly rounded (or exact), so every mode must agree bit for bit.
fn exact_work(device: &Device) -> Vec<Tensor> {
    let x = tensor(device, &[1.5, -2.25, 3.0, 0.125, -0.5, 7.0], &[2, 3]);
    let y = tensor(device, &[0.5, 4.0, -1.0], &[3]);
    let sum = x.add(&y).unwrap();
    let product = sum.mul(&x).unwrap().sub_scalar(1.0f32).unwrap();
    let quotient = product.div(&y).unwrap().neg().unwrap().relu().unwrap();
    let mask = x.gt(&y).unwrap();
    let picked = mask.where_(&quotient, &sum).unwrap();
    let joined = Tensor::cat(&[&picked, &x.transpose(0, 1).unwrap().reshape(&[2, 3]).unwrap()], 0).unwrap();
    let sliced = joined.slice(0, 1, 4, 2).unwrap().maximum(&x).unwrap();
    let ints = Tensor::from_slice(device, &[3i64, -4, 5], &[3]).unwrap();
    let int_math = ints.mul_scalar(7i64).unwrap().add(&ints).unwrap().to_dtype(DType::F32).unwrap();
    vec![sliced, joined, mask.to_dtype(DType::F32).unwrap(), int_math, x.max_keepdim(&[1]).unwrap()]
}

/// Ops whose rounding may differ when XLA fuses them differently.
fn inexact_work(device: &Device) -> Vec<Tensor> {
    let x = tensor(device, &[0.25, -1.5, 2.0, 0.75, -0.5, 1.0], &[2, 3]);
    let w = tensor(device, &[0.5, -0.25, 1.0, 2.0, -1.0, 0.5], &[3, 2]);
    let hidden = x.matmul(&w).unwrap().tanh().unwrap();
    let scores = hidden.softmax(-1).unwrap();
    let normed = x.layer_norm(&[3], None, None, 1e-5).unwrap().sigmoid().unwrap();
    vec![scores, normed, x.exp().unwrap().mean(&[0]).unwrap()]
}

fn read_all(tensors: &[Tensor]) -> Vec<Vec<f32>> {
    tensors.iter().map(|tensor| tensor.to_vec::<f32>().unwrap()).collect()
}

#[test]
fn deferred_and_eager_results_are_identical() {
    let deferred = device();
    let eager = device_in(Mode::DeferNever);
    let blocking = device_in(Mode::DeferNeverAndLaunchBlocking);
    let bits = |values: Vec<Vec<f32>>| -> Vec<Vec<u32>> {
        values.into_iter().map(|row| row.into_iter().map(f32::to_bits).collect()).collect()
    };
    let reference = bits(read_all(&exact_work(&deferred)));
    assert_eq!(bits(read_all(&exact_work(&eager))), reference);
    assert_eq!(bits(read_all(&exact_work(&blocking))), reference);

    let fused = read_all(&inexact_work(&deferred));
    let unfused = read_all(&inexact_work(&eager));
    for (fused, unfused) in fused.iter().zip(&unfused) {
        let unfused: Vec<f64> = unfused.iter().map(|&value| f64::from(value)).collect();
        assert_close(fused, &unfused, 1e-6);
    }
}

#[test]
fn defer_and_fuse_runs_one_program_per_read() {
    let device = device();
    let outputs = exact_work(&device);
    assert!(outputs.iter().all(Tensor::is_pending));
    assert_eq!(device.counters().executions, 0);
    outputs[0].to_vec::<f32>().unwrap();
    // Every live tensor was computed by the one program, so later reads only transfer.
    assert_eq!(device.counters().executions, 1);
    assert!(outputs.iter().all(|tensor| !tensor.is_pending()));
    read_all(&outputs[1..]);
    let counters = device.counters();
    assert_eq!((counters.executions, counters.compiles), (1, 1));
    assert_eq!(counters.bytes_to_device, 6 * 4 + 3 * 4 + 3 * 8);
}

#[test]
fn defer_never_launches_every_op() {
    let device = device_in(Mode::DeferNever);
    let x = tensor(&device, &[1.0, 2.0], &[2]);
    let y = x.mul(&x).unwrap().add(&x).unwrap().add(&x).unwrap();
    assert!(!y.is_pending());
    let counters = device.counters();
    // Both `add`s read two distinct buffers of one type, so the second reuses the first compile.
    assert_eq!((counters.executions, counters.compiles, counters.cache_hits), (3, 2, 1));
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![3.0, 8.0]);
}

#[test]
fn a_training_loop_compiles_once() {
    let device = device();
    let weights = tensor(&device, &[0.5, -0.5, 0.25, 1.0], &[2, 2]);
    let mut weights = weights;
    for step in 0..5 {
        let base = step as f32;
        let input = tensor(&device, &[base, 1.0, 2.0, base + 1.0], &[2, 2]);
        let target = tensor(&device, &[1.0, 0.0, 0.0, 1.0], &[2, 2]);
        let error = input.matmul(&weights).unwrap().sub(&target).unwrap();
        let gradient = input.transpose(0, 1).unwrap().matmul(&error).unwrap().mul_scalar(0.01f32).unwrap();
        weights = weights.sub(&gradient).unwrap();
        let loss = error.mul(&error).unwrap().mean(&[]).unwrap().item::<f32>().unwrap();
        assert!(loss.is_finite());
        if step == 0 {
            assert_eq!(device.counters().compiles, 1);
        }
    }
    let counters = device.counters();
    assert_eq!((counters.compiles, counters.executions, counters.cache_hits), (1, 5, 4));
}

#[test]
fn the_node_limit_materializes_pending_work() {
    let device = device();
    device.set_pending_limit(10).unwrap();
    let mut x = tensor(&device, &[1.0; 4], &[4]);
    for _ in 0..25 {
        x = x.add_scalar(1.0f32).unwrap();
    }
    assert!(device.counters().executions >= 2);
    assert!(device.pending_ops().unwrap() <= 10);
    assert_eq!(x.to_vec::<f32>().unwrap(), vec![26.0; 4]);
}

#[test]
fn pending_work_can_be_inspected() {
    let device = device();
    let x = tensor(&device, &[1.0, 2.0], &[2]);
    let y = x.exp().unwrap().add(&x).unwrap();
    let mlir = device.computation_mlir().unwrap();
    assert!(mlir.contains("stablehlo.exponential"), "{mlir}");
    assert!(mlir.contains("stablehlo.add"), "{mlir}");
    let dot = device.computation_graphviz().unwrap();
    assert!(dot.starts_with("digraph pending {"), "{dot}");
    assert!(dot.contains("label=\"exponential\\nf32[2]\""), "{dot}");
    assert_eq!(
        device.computation_ir().unwrap(),
        "graph @main(%0: f32[2]) -> (f32[2]) {\n  %1: f32[2] = exponential(%0)\n  %2: f32[2] = add(%1, %0)\n  return %2\n}\n"
    );
    device.sync().unwrap();
    assert!(!y.is_pending());
    assert_eq!(device.computation_ir().unwrap(), "graph @main() -> () {\n  return\n}\n");
    // The module is fused before lowering: a transpose pair cancels out.
    let round_trip = tensor(&device, &[1.0, 2.0, 3.0, 4.0], &[2, 2]).transpose(0, 1).unwrap().transpose(0, 1).unwrap();
    let fused = device.computation_mlir().unwrap();
    assert!(!fused.contains("stablehlo.transpose"), "{fused}");
    assert!(device.computation_ir().unwrap().contains("transpose"));
    assert_eq!(round_trip.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
}

#[test]
fn a_rejected_op_records_nothing_and_later_work_still_runs() {
    let device = device();
    let x = tensor(&device, &[1.0, 2.0, 3.0], &[3]);
    let y = x.exp().unwrap();
    assert_eq!(device.pending_ops().unwrap(), 1);
    let wrong = tensor(&device, &[1.0, 2.0], &[2]);
    assert!(y.add(&wrong).is_err());
    assert!(x.matmul(&wrong).is_err());
    assert_eq!(device.pending_ops().unwrap(), 1, "failed ops leave no step behind");
    let z = y.sub(&x.exp().unwrap()).unwrap();
    assert_eq!(z.to_vec::<f32>().unwrap(), vec![0.0; 3]);
    assert_eq!(device.counters().executions, 1);
}

#[test]
fn fresh_input_tensors_of_a_known_shape_reuse_the_compiled_program() {
    // Each step uploads new tensors; their types are interned, so the recorded program is the
    // same structure every step and only the first one compiles.
    let device = device();
    for step in 0..4 {
        let x = tensor(&device, &[step as f32, 1.0, 2.0, 3.0], &[2, 2]);
        let bias = tensor(&device, &[0.5, -0.5], &[2]);
        let y = x.add(&bias).unwrap().relu().unwrap().sum(&[1]).unwrap();
        let expected: Vec<f32> = [[step as f32 + 0.5, 0.5], [2.5, 2.5]]
            .iter()
            .map(|row| row.iter().map(|&v: &f32| v.max(0.0)).sum())
            .collect();
        assert_eq!(y.to_vec::<f32>().unwrap(), expected);
    }
    let counters = device.counters();
    assert_eq!((counters.compiles, counters.cache_hits, counters.executions), (1, 3, 4));
}
