//! Numerical comparison of outputs with expected outputs (PyTorch's), per output.
//!
//! An element matches when `|actual - expected| <= atol + rtol * |expected|` (numpy's `allclose`),
//! NaN matches NaN, and infinities must be equal. Integer and bool outputs must match exactly.

use crate::{Error, Result};
use ttpu_ir::DType;
use ttpu_runtime::{HostTensor, TensorMap};

/// The relative tolerance of `f64` outputs at most: f32 rounding (about 6e-8) is far outside it,
/// reordered f64 sums (about 1e-15 per term) far inside.
pub const F64_RTOL: f64 = 1e-9;
/// The absolute tolerance of `f64` outputs at most.
pub const F64_ATOL: f64 = 1e-12;

/// The comparison of one output.
#[derive(Clone, Debug, PartialEq)]
pub struct OutputParity {
    /// The output key.
    pub key: String,
    /// Largest absolute error.
    pub max_abs: f64,
    /// Largest relative error `|a - e| / |e|` over elements with `e != 0`.
    pub max_rel: f64,
    /// Row-major index of the element farthest outside tolerance (or of the largest absolute error).
    pub worst_index: Option<Vec<i64>>,
    /// Elements outside tolerance.
    pub mismatched: usize,
    /// Elements compared.
    pub total: usize,
}

impl OutputParity {
    /// Whether every element is within tolerance.
    pub fn ok(&self) -> bool {
        self.mismatched == 0
    }
}

/// Compares every expected tensor with the output of the same key, in the order of `actual`
/// (the model's output order).
pub fn compare(actual: &TensorMap, expected: &TensorMap, rtol: f64, atol: f64) -> Result<Vec<OutputParity>> {
    if let Some(key) = expected.keys().find(|key| !actual.contains_key(*key)) {
        return Err(Error::Parity { key: key.clone(), message: "the model produced no such output".into() });
    }
    if let Some(key) = actual.keys().find(|key| !expected.contains_key(*key)) {
        // An output nothing checks would pass whatever it holds.
        return Err(Error::Parity { key: key.clone(), message: "the expected outputs have no such key".into() });
    }
    let mut res = Vec::with_capacity(expected.len());
    for (key, got) in actual {
        let Some(want) = expected.get(key) else { continue };
        if got.dtype != want.dtype || got.shape != want.shape {
            return Err(Error::Parity {
                key: key.clone(),
                message: format!("expected {}, the model produced {}", want.describe(), got.describe()),
            });
        }
        res.push(compare_tensor(key, got, want, rtol, atol));
    }
    Ok(res)
}

fn compare_tensor(key: &str, got: &HostTensor, want: &HostTensor, rtol: f64, atol: f64) -> OutputParity {
    let (rtol, atol) = match want.dtype {
        dtype if !dtype.is_float() => (0.0, 0.0),
        // An f64 output is held to f64's precision whatever the fixture's tolerance (set for its
        // f32 outputs), so f64 math done in f32 cannot pass.
        DType::F64 => (rtol.min(F64_RTOL), atol.min(F64_ATOL)),
        _ => (rtol, atol),
    };
    compare_within(key, got, want, rtol, atol)
}

/// Compares `got` with `want` element by element within `rtol` and `atol` as given (the
/// tolerances are the caller's choice; `want` may have another dtype than `got`, such as an
/// `f64` reference of an `f32` value).
pub(crate) fn compare_within(key: &str, got: &HostTensor, want: &HostTensor, rtol: f64, atol: f64) -> OutputParity {
    let mut report = OutputParity {
        key: key.to_owned(),
        max_abs: 0.0,
        max_rel: 0.0,
        worst_index: None,
        mismatched: 0,
        total: want.len(),
    };
    let mut worst_excess = f64::NEG_INFINITY;
    for index in 0..want.len() {
        let (a, e) = (got.get_f64(index), want.get_f64(index));
        let (abs, within) = if a.is_nan() || e.is_nan() {
            if a.is_nan() && e.is_nan() { (0.0, true) } else { (f64::INFINITY, false) }
        } else if a.is_infinite() || e.is_infinite() {
            if a == e { (0.0, true) } else { (f64::INFINITY, false) }
        } else {
            let abs = (a - e).abs();
            (abs, abs <= atol + rtol * e.abs())
        };
        if e != 0.0 && e.is_finite() {
            report.max_rel = report.max_rel.max(abs / e.abs());
        }
        report.max_abs = report.max_abs.max(abs);
        let excess = abs - (atol + rtol * e.abs());
        if !within {
            report.mismatched += 1;
        }
        if excess > worst_excess {
            worst_excess = excess;
            report.worst_index = Some(unravel(index, &want.shape));
        }
    }
    report
}

