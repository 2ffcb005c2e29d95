//! Elementwise math, rounding, `clamp`, `remainder`, logic, `masked_fill` and activations:
//! values against formulas computed in `f64`, integer and bool inputs where PyTorch takes them,
//! broadcasting, and the exact messages of what is refused.

use ttpu_eager::{DType, Tensor};

use crate::common::{assert_close, assert_close_f64, device, erf_reference, message, tensor, widen};

/// Asserts each element of `actual` is within `relative` of `expected` relative to its own
/// magnitude, so values near zero are held to their own precision too.
fn assert_relative(actual: &[f32], expected: &[f64], relative: f64) {
    assert_eq!(actual.len(), expected.len(), "lengths differ: {actual:?} vs {expected:?}");
    for (index, (&got, &want)) in actual.iter().zip(expected).enumerate() {
        let error = (f64::from(got) - want).abs();
        assert!(error <= relative * want.abs(), "element {index}: {got} vs {want} (all: {actual:?})");
    }
}

fn map(values: &[f64], f: impl Fn(f64) -> f64) -> Vec<f64> {
    values.iter().map(|&value| f(value)).collect()
}

#[test]
fn float_math_matches_f64() {
    let device = device();
    let data = [0.5f32, -1.25, 2.0, 3.5, -0.75, 1e-3];
    let x = tensor(&device, &data, &[2, 3]);
    let x64 = widen(&data);
    let magnitudes: Vec<f64> = map(&x64, f64::abs);
    let cases: Vec<(Tensor, Vec<f64>)> = vec![
        (x.sin().unwrap(), map(&x64, f64::sin)),
        (x.cos().unwrap(), map(&x64, f64::cos)),
        (x.erf().unwrap(), map(&x64, erf_reference)),
        (x.expm1().unwrap(), map(&x64, f64::exp_m1)),
        (x.abs().unwrap().log1p().unwrap(), map(&magnitudes, f64::ln_1p)),
        (x.reciprocal().unwrap(), map(&x64, |value| 1.0 / value)),
        (x.square().unwrap(), map(&x64, |value| value * value)),
    ];
    for (res, expected) in cases {
        assert_eq!((res.dtype(), res.dims()), (DType::F32, vec![2, 3]));
        // A few ulp of each element: `expm1`, `log1p` and `erf` near 1e-3 keep their precision.
        assert_relative(&res.to_vec::<f32>().unwrap(), &expected, 1e-6);
    }
}

#[test]
fn float_math_of_integers_and_bools_gives_f32() {
    let device = device();
    let ints = Tensor::from_slice(&device, &[1i64, -2, 3], &[3]).unwrap();
    let flags = Tensor::from_slice(&device, &[true, false], &[2]).unwrap();
    let cases: Vec<(Tensor, Vec<f64>)> = vec![
        (ints.sin().unwrap(), vec![1f64.sin(), (-2f64).sin(), 3f64.sin()]),
        (ints.reciprocal().unwrap(), vec![1.0, -0.5, 1.0 / 3.0]),
        (ints.expm1().unwrap(), vec![1f64.exp_m1(), (-2f64).exp_m1(), 3f64.exp_m1()]),
        (flags.erf().unwrap(), vec![erf_reference(1.0), 0.0]),
        (flags.cos().unwrap(), vec![1f64.cos(), 1.0]),
    ];
    for (res, expected) in cases {
        assert_eq!(res.dtype(), DType::F32);
        assert_close(&res.to_vec::<f32>().unwrap(), &expected, 1e-6);
    }
}

