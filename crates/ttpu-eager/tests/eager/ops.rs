//! Op semantics: values against formulas computed in f64, PyTorch promotion and broadcasting,
//! and the exact messages of shape errors.

use ttpu_eager::{DType, Device, Tensor};

use crate::common::{assert_close, device, message, tensor};

fn softmax_rows(rows: &[&[f64]]) -> Vec<f64> {
    let mut res = vec![];
    for row in rows {
        let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = row.iter().map(|value| (value - max).exp()).sum();
        res.extend(row.iter().map(|value| (value - max).exp() / sum));
    }
    res
}

#[test]
fn softmax_matches_the_formula() {
    let device = device();
    let x = tensor(&device, &[1.0, 2.0, 3.0, 0.0, -1.0, 4.0], &[2, 3]);
    let expected = softmax_rows(&[&[1.0, 2.0, 3.0], &[0.0, -1.0, 4.0]]);
    assert_close(&x.softmax(-1).unwrap().to_vec::<f32>().unwrap(), &expected, 1e-6);
    let by_columns = softmax_rows(&[&[1.0, 0.0], &[2.0, -1.0], &[3.0, 4.0]]);
    let transposed = x.softmax(0).unwrap().transpose(0, 1).unwrap();
    assert_close(&transposed.to_vec::<f32>().unwrap(), &by_columns, 1e-6);
}

#[test]
fn layer_norm_matches_the_formula() {
    let device = device();
    let data = [1.0f32, 2.0, 3.0, 4.0, -2.0, 0.5, 0.25, 8.0];
    let weight_data = [1.0f32, 0.5, 2.0, -1.0];
    let bias_data = [0.0f32, 0.1, -0.2, 0.3];
    let x = tensor(&device, &data, &[2, 4]);
    let weight = tensor(&device, &weight_data, &[4]);
    let bias = tensor(&device, &bias_data, &[4]);
    let eps = 1e-5;
    let mut expected = vec![];
    for row in data.chunks(4) {
        let row: Vec<f64> = row.iter().map(|&value| f64::from(value)).collect();
        let mean = row.iter().sum::<f64>() / 4.0;
        let variance = row.iter().map(|value| (value - mean).powi(2)).sum::<f64>() / 4.0;
        for (index, value) in row.iter().enumerate() {
            let normalized = (value - mean) / (variance + eps).sqrt();
            expected.push(normalized * f64::from(weight_data[index]) + f64::from(bias_data[index]));
        }
    }
    let res = x.layer_norm(&[4], Some(&weight), Some(&bias), eps).unwrap();
    assert_close(&res.to_vec::<f32>().unwrap(), &expected, 1e-6);
    let plain = x.layer_norm(&[2, 4], None, None, eps).unwrap();
    let all: Vec<f64> = data.iter().map(|&value| f64::from(value)).collect();
    let mean = all.iter().sum::<f64>() / 8.0;
    let variance = all.iter().map(|value| (value - mean).powi(2)).sum::<f64>() / 8.0;
    let expected: Vec<f64> = all.iter().map(|value| (value - mean) / (variance + eps).sqrt()).collect();
    assert_close(&plain.to_vec::<f32>().unwrap(), &expected, 1e-6);
}

#[test]
fn elementwise_ops_match_f64() {
    let device = device();
    let values = [0.5f32, -1.25, 2.0, 3.5];
    let x = tensor(&device, &values, &[4]);
    let x64: Vec<f64> = values.iter().map(|&value| f64::from(value)).collect();
    let cases: Vec<(Tensor, Vec<f64>)> = vec![
        (x.exp().unwrap(), x64.iter().map(|value| value.exp()).collect()),
        (x.tanh().unwrap(), x64.iter().map(|value| value.tanh()).collect()),
        (x.sigmoid().unwrap(), x64.iter().map(|value| 1.0 / (1.0 + (-value).exp())).collect()),
        (x.relu().unwrap(), x64.iter().map(|value| value.max(0.0)).collect()),
        (x.abs().unwrap().sqrt().unwrap(), x64.iter().map(|value| value.abs().sqrt()).collect()),
        (x.abs().unwrap().log().unwrap(), x64.iter().map(|value| value.abs().ln()).collect()),
        (x.neg().unwrap(), x64.iter().map(|value| -value).collect()),
        (x.pow_scalar(2.0f32).unwrap(), x64.iter().map(|value| value * value).collect()),
        (x.div_scalar(4.0f32).unwrap(), x64.iter().map(|value| value / 4.0).collect()),
        (x.sub_scalar(1.0f32).unwrap(), x64.iter().map(|value| value - 1.0).collect()),
    ];
    for (res, expected) in cases {
        let scale = expected.iter().fold(1.0f64, |acc, value| acc.max(value.abs()));
        assert_close(&res.to_vec::<f32>().unwrap(), &expected, 1e-6 * scale);
    }
}

