//! Random ops on the CPU plugin: every case under `fixtures/random/` (real exports written by
//! `fixtures/export_random.py`) runs, and what it draws is checked statistically, never bit for
//! bit: shapes and dtypes, ranges, mean and variance of 10,000 samples within about five standard
//! errors, permutation validity, dropout's zero fraction and scale. Seeds are checked too: one
//! seed always gives the same numbers, another gives other ones.

mod common;

use ttpu::{CompileOptions, HostTensor, Session, TensorMap};
use ttpu_ir::DType;

/// `x`: ones of `dtype` and `shape` (the cases that take an input only read its shape, dtype or
/// value as a probability or mean of one).
fn ones(dtype: DType, shape: &[i64]) -> HostTensor {
    let count: i64 = shape.iter().product();
    let mut data = Vec::new();
    for _ in 0..count {
        ttpu_ir::Scalar::Float(1.0).to_bytes(dtype, &mut data);
    }
    HostTensor { dtype, shape: shape.to_vec(), data }
}

/// Runs `fixtures/random/<name>/model.fx` on `inputs` in `session`.
fn run_in(session: &Session, name: &str, inputs: &[(&str, HostTensor)]) -> Vec<HostTensor> {
    let path = common::fixtures_dir().join("random").join(name).join("model.fx");
    let source = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    let model = session
        .load_model(&source, &format!("fixtures/random/{name}/model.fx"))
        .unwrap_or_else(|error| panic!("{name}: {error}"));
    let inputs: TensorMap = inputs.iter().map(|(key, tensor)| ((*key).to_owned(), tensor.clone())).collect();
    let outputs = session.run(&model, &TensorMap::new(), &inputs).unwrap_or_else(|error| panic!("{name}: {error}"));
    outputs.into_values().collect()
}

fn run(name: &str, inputs: &[(&str, HostTensor)]) -> Vec<HostTensor> {
    run_in(common::session(), name, inputs)
}

/// The single output of a case, checked for dtype and shape, as `f64`s.
fn values(output: &HostTensor, dtype: DType, shape: &[i64]) -> Vec<f64> {
    assert_eq!((output.dtype, output.shape.as_slice()), (dtype, shape));
    (0..output.len()).map(|index| output.get_f64(index)).collect()
}

fn mean(samples: &[f64]) -> f64 {
    samples.iter().sum::<f64>() / samples.len() as f64
}

fn variance(samples: &[f64]) -> f64 {
    let m = mean(samples);
    samples.iter().map(|value| (value - m).powi(2)).sum::<f64>() / (samples.len() - 1) as f64
}

/// Checks `samples` look like `U(low, high)`: inside `[low, high)`, reaching both ends, with the
/// right mean and variance. For 10,000 samples the standard error of the mean is
/// `(high - low) * 0.0029` and that of the variance about `(high - low)² * 0.00075`.
fn assert_uniform(samples: &[f64], low: f64, high: f64) {
    let width = high - low;
    assert!(samples.iter().all(|value| (low..high).contains(value)), "a sample outside [{low}, {high})");
    let (min, max) = samples.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    assert!(min < low + 0.01 * width && max > high - 0.01 * width, "range [{min}, {max}]");
    let (m, v) = (mean(samples), variance(samples));
    assert!((m - (low + high) / 2.0).abs() < 0.015 * width, "mean {m}");
    assert!((v - width * width / 12.0).abs() < 0.004 * width * width, "variance {v}");
}

/// Checks `samples` look like `N(mu, sigma²)`: mean, variance and the share within one sigma
/// (68.27%). Standard errors for 10,000 samples: `0.01 sigma` for the mean, `0.014 sigma²` for
/// the variance, 0.0047 for the share.
fn assert_normal(samples: &[f64], mu: f64, sigma: f64) {
    let (m, v) = (mean(samples), variance(samples));
    assert!((m - mu).abs() < 0.05 * sigma, "mean {m}");
    assert!((v - sigma * sigma).abs() < 0.07 * sigma * sigma, "variance {v}");
    let within = samples.iter().filter(|value| (*value - mu).abs() < sigma).count() as f64 / samples.len() as f64;
    assert!((within - 0.6827).abs() < 0.025, "{within} within one sigma");
    assert!(samples.iter().all(|value| value.is_finite()));
}

#[test]
fn rand_is_uniform_on_the_unit_interval() {
    let out = run("rand", &[]);
    assert_uniform(&values(&out[0], DType::F32, &[100, 100]), 0.0, 1.0);
    let out = run("rand_bf16", &[]);
    let samples = values(&out[0], DType::BF16, &[100, 100]);
    assert_uniform(&samples, 0.0, 1.0);
    // bf16 holds 8 significant bits: every sample is a multiple of 2^-8.
    assert!(samples.iter().all(|value| (value * 256.0).fract() == 0.0));
    let out = run("rand_like_f64", &[("x", ones(DType::F64, &[100, 100]))]);
    assert_uniform(&values(&out[0], DType::F64, &[100, 100]), 0.0, 1.0);
}

#[test]
fn randn_is_standard_normal() {
    let out = run("randn", &[]);
    assert_normal(&values(&out[0], DType::F32, &[100, 100]), 0.0, 1.0);
    let out = run("randn_like_f16", &[("x", ones(DType::F16, &[100, 100]))]);
    assert_normal(&values(&out[0], DType::F16, &[100, 100]), 0.0, 1.0);
}