#[test]
fn erf_has_an_f64_approximation_and_saturates() {
    let device = device();
    let data = [-2.0, -1.5, -1.0, -0.25, 0.0, 1e-8, 0.5, 1.0, 1.0000001, 1.75, 2.0];
    let x = Tensor::from_slice(&device, &data, &[data.len() as i64]).unwrap();
    let res = x.erf().unwrap();
    assert_eq!(res.dtype(), DType::F64);
    assert_close_f64(&res.to_vec::<f64>().unwrap(), &map(&data, erf_reference), 1e-14);
    // Beyond 2 the series loses digits; these are erf(2.5) and erf(3) rounded to f64.
    let tails = Tensor::from_slice(&device, &[-2.5f64, 3.0], &[2]).unwrap().erf().unwrap();
    assert_close_f64(&tails.to_vec::<f64>().unwrap(), &[-0.999_593_047_982_555, 0.999_977_909_503_001_4], 2e-16);

    let edges = tensor(&device, &[-10.0, 10.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 4.5], &[6]);
    let res: Vec<f64> = widen(&edges.erf().unwrap().to_vec::<f32>().unwrap());
    assert_close_f64(&res, &[-1.0, 1.0, f64::NAN, 1.0, -1.0, 1.0], 0.0);
    let wide_edges = Tensor::from_slice(&device, &[-7.0f64, f64::NAN, f64::INFINITY], &[3]).unwrap();
    assert_close_f64(&wide_edges.erf().unwrap().to_vec::<f64>().unwrap(), &[-1.0, f64::NAN, 1.0], 0.0);

    // Half types are computed in f32 and rounded once.
    let half = Tensor::from_slice(&device, &[half::bf16::from_f32(0.75)], &[1]).unwrap().erf().unwrap();
    assert_eq!(half.dtype(), DType::BF16);
    assert_eq!(half.to_vec::<half::bf16>().unwrap(), vec![half::bf16::from_f64(erf_reference(0.75))]);
}

#[test]
fn rounding_is_identity_on_integers_and_half_to_even_on_floats() {
    let device = device();
    let data = [0.5f32, 1.5, 2.5, -0.5, -1.5, -2.6, 2.4, 7.0];
    let x = tensor(&device, &data, &[8]);
    let x64 = widen(&data);
    assert_eq!(widen(&x.round().unwrap().to_vec::<f32>().unwrap()), map(&x64, f64::round_ties_even));
    assert_eq!(widen(&x.floor().unwrap().to_vec::<f32>().unwrap()), map(&x64, f64::floor));
    assert_eq!(widen(&x.ceil().unwrap().to_vec::<f32>().unwrap()), map(&x64, f64::ceil));

    let ints = Tensor::from_slice(&device, &[3i32, -4], &[2]).unwrap();
    let pending = device.pending_ops().unwrap();
    for rounded in [ints.floor().unwrap(), ints.ceil().unwrap(), ints.round().unwrap()] {
        assert_eq!(rounded.dtype(), DType::I32);
        assert_eq!(rounded.to_vec::<i32>().unwrap(), vec![3, -4]);
    }
    assert_eq!(device.pending_ops().unwrap(), pending, "rounding an integer tensor records nothing");
}

#[test]
fn sign_follows_pytorch_for_nan_zero_and_every_dtype() {
    let device = device();
    let x = tensor(&device, &[-2.5, 0.0, -0.0, 3.0, f32::NAN, f32::NEG_INFINITY], &[6]);
    let signs = x.sign().unwrap().to_vec::<f32>().unwrap();
    // PyTorch computes `(0 < x) - (x < 0)`: NaN and -0.0 both give +0.0.
    let bits: Vec<u32> = signs.iter().map(|value| value.to_bits()).collect();
    let expected: Vec<u32> = [-1.0f32, 0.0, 0.0, 1.0, 0.0, -1.0].iter().map(|value| value.to_bits()).collect();
    assert_eq!(bits, expected, "{signs:?}");

    let ints = Tensor::from_slice(&device, &[-5i32, 0, 7], &[3]).unwrap().sign().unwrap();
    assert_eq!((ints.dtype(), ints.to_vec::<i32>().unwrap()), (DType::I32, vec![-1, 0, 1]));
    let bytes = Tensor::from_bytes(&device, DType::U8, &[0, 9, 255], &[3]).unwrap().sign().unwrap();
    assert_eq!(bytes.dtype(), DType::U8);
    assert_eq!(bytes.to_dtype(DType::I64).unwrap().to_vec::<i64>().unwrap(), vec![0, 1, 1]);
    let flags = Tensor::from_slice(&device, &[true, false], &[2]).unwrap().sign().unwrap();
    assert_eq!(flags.to_vec::<bool>().unwrap(), vec![true, false]);
}

