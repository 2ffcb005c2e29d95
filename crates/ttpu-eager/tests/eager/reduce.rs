//! Reductions added for PyTorch parity: `argmax`/`argmin` (first index, NaN as the extreme),
//! `prod`, `var` and `std`, against values computed in `f64`, with negative dims, `keepdim`
//! shapes, integer and bool inputs, and the exact messages of what is refused.

use ttpu_eager::{DType, Tensor};

use crate::common::{assert_close, assert_close_f64, device, message, tensor, widen};

#[test]
fn argmax_and_argmin_take_the_first_extreme_with_nan_as_the_extreme() {
    let device = device();
    let x = tensor(&device, &[1.0, 3.0, 3.0, 0.0, f32::NAN, 2.0, f32::NAN, 5.0], &[2, 4]);
    let indices =
        |res: Tensor| -> (DType, Vec<i64>, Vec<i64>) { (res.dtype(), res.dims(), res.to_vec::<i64>().unwrap()) };
    // Ties give the first index; a NaN in a row is its maximum and its minimum, as in PyTorch.
    assert_eq!(indices(x.argmax(Some(-1)).unwrap()), (DType::I64, vec![2], vec![1, 0]));
    assert_eq!(indices(x.argmin(Some(1)).unwrap()), (DType::I64, vec![2], vec![3, 0]));
    assert_eq!(indices(x.argmax(Some(0)).unwrap()), (DType::I64, vec![4], vec![1, 0, 1, 1]));
    assert_eq!(indices(x.argmin(Some(-2)).unwrap()), (DType::I64, vec![4], vec![1, 1, 1, 0]));
    assert_eq!(indices(x.argmax_keepdim(Some(1)).unwrap()), (DType::I64, vec![2, 1], vec![1, 0]));
    // Without a dim the tensor is flattened: the first NaN is at flat index 4.
    assert_eq!(indices(x.argmax(None).unwrap()), (DType::I64, vec![], vec![4]));
    assert_eq!(indices(x.argmin_keepdim(None).unwrap()), (DType::I64, vec![1, 1], vec![4]));
    let finite = tensor(&device, &[1.0, 3.0, 3.0, 0.0, -4.0, 2.0, -4.0, 5.0], &[2, 4]);
    assert_eq!(indices(finite.argmin(None).unwrap()), (DType::I64, vec![], vec![4]));

    let ints = Tensor::from_slice(&device, &[4i32, 9, 9, -1], &[4]).unwrap();
    assert_eq!(ints.argmax(Some(0)).unwrap().item::<i64>().unwrap(), 1);
    assert_eq!(ints.argmin(Some(-1)).unwrap().item::<i64>().unwrap(), 3);
    // A rank-0 tensor takes dim 0 or -1 and has index 0.
    let scalar = Tensor::scalar(&device, 5.0f32).unwrap();
    assert_eq!(indices(scalar.argmax(Some(-1)).unwrap()), (DType::I64, vec![], vec![0]));
    assert_eq!(indices(scalar.argmin_keepdim(Some(0)).unwrap()), (DType::I64, vec![], vec![0]));
}

#[test]
fn prod_multiplies_integers_and_bools_as_i64() {
    let device = device();
    let x = tensor(&device, &[1.0, 2.0, 3.0, 4.0, 5.0, -6.0], &[2, 3]);
    assert_eq!(x.prod(&[-1]).unwrap().to_vec::<f32>().unwrap(), vec![6.0, -120.0]);
    assert_eq!(x.prod(&[]).unwrap().item::<f32>().unwrap(), -720.0);
    let kept = x.prod_keepdim(&[0]).unwrap();
    assert_eq!((kept.dims(), kept.to_vec::<f32>().unwrap()), (vec![1, 3], vec![4.0, 10.0, -18.0]));
    let ints = Tensor::from_slice(&device, &[100_000i32, 100_000, 3], &[3]).unwrap().prod(&[0]).unwrap();
    // i64 accumulation: the product overflows i32.
    assert_eq!((ints.dtype(), ints.item::<i64>().unwrap()), (DType::I64, 30_000_000_000));
    let flags = Tensor::from_slice(&device, &[true, true, false, true], &[2, 2]).unwrap().prod(&[1]).unwrap();
    assert_eq!((flags.dtype(), flags.to_vec::<i64>().unwrap()), (DType::I64, vec![1, 0]));
}

/// `(variance, standard deviation)` of `values` with `correction`, in `f64`.
fn variance(values: &[f64], correction: f64) -> (f64, f64) {
    let count = values.len() as f64;
    let mean = values.iter().sum::<f64>() / count;
    let squares: f64 = values.iter().map(|value| (value - mean).powi(2)).sum();
    let variance = squares / (count - correction).max(0.0);
    (variance, variance.sqrt())
}

