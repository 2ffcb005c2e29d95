//! Helpers shared by the eager tests: the device, and value comparisons.

use ttpu_eager::{Device, Mode, Tensor};

/// The CPU device; a missing plugin fails the test with the `cargo xtask setup` hint.
pub fn device() -> Device {
    Device::cpu().unwrap_or_else(|error| panic!("{error}"))
}

/// A CPU device in `mode`.
pub fn device_in(mode: Mode) -> Device {
    let device = device();
    device.set_mode(mode).expect("a fresh device has no pending work");
    device
}

/// An f32 tensor of `dims` on `device`.
pub fn tensor(device: &Device, data: &[f32], dims: &[i64]) -> Tensor {
    Tensor::from_slice(device, data, dims).expect("test data matches its dims")
}

/// Asserts every element of `actual` is within `tolerance` of `expected`.
pub fn assert_close(actual: &[f32], expected: &[f64], tolerance: f64) {
    assert_eq!(actual.len(), expected.len(), "lengths differ: {actual:?} vs {expected:?}");
    for (index, (&got, &want)) in actual.iter().zip(expected).enumerate() {
        assert!((f64::from(got) - want).abs() <= tolerance, "element {index}: {got} vs {want} (all: {actual:?})");
    }
}

/// Asserts every element of `actual` is within `tolerance` of `expected`, NaN matching NaN.
pub fn assert_close_f64(actual: &[f64], expected: &[f64], tolerance: f64) {
    assert_eq!(actual.len(), expected.len(), "lengths differ: {actual:?} vs {expected:?}");
    for (index, (&got, &want)) in actual.iter().zip(expected).enumerate() {
        let same_nan = got.is_nan() && want.is_nan();
        assert!(same_nan || (got - want).abs() <= tolerance, "element {index}: {got} vs {want} (all: {actual:?})");
    }
}

/// The values of `data` widened to `f64`, for computing expectations.
pub fn widen(data: &[f32]) -> Vec<f64> {
    data.iter().map(|&value| f64::from(value)).collect()
}

/// The error function in `f64` by its Maclaurin series `2/√π Σ (-1)^n x^(2n+1) / (n! (2n+1))`.
/// Cancellation between its terms (the largest is about 3 for `|x| = 2` and 3500 for `|x| = 3.5`)
/// limits it to about 1e-15 for `|x| <= 2` and 1e-11 for `|x| <= 4`.
pub fn erf_reference(x: f64) -> f64 {
    assert!(x.abs() <= 4.0, "the series is not accurate enough beyond |x| = 4, found {x}");
    let mut power = x;
    let mut sum = 0.0;
    for n in 0..120 {
        // power = (-1)^n x^(2n+1) / n!
        sum += power / f64::from(2 * n + 1);
        power *= -x * x / f64::from(n + 1);
    }
    sum * std::f64::consts::FRAC_2_SQRT_PI
}

/// The error message of `result`, which must be an error.
pub fn message<T: std::fmt::Debug>(result: ttpu_eager::Result<T>) -> String {
    result.expect_err("the op must be refused").to_string()
}