#[test]
fn square_keeps_integers_and_promotes_bool_to_i64() {
    let device = device();
    let ints = Tensor::from_slice(&device, &[-3i32, 4], &[2]).unwrap().square().unwrap();
    assert_eq!((ints.dtype(), ints.to_vec::<i32>().unwrap()), (DType::I32, vec![9, 16]));
    // `torch.square` is `pow(x, 2)`, and bool with an integer scalar promotes to i64.
    let flags = Tensor::from_slice(&device, &[true, false], &[2]).unwrap().square().unwrap();
    assert_eq!((flags.dtype(), flags.to_vec::<i64>().unwrap()), (DType::I64, vec![1, 0]));
}

#[test]
fn clamp_promotes_scalar_bounds_like_pytorch() {
    let device = device();
    let x = tensor(&device, &[-2.0, -0.5, 0.5, 3.0, f32::NAN], &[5]);
    let clamped = x.clamp(Some(-1.0f32), Some(1.0f32)).unwrap().to_vec::<f32>().unwrap();
    assert_close_f64(&widen(&clamped), &[-1.0, -0.5, 0.5, 1.0, f64::NAN], 0.0);
    let below = x.clamp(None, Some(0.0f32)).unwrap().to_vec::<f32>().unwrap();
    assert_close_f64(&widen(&below), &[-2.0, -0.5, 0.0, 0.0, f64::NAN], 0.0);
    // With min above max every element becomes max, as in PyTorch.
    let crossed = x.clamp(Some(2.0f32), Some(1.0f32)).unwrap().to_vec::<f32>().unwrap();
    assert_close_f64(&widen(&crossed), &[1.0, 1.0, 1.0, 1.0, f64::NAN], 0.0);

    let ints = Tensor::from_slice(&device, &[-3i64, 0, 5], &[3]).unwrap();
    let int_bounds = ints.clamp(Some(-1i64), Some(2i64)).unwrap();
    assert_eq!((int_bounds.dtype(), int_bounds.to_vec::<i64>().unwrap()), (DType::I64, vec![-1, 0, 2]));
    let float_bound = ints.clamp(Some(0.5f32), None).unwrap();
    assert_eq!((float_bound.dtype(), float_bound.to_vec::<f32>().unwrap()), (DType::F32, vec![0.5, 0.5, 5.0]));
    let half = Tensor::from_slice(&device, &[half::f16::from_f32(4.0)], &[1]).unwrap();
    assert_eq!(half.clamp(None, Some(1.5f64)).unwrap().to_vec::<half::f16>().unwrap(), vec![half::f16::from_f32(1.5)]);
}

#[test]
fn remainder_takes_the_sign_of_the_divisor() {
    let device = device();
    let python = |a: f64, b: f64| a - b * (a / b).floor();
    let lhs = Tensor::from_slice(&device, &[5i64, -5, 5, -5, 0, 7], &[6]).unwrap();
    let rhs = Tensor::from_slice(&device, &[3i64, 3, -3, -3, 2, 7], &[6]).unwrap();
    let ints = lhs.remainder(&rhs).unwrap();
    assert_eq!((ints.dtype(), ints.to_vec::<i64>().unwrap()), (DType::I64, vec![2, 1, -1, -2, 0, 0]));

    let (a, b) = ([5.5f32, -5.5, 5.5, -5.5, 1.0, -0.75], [2.0f32, 2.0, -2.0, -2.0, 0.25, 0.5]);
    let floats = tensor(&device, &a, &[6]).remainder(&tensor(&device, &b, &[6])).unwrap();
    let expected: Vec<f64> = a.iter().zip(&b).map(|(&a, &b)| python(f64::from(a), f64::from(b))).collect();
    assert_close(&floats.to_vec::<f32>().unwrap(), &expected, 0.0);

    // Broadcasting, and scalars promoting like Python numbers.
    let column = tensor(&device, &[7.0, -7.0], &[2, 1]);
    let row = tensor(&device, &[3.0, -3.0, 2.5], &[3]);
    let grid = column.remainder(&row).unwrap();
    assert_eq!(grid.dims(), vec![2, 3]);
    let expected: Vec<f64> = [7.0, -7.0].iter().flat_map(|&a| [3.0, -3.0, 2.5].map(|b| python(a, b))).collect();
    assert_close(&grid.to_vec::<f32>().unwrap(), &expected, 0.0);
    assert_eq!(lhs.remainder_scalar(-3i64).unwrap().to_vec::<i64>().unwrap(), vec![-1, -2, -1, -2, 0, -2]);
    let by_float = lhs.remainder_scalar(2.5f32).unwrap();
    assert_eq!(by_float.dtype(), DType::F32);
    assert_close(&by_float.to_vec::<f32>().unwrap(), &map(&[5.0, -5.0, 5.0, -5.0, 0.0, 7.0], |a| python(a, 2.5)), 0.0);
}

