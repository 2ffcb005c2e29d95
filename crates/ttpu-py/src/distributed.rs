//! The binding of what `torch.distributed` on the device needs of `ttpu_device`: collective
//! statistics, the flush log that ranks compare, and storage resizing (FSDP frees unsharded
//! parameters between uses).

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::device::{backend, handle_of};
use crate::error;

/// Counts a collective of `kind`; `host_bytes` is what its host run moved (`None`: it ran
/// inside a program).
#[pyfunction]
#[pyo3(signature = (kind, host_bytes=None))]
pub(crate) fn device_count_collective(kind: &str, host_bytes: Option<u64>) -> PyResult<()> {
    backend()?.count_collective(kind, host_bytes).map_err(error)
}

/// Counts a call that reached the process-group backend's method `method`.
#[pyfunction]
pub(crate) fn device_count_backend_call(method: &str) -> PyResult<()> {
    backend()?.count_backend_call(method).map_err(error)
}

/// The collective statistics as a dict.
#[pyfunction]
pub(crate) fn device_collective_stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let stats = backend()?.collective_stats().map_err(error)?;
    let dict = PyDict::new(py);
    dict.set_item("recorded", stats.recorded.into_iter().collect::<Vec<_>>().into_pyobject(py)?)?;
    dict.set_item("on_host", stats.on_host)?;
    dict.set_item("host_bytes", stats.host_bytes)?;
    dict.set_item("backend_calls", stats.backend_calls.into_iter().collect::<Vec<_>>().into_pyobject(py)?)?;
    Ok(dict)
}

/// Turns the flush log on or off.
#[pyfunction]
pub(crate) fn device_set_flush_log(enabled: bool) -> PyResult<()> {
    backend()?.set_flush_log(enabled).map_err(error)
}

/// The flushes logged since the last call, as `(number, reason, pending steps)` tuples.
#[pyfunction]
pub(crate) fn device_take_flush_log(py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
    let log = backend()?.take_flush_log().map_err(error)?;
    let items = log
        .into_iter()
        .map(|record| (record.index, record.reason, record.steps).into_pyobject(py))
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}

/// `untyped_storage().resize_(nbytes)` of the tensor's storage: 0 releases it, its own size
/// takes it back.
#[pyfunction]
pub(crate) fn device_storage_resize(handle: &Bound<'_, PyAny>, nbytes: u64) -> PyResult<()> {
    backend()?.resize_storage(&handle_of(handle)?, nbytes).map_err(error)
}