#[test]
fn reductions_and_matmul() {
    let device = device();
    let x = tensor(&device, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    assert_eq!(x.sum(&[1]).unwrap().to_vec::<f32>().unwrap(), vec![6.0, 15.0]);
    let kept = x.sum_keepdim(&[0]).unwrap();
    assert_eq!(kept.dims(), vec![1, 3]);
    assert_eq!(kept.to_vec::<f32>().unwrap(), vec![5.0, 7.0, 9.0]);
    assert_eq!(x.sum(&[]).unwrap().item::<f32>().unwrap(), 21.0);
    assert_eq!(x.mean(&[-1]).unwrap().to_vec::<f32>().unwrap(), vec![2.0, 5.0]);
    assert_eq!(x.max(&[0]).unwrap().to_vec::<f32>().unwrap(), vec![4.0, 5.0, 6.0]);
    assert_eq!(x.max_keepdim(&[1]).unwrap().dims(), vec![2, 1]);
    assert_eq!(x.min(&[1]).unwrap().to_vec::<f32>().unwrap(), vec![1.0, 4.0]);
    assert_eq!(x.min_keepdim(&[1]).unwrap().squeeze_dim(1).unwrap().dims(), vec![2]);

    let weights = tensor(&device, &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2]);
    let product = x.matmul(&weights).unwrap();
    assert_eq!(product.dims(), vec![2, 2]);
    assert_eq!(product.to_vec::<f32>().unwrap(), vec![4.0, 5.0, 10.0, 11.0]);
    let batched = x.reshape(&[2, 1, 3]).unwrap().matmul(&weights).unwrap();
    assert_eq!(batched.dims(), vec![2, 1, 2]);
    assert_eq!(batched.to_vec::<f32>().unwrap(), vec![4.0, 5.0, 10.0, 11.0]);
    let vector = tensor(&device, &[1.0, 1.0, 1.0], &[3]);
    assert_eq!(x.matmul(&vector).unwrap().to_vec::<f32>().unwrap(), vec![6.0, 15.0]);

    let ints = Tensor::from_slice(&device, &[1i32, 2, 3], &[3]).unwrap();
    let total = ints.sum(&[0]).unwrap();
    assert_eq!(total.dtype(), DType::I64);
    assert_eq!(total.item::<i64>().unwrap(), 6);
}