fn unravel(mut index: usize, shape: &[i64]) -> Vec<i64> {
    let mut res = vec![0; shape.len()];
    for (slot, &size) in res.iter_mut().zip(shape).rev() {
        let size = size.max(1) as usize;
        *slot = (index % size) as i64;
        index /= size;
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(dtype: DType, values: &[f64]) -> HostTensor {
        let data = values
            .iter()
            .flat_map(|&value| match dtype {
                DType::F32 => (value as f32).to_le_bytes().to_vec(),
                DType::F64 => value.to_le_bytes().to_vec(),
                DType::I64 => (value as i64).to_le_bytes().to_vec(),
                DType::Bool => vec![u8::from(value != 0.0)],
                other => unreachable!("no test uses {other}"),
            })
            .collect();
        HostTensor::new(dtype, vec![values.len() as i64], data).expect("consistent")
    }

    fn map(entries: &[(&str, HostTensor)]) -> TensorMap {
        entries.iter().map(|(key, tensor)| (key.to_string(), tensor.clone())).collect()
    }

    fn check(dtype: DType, got: &[f64], want: &[f64]) -> OutputParity {
        let reports = compare(&map(&[("y", tensor(dtype, got))]), &map(&[("y", tensor(dtype, want))]), 1e-4, 1e-5)
            .expect("same keys and types");
        reports.into_iter().next().expect("one output")
    }

    #[test]
    fn values_within_tolerance_pass_and_outside_fail() {
        assert!(check(DType::F32, &[1.0, 2.0], &[1.00005, 2.0]).ok());
        let report = check(DType::F32, &[1.0, 2.0], &[1.0, 2.01]);
        assert_eq!((report.ok(), report.mismatched, report.worst_index), (false, 1, Some(vec![1])));
    }

    #[test]
    fn nan_and_infinities_must_agree() {
        assert!(check(DType::F32, &[f64::NAN], &[f64::NAN]).ok());
        assert!(!check(DType::F32, &[f64::NAN], &[1.0]).ok());
        assert!(!check(DType::F32, &[1.0], &[f64::NAN]).ok());
        assert!(check(DType::F32, &[f64::INFINITY], &[f64::INFINITY]).ok());
        assert!(!check(DType::F32, &[f64::INFINITY], &[f64::NEG_INFINITY]).ok());
        assert!(!check(DType::F32, &[f64::INFINITY], &[3.0e38]).ok());
    }

    #[test]
    fn integers_and_bools_compare_exactly() {
        assert!(check(DType::I64, &[7.0, -3.0], &[7.0, -3.0]).ok());
        assert!(!check(DType::I64, &[7.0], &[8.0]).ok());
        assert!(!check(DType::Bool, &[1.0, 0.0], &[1.0, 1.0]).ok());
    }

    #[test]
    fn f64_outputs_are_held_to_f64_precision() {
        // The rounding error of f32 math, inside the fixture's f32 tolerance.
        let in_f32 = f64::from(1.1f32);
        assert!(check(DType::F32, &[in_f32], &[1.1]).ok());
        assert!(!check(DType::F64, &[in_f32], &[1.1]).ok());
        assert!(check(DType::F64, &[1.1 + 1e-15], &[1.1]).ok());
    }

    #[test]
    fn outputs_and_expectations_must_pair_up() {
        let one = tensor(DType::F32, &[1.0]);
        let error = compare(&map(&[("y", one.clone()), ("z", one.clone())]), &map(&[("y", one.clone())]), 1e-4, 1e-5)
            .expect_err("`z` is unchecked");
        assert_eq!(error.to_string(), "output `z`: the expected outputs have no such key");
        let error = compare(&map(&[("y", one.clone())]), &map(&[("y", one.clone()), ("w", one.clone())]), 1e-4, 1e-5)
            .expect_err("`w` is never produced");
        assert_eq!(error.to_string(), "output `w`: the model produced no such output");
        let error = compare(&map(&[("y", one)]), &map(&[("y", tensor(DType::F64, &[1.0]))]), 1e-4, 1e-5)
            .expect_err("dtypes differ");
        assert_eq!(error.to_string(), "output `y`: expected f64[1], the model produced f32[1]");
    }
}