#[test]
fn var_and_std_match_f64_with_any_correction() {
    let device = device();
    let data = [1.0f32, 2.5, -3.0, 4.0, 0.5, 0.25, 8.0, -1.0];
    let x = tensor(&device, &data, &[2, 4]);
    let x64 = widen(&data);
    let rows: Vec<&[f64]> = x64.chunks(4).collect();
    let columns: Vec<Vec<f64>> = (0..4).map(|column| vec![x64[column], x64[column + 4]]).collect();

    let by_rows: Vec<f64> = rows.iter().map(|row| variance(row, 1.0).0).collect();
    assert_close(&x.var(&[-1], 1.0).unwrap().to_vec::<f32>().unwrap(), &by_rows, 1e-5);
    let biased_columns = x.var_keepdim(&[0], 0.0).unwrap();
    assert_eq!(biased_columns.dims(), vec![1, 4]);
    let expected: Vec<f64> = columns.iter().map(|column| variance(column, 0.0).0).collect();
    assert_close(&biased_columns.to_vec::<f32>().unwrap(), &expected, 1e-5);
    let deviation = x.std(&[], 1.0).unwrap();
    assert_eq!(deviation.dims(), Vec::<i64>::new());
    assert_close(&[deviation.item::<f32>().unwrap()], &[variance(&x64, 1.0).1], 1e-5);
    let kept = x.std_keepdim(&[1, 0], 2.5).unwrap();
    assert_eq!(kept.dims(), vec![1, 1]);
    assert_close(&kept.to_vec::<f32>().unwrap(), &[variance(&x64, 2.5).1], 1e-5);

    // No degrees of freedom left: PyTorch divides by max(n - correction, 0) and gives inf.
    let exhausted = x.var(&[1], 4.0).unwrap().to_vec::<f32>().unwrap();
    assert!(exhausted.iter().all(|value| *value == f32::INFINITY), "{exhausted:?}");
    let wide = Tensor::from_slice(&device, &x64, &[2, 4]).unwrap().std(&[1], 1.0).unwrap();
    let expected: Vec<f64> = rows.iter().map(|row| variance(row, 1.0).1).collect();
    assert_close_f64(&wide.to_vec::<f64>().unwrap(), &expected, 1e-12);
    let half = Tensor::from_slice(&device, &[half::f16::from_f32(1.0), half::f16::from_f32(3.0)], &[2]).unwrap();
    let half_var = half.var(&[0], 1.0).unwrap();
    assert_eq!(
        (half_var.dtype(), half_var.to_vec::<half::f16>().unwrap()),
        (DType::F16, vec![half::f16::from_f32(2.0)])
    );
}

#[test]
fn reduction_refusals_have_exact_messages() {
    let device = device();
    let x = tensor(&device, &[0.0; 6], &[2, 3]);
    let empty = Tensor::zeros(&device, DType::F32, &[2, 0]).unwrap();
    let flags = Tensor::from_slice(&device, &[true, false], &[2]).unwrap();
    let ints = Tensor::from_slice(&device, &[1i64, 2], &[2]).unwrap();
    let scalar = Tensor::scalar(&device, 1.0f32).unwrap();
    device.sync().unwrap();
    let cases = [
        (message(flags.argmax(Some(0))), "`argmax` is not defined for bool"),
        (message(flags.argmin(None)), "`argmin` is not defined for bool"),
        (message(x.argmax(Some(2))), "dim 2 is out of range for a tensor of rank 2"),
        (message(scalar.argmax(Some(1))), "dim 1 is out of range for a tensor of rank 0"),
        (message(empty.argmax(Some(1))), "argmax: cannot reduce an empty dim of shape [2, 0]"),
        (message(empty.argmin(None)), "argmin: cannot reduce an empty dim of shape [2, 0]"),
        (message(ints.var(&[0], 1.0)), "`var` is not defined for i64"),
        (message(flags.std_keepdim(&[], 0.0)), "`std` is not defined for bool"),
        (message(x.var(&[0, -2], 1.0)), "dim 0 appears more than once"),
        (message(x.prod(&[3])), "dim 3 is out of range for a tensor of rank 2"),
    ];
    for (actual, expected) in cases {
        assert_eq!(actual, expected);
    }
    // An empty tensor still has an argmax along a dim that is not empty: one per empty column.
    assert_eq!(empty.argmax(Some(0)).unwrap().dims(), vec![0]);
    assert_eq!(device.pending_ops().unwrap(), 1, "only the last, valid op was recorded");
}