#[test]
fn logical_ops_count_nonzero_as_true() {
    let device = device();
    let x = tensor(&device, &[0.0, -0.0, 2.0, f32::NAN, -1.0, 0.5], &[2, 3]);
    assert_eq!(x.logical_not().unwrap().to_vec::<bool>().unwrap(), vec![true, true, false, false, false, false]);
    let ints = Tensor::from_slice(&device, &[0i32, 3, 0], &[3]).unwrap();
    assert_eq!(ints.logical_not().unwrap().to_vec::<bool>().unwrap(), vec![true, false, true]);
    let flags = Tensor::from_slice(&device, &[true, false, true], &[3]).unwrap();
    assert_eq!(flags.logical_not().unwrap().to_vec::<bool>().unwrap(), vec![false, true, false]);
    // Mixed dtypes broadcast: [2, 3] with [3].
    let both = x.logical_and(&ints).unwrap();
    assert_eq!((both.dtype(), both.dims()), (DType::Bool, vec![2, 3]));
    assert_eq!(both.to_vec::<bool>().unwrap(), vec![false, false, false, false, true, false]);
    let either = x.logical_or(&flags).unwrap();
    assert_eq!(either.to_vec::<bool>().unwrap(), vec![true, false, true, true, true, true]);
}

#[test]
fn masked_fill_broadcasts_and_keeps_the_tensor_dtype() {
    let device = device();
    let x = tensor(&device, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let columns = Tensor::from_slice(&device, &[true, false, true], &[3]).unwrap();
    let filled = x.masked_fill(&columns, f32::MIN).unwrap();
    assert_eq!(filled.to_vec::<f32>().unwrap(), vec![f32::MIN, 2.0, f32::MIN, f32::MIN, 5.0, f32::MIN]);
    // PyTorch's out-of-place masked_fill broadcasts the tensor to the mask too.
    let row = tensor(&device, &[1.0, 2.0, 3.0], &[3]);
    let rows = Tensor::from_slice(&device, &[false, true], &[2, 1]).unwrap();
    let widened = row.masked_fill(&rows, 0.5f64).unwrap();
    assert_eq!(widened.dims(), vec![2, 3]);
    assert_eq!(widened.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 0.5, 0.5, 0.5]);
    let ints = Tensor::from_slice(&device, &[1i64, 2, 3], &[3]).unwrap();
    let truncated = ints.masked_fill(&columns, -2.7f32).unwrap();
    assert_eq!((truncated.dtype(), truncated.to_vec::<i64>().unwrap()), (DType::I64, vec![-2, 2, -2]));
}

