//! Numerical comparison of outputs with expected outputs (PyTorch's), per output.
//!
//! An element matches when `|actual - expected| <= atol + rtol * |expected|` (numpy's `allclose`),
//! NaN matches NaN, and infinities must be equal. Integer and bool outputs must match exactly.

use crate::{Error, Result};
use ttpu_runtime::{HostTensor, TensorMap};

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
    let exact = !want.dtype.is_float();
    let (rtol, atol) = if exact { (0.0, 0.0) } else { (rtol, atol) };
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