#[test]
fn randint_covers_its_range_evenly() {
    let out = run("randint", &[]);
    let samples = values(&out[0], DType::I64, &[100, 100]);
    // Seven values, 1,428.6 expected each with a standard deviation of 35.
    for value in 3..10 {
        let count = samples.iter().filter(|&&sample| sample == f64::from(value)).count();
        assert!((count as f64 - 10_000.0 / 7.0).abs() < 180.0, "{count} samples of {value}");
    }
    assert!(samples.iter().all(|&sample| (3.0..10.0).contains(&sample) && sample.fract() == 0.0));
    let out = run("randint_like", &[("x", ones(DType::F32, &[100, 100]))]);
    let samples = values(&out[0], DType::F32, &[100, 100]);
    assert!(samples.iter().all(|&sample| (0.0..10.0).contains(&sample) && sample.fract() == 0.0));
    assert!((mean(&samples) - 4.5).abs() < 0.15, "mean {}", mean(&samples));
}

#[test]
fn randperm_is_a_permutation() {
    let out = run("randperm", &[]);
    let samples = values(&out[0], DType::I64, &[50]);
    let mut sorted: Vec<i64> = samples.iter().map(|&value| value as i64).collect();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..50).collect::<Vec<_>>());
    // Shuffled: a uniform permutation of 50 leaves about one element in place.
    let fixed = samples.iter().enumerate().filter(|&(index, &value)| value == index as f64).count();
    assert!(fixed < 8, "{fixed} fixed points: {samples:?}");
}

#[test]
fn dropout_zeroes_p_and_scales_the_rest() {
    let out = run("dropout", &[("x", ones(DType::F32, &[100, 100]))]);
    let samples = values(&out[0], DType::F32, &[100, 100]);
    let zeros = samples.iter().filter(|&&value| value == 0.0).count() as f64 / 10_000.0;
    // p = 0.3; the standard error of the share is 0.0046.
    assert!((zeros - 0.3).abs() < 0.023, "{zeros} dropped");
    let scale = f64::from(1.0f32 / 0.7f32);
    assert!(samples.iter().all(|&value| value == 0.0 || (value - scale).abs() < 1e-6), "kept values are 1/(1-p)");
}

#[test]
fn bernoulli_hits_with_its_probability() {
    let out = run("bernoulli_p", &[("x", ones(DType::F32, &[100, 100]))]);
    let samples = values(&out[0], DType::F32, &[100, 100]);
    assert!(samples.iter().all(|&value| value == 0.0 || value == 1.0));
    assert!((mean(&samples) - 0.3).abs() < 0.023, "mean {}", mean(&samples));
    // Probabilities of one always hit.
    let out = run("bernoulli_probs", &[("x", ones(DType::F32, &[100, 100]))]);
    assert!(values(&out[0], DType::F32, &[100, 100]).iter().all(|&value| value == 1.0));
}

#[test]
fn uniform_normal_and_exponential_fill_their_input_shape() {
    let x = || ("x", ones(DType::F32, &[100, 100]));
    let out = run("uniform", &[x()]);
    assert_uniform(&values(&out[0], DType::F32, &[100, 100]), -2.0, 3.0);
    let out = run("normal", &[x()]);
    assert_normal(&values(&out[0], DType::F32, &[100, 100]), 2.0, 3.0);
    // torch.normal(x, 2.0) with x all ones.
    let out = run("normal_tensor_mean", &[x()]);
    assert_normal(&values(&out[0], DType::F32, &[100, 100]), 1.0, 2.0);
    // Exponential with rate 2: mean and standard deviation 1/2, median ln(2)/2.
    let out = run("exponential", &[x()]);
    let samples = values(&out[0], DType::F32, &[100, 100]);
    assert!(samples.iter().all(|&value| value >= 0.0 && value.is_finite()));
    assert!((mean(&samples) - 0.5).abs() < 0.025, "mean {}", mean(&samples));
    assert!((variance(&samples) - 0.25).abs() < 0.03, "variance {}", variance(&samples));
    let below_median = samples.iter().filter(|&&value| value < std::f64::consts::LN_2 / 2.0).count() as f64 / 1e4;
    assert!((below_median - 0.5).abs() < 0.025, "{below_median} below the median");
}

#[test]
fn rrelu_in_training_scales_by_uniform_slopes() {
    // F.rrelu(-x, 0.1, 0.3, training=True) with x all ones: every input is -1, so the result is
    // minus a slope drawn from U(0.1, 0.3).
    let out = run("rrelu_train", &[("x", ones(DType::F32, &[100, 100]))]);
    let slopes: Vec<f64> = values(&out[0], DType::F32, &[100, 100]).iter().map(|value| -value).collect();
    assert_uniform(&slopes, 0.1, 0.3);
}

#[test]
fn draws_are_independent_and_fixed_by_the_seed() {
    let out = run("two_draws", &[]);
    let a = values(&out[0], DType::F32, &[100, 100]);
    let b = values(&out[1], DType::F32, &[100, 100]);
    // Two draws in one graph are different streams: uncorrelated (standard error 0.01).
    let (ma, mb) = (mean(&a), mean(&b));
    let covariance = a.iter().zip(&b).map(|(x, y)| (x - ma) * (y - mb)).sum::<f64>() / 1e4;
    let correlation = covariance / (variance(&a) * variance(&b)).sqrt();
    assert!(correlation.abs() < 0.05, "correlation {correlation}");
    // The same seed gives the same numbers on every run; another seed gives other numbers.
    assert_eq!(run("two_draws", &[])[0], out[0]);
    let mut seeded = Session::from_plugin_or_default(None).unwrap_or_else(|error| panic!("{error}"));
    seeded.set_compile_options(CompileOptions { seed: 1, ..CompileOptions::default() });
    let other = run_in(&seeded, "two_draws", &[]);
    assert_ne!(other[0], out[0]);
    assert_uniform(&values(&other[0], DType::F32, &[100, 100]), 0.0, 1.0);
}