#[test]
fn layout_ops() {
    let device = device();
    let x = tensor(&device, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    assert_eq!(x.transpose(0, 1).unwrap().to_vec::<f32>().unwrap(), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    assert_eq!(x.reshape(&[3, -1]).unwrap().dims(), vec![3, 2]);
    assert_eq!(x.unsqueeze(-1).unwrap().dims(), vec![2, 3, 1]);
    assert_eq!(x.slice(1, 1, 100, 1).unwrap().to_vec::<f32>().unwrap(), vec![2.0, 3.0, 5.0, 6.0]);
    assert_eq!(x.slice(1, -3, 3, 2).unwrap().to_vec::<f32>().unwrap(), vec![1.0, 3.0, 4.0, 6.0]);
    let ones = Tensor::full(&device, 1i64, &[2, 1]).unwrap();
    let joined = Tensor::cat(&[&x, &ones], 1).unwrap();
    assert_eq!(joined.dtype(), DType::F32);
    assert_eq!(joined.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 1.0, 4.0, 5.0, 6.0, 1.0]);
    let permuted = x.reshape(&[1, 2, 3]).unwrap().permute(&[2, 0, 1]).unwrap();
    assert_eq!(permuted.dims(), vec![3, 1, 2]);
    assert_eq!(
        x.broadcast_to(&[2, 2, 3]).unwrap().sum(&[0]).unwrap().to_vec::<f32>().unwrap(),
        vec![2.0, 4.0, 6.0, 8.0, 10.0, 12.0]
    );
}

#[test]
fn comparisons_and_where() {
    let device = device();
    let x = tensor(&device, &[1.0, -2.0, 3.0], &[3]);
    let positive = x.gt_scalar(0i64).unwrap();
    assert_eq!(positive.dtype(), DType::Bool);
    assert_eq!(positive.to_vec::<bool>().unwrap(), vec![true, false, true]);
    let zero = Tensor::scalar(&device, 0.0f32).unwrap();
    assert_eq!(positive.where_(&x, &zero).unwrap().to_vec::<f32>().unwrap(), vec![1.0, 0.0, 3.0]);
    let y = tensor(&device, &[1.0, 2.0, 0.0], &[3]);
    assert_eq!(x.eq(&y).unwrap().to_vec::<bool>().unwrap(), vec![true, false, false]);
    assert_eq!(x.le(&y).unwrap().to_vec::<bool>().unwrap(), vec![true, true, false]);
    assert_eq!(x.lt_scalar(3.0f32).unwrap().to_vec::<bool>().unwrap(), vec![true, true, false]);
    assert_eq!(x.ge_scalar(1i64).unwrap().to_vec::<bool>().unwrap(), vec![true, false, true]);
    assert_eq!(x.ne_scalar(-2.0f32).unwrap().to_vec::<bool>().unwrap(), vec![true, false, true]);
    let counts = x.le_scalar(1.0f32).unwrap().sum(&[]).unwrap();
    assert_eq!((counts.dtype(), counts.item::<i64>().unwrap()), (DType::I64, 2));
}

#[test]
fn promotion_follows_pytorch() {
    let device = device();
    let ints = Tensor::from_slice(&device, &[1i64, 2, 3], &[3]).unwrap();
    let res = ints.add_scalar(0.5f32).unwrap();
    assert_eq!(res.dtype(), DType::F32);
    assert_eq!(res.to_vec::<f32>().unwrap(), vec![1.5, 2.5, 3.5]);
    // An integer scalar keeps the tensor's integer type; a float tensor ignores an f64 scalar's width.
    assert_eq!(ints.mul_scalar(2i64).unwrap().dtype(), DType::I64);
    let floats = tensor(&device, &[1.0, 2.0], &[2]);
    assert_eq!(floats.add_scalar(1.0f64).unwrap().dtype(), DType::F32);
    // A zero-dim tensor does not widen a dimensioned one of the same category.
    let wide = Tensor::scalar(&device, 2.0f64).unwrap();
    assert_eq!(floats.mul(&wide).unwrap().dtype(), DType::F32);
    let small = Tensor::from_slice(&device, &[1i32, 2], &[2]).unwrap();
    assert_eq!(small.add(&ints.slice(0, 0, 2, 1).unwrap()).unwrap().dtype(), DType::I64);
    let divided = ints.div_scalar(2i64).unwrap();
    assert_eq!(divided.dtype(), DType::F32);
    assert_eq!(divided.to_vec::<f32>().unwrap(), vec![0.5, 1.0, 1.5]);
    let half = Tensor::from_slice(&device, &[half::f16::from_f32(1.5)], &[1]).unwrap();
    let brain = Tensor::from_slice(&device, &[half::bf16::from_f32(2.0)], &[1]).unwrap();
    assert_eq!(half.add(&brain).unwrap().to_vec::<f32>().unwrap(), vec![3.5]);
}

#[test]
fn broadcasting_follows_numpy() {
    let device = device();
    let column = tensor(&device, &[1.0, 2.0], &[2, 1]);
    let row = tensor(&device, &[10.0, 20.0, 30.0], &[3]);
    let sum = column.add(&row).unwrap();
    assert_eq!(sum.dims(), vec![2, 3]);
    assert_eq!(sum.to_vec::<f32>().unwrap(), vec![11.0, 21.0, 31.0, 12.0, 22.0, 32.0]);
}

#[test]
fn shape_errors_have_exact_messages() {
    let device = device();
    let x = tensor(&device, &[0.0; 6], &[2, 3]);
    let y = tensor(&device, &[0.0; 4], &[4]);
    let cases = [
        (message(x.add(&y)), "shapes [2, 3] and [4] cannot be broadcast: size 3 does not match size 4"),
        (message(x.matmul(&x)), "matmul: shapes [2, 3] and [2, 3] cannot be multiplied"),
        (message(x.sum(&[2])), "dim 2 is out of range for a tensor of rank 2"),
        (message(x.sum(&[1, -1])), "dim 1 appears more than once"),
        (message(x.reshape(&[4, -1])), "cannot reshape [2, 3] into [4, -1]"),
        (message(x.permute(&[0, 0])), "[0, 0] is not a permutation of the dims of a tensor of rank 2"),
        (message(Tensor::from_slice(&device, &[1.0f32; 5], &[2, 3])), "shape [2, 3] needs 6 elements, found 5"),
        (message(x.to_vec::<i64>()), "tensor holds f32, not i64"),
        (message(x.item::<f32>()), "item: tensor of shape [2, 3] does not hold exactly one element"),
        (message(x.gt(&x).unwrap().neg()), "`neg` is not defined for bool"),
        (message(Tensor::cat(&[&x, &y], 0)), "cat: shapes [2, 3] and [4] differ outside dim 0"),
        (message(x.layer_norm(&[2], None, None, 1e-5)), "layer_norm: normalized shape [2] does not fit shape [2, 3]"),
        (message(x.slice(0, 0, 1, 0)), "slice step must be positive, found 0"),
    ];
    for (actual, expected) in cases {
        assert_eq!(actual, expected);
    }
    let other = crate::common::device();
    let foreign = tensor(&other, &[0.0; 6], &[2, 3]);
    assert_eq!(message(x.add(&foreign)), "tensors live on different devices");
}

#[test]
fn missing_plugin_fails_with_the_setup_hint() {
    let error = Device::from_plugin("/nonexistent/pjrt_c_api_cpu_plugin.so").unwrap_err();
    assert_eq!(
        error.to_string(),
        "no pjrt plugin found at /nonexistent/pjrt_c_api_cpu_plugin.so: run `cargo xtask setup` or set TTPU_PJRT_PLUGIN"
    );
}

#[test]
fn tensors_load_from_safetensors_bytes() {
    use safetensors::{Dtype, tensor::TensorView};
    let device = device();
    let weights: Vec<u8> = [1.0f32, -2.0, 3.5, 4.0].iter().flat_map(|value| value.to_le_bytes()).collect();
    let steps: Vec<u8> = [7i64].iter().flat_map(|value| value.to_le_bytes()).collect();
    let views = vec![
        ("weight", TensorView::new(Dtype::F32, vec![2, 2], &weights).unwrap()),
        ("step", TensorView::new(Dtype::I64, vec![], &steps).unwrap()),
    ];
    let bytes = safetensors::serialize(views, None).unwrap();
    let tensors = Tensor::from_safetensors(&device, &bytes).unwrap();
    let names: Vec<&str> = tensors.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["step", "weight"]);
    assert_eq!(tensors[0].1.item::<i64>().unwrap(), 7);
    assert_eq!(tensors[1].1.dims(), vec![2, 2]);
    assert_eq!(tensors[1].1.to_vec::<f32>().unwrap(), vec![1.0, -2.0, 3.5, 4.0]);
    assert!(message(Tensor::from_safetensors(&device, b"garbage")).starts_with("safetensors: "));
}
