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

/// The error message of `result`, which must be an error.
pub fn message<T: std::fmt::Debug>(result: ttpu_eager::Result<T>) -> String {
    result.expect_err("the op must be refused").to_string()
}