#[test]
fn activations_match_f64() {
    let device = device();
    let data = [-3.0f32, -1.25, -0.5, 0.0, 0.5, 1.25, 3.0];
    let x = tensor(&device, &data, &[7]);
    let x64 = widen(&data);
    let gelu = |x: f64| 0.5 * x * (1.0 + erf_reference(x / std::f64::consts::SQRT_2));
    let gelu_tanh = |x: f64| {
        let inner = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
        0.5 * x * (1.0 + inner.tanh())
    };
    let cases: Vec<(Tensor, Vec<f64>)> = vec![
        (x.gelu().unwrap(), map(&x64, gelu)),
        (x.gelu_tanh().unwrap(), map(&x64, gelu_tanh)),
        (x.silu().unwrap(), map(&x64, |x| x / (1.0 + (-x).exp()))),
    ];
    for (res, expected) in cases {
        assert_close(&res.to_vec::<f32>().unwrap(), &expected, 1e-6 * 3.0);
    }
    let wide = Tensor::from_slice(&device, &x64, &[7]).unwrap().gelu().unwrap();
    assert_close_f64(&wide.to_vec::<f64>().unwrap(), &map(&x64, gelu), 1e-14);
    let half = Tensor::from_slice(&device, &[half::bf16::from_f32(1.25)], &[1]).unwrap().silu().unwrap();
    assert_eq!(half.to_vec::<half::bf16>().unwrap(), vec![half::bf16::from_f64(1.25 / (1.0 + (-1.25f64).exp()))]);
}

#[test]
fn log_softmax_matches_f64_along_any_dim() {
    let device = device();
    let data = [1.0f32, 2.0, 3.0, 0.0, -1.0, 120.0];
    let x = tensor(&device, &data, &[2, 3]);
    let log_softmax = |row: &[f64]| -> Vec<f64> {
        let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let log_sum = row.iter().map(|value| (value - max).exp()).sum::<f64>().ln();
        row.iter().map(|value| value - max - log_sum).collect()
    };
    let x64 = widen(&data);
    let by_rows: Vec<f64> = x64.chunks(3).flat_map(log_softmax).collect();
    // The row holding 120 has probabilities below f32's range (e^-120); their logarithms stay
    // finite, where `log(softmax)` would give -inf.
    assert_close(&x.log_softmax(-1).unwrap().to_vec::<f32>().unwrap(), &by_rows, 1e-5);
    let columns: Vec<Vec<f64>> = (0..3).map(|column| log_softmax(&[x64[column], x64[column + 3]])).collect();
    let by_columns: Vec<f64> = (0..2).flat_map(|row| columns.iter().map(move |column| column[row])).collect();
    assert_close(&x.log_softmax(0).unwrap().to_vec::<f32>().unwrap(), &by_columns, 1e-5);
}

#[test]
fn math_refusals_have_exact_messages() {
    let device = device();
    let x = tensor(&device, &[0.0; 6], &[2, 3]);
    let ints = Tensor::from_slice(&device, &[1i64, 2], &[2]).unwrap();
    let flags = Tensor::from_slice(&device, &[true, false], &[2]).unwrap();
    let cases = [
        (message(ints.gelu()), "`gelu` is not defined for i64"),
        (message(ints.gelu_tanh()), "`gelu` is not defined for i64"),
        (message(flags.silu()), "`silu` is not defined for bool"),
        (message(ints.log_softmax(0)), "`log_softmax` is not defined for i64"),
        (message(x.log_softmax(2)), "dim 2 is out of range for a tensor of rank 2"),
        (message(flags.floor()), "`floor` is not defined for bool"),
        (message(flags.round()), "`round` is not defined for bool"),
        (message(x.clamp::<f32>(None, None)), "clamp: at least one of `min` and `max` must be given"),
        (message(flags.clamp(Some(false), None)), "`clamp` is not defined for bool"),
        (message(flags.remainder(&flags)), "`remainder` is not defined for bool"),
        (message(flags.remainder_scalar(true)), "`remainder` is not defined for bool"),
        (message(x.remainder(&ints)), "shapes [2, 3] and [2] cannot be broadcast: size 3 does not match size 2"),
        (message(x.logical_and(&ints)), "shapes [2, 3] and [2] cannot be broadcast: size 3 does not match size 2"),
        (message(x.masked_fill(&ints, 0.0f32)), "`masked_fill mask` is not defined for i64"),
        (
            message(x.masked_fill(&flags, 0.0f32)),
            "shapes [2, 3] and [2] cannot be broadcast: size 3 does not match size 2",
        ),
    ];
    for (actual, expected) in cases {
        assert_eq!(actual, expected);
    }
    assert_eq!(device.pending_ops().unwrap(), 0, "refused ops record nothing");
}
