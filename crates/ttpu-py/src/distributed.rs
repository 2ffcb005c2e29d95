//! The binding of what distributed training on the device needs of `ttpu_device`: collective
//! statistics, the flush log that ranks compare, storage resizing (FSDP frees unsharded
//! parameters between uses), and the single controller's mesh, shardings and the driver's
//! parallel plans.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use ttpu::{Parallelism, Plan, PlanFile};
use ttpu_device::{Collective, DType, Mesh, ReduceKind, Shape, Sharding, TensorType};

use crate::device::{backend, handle_of, tensor_tuple};
use crate::error;

/// Counts a collective of `kind`; `host_bytes` is what its host run moved (`None`: it ran
/// inside a program).
#[pyfunction]
#[pyo3(signature = (kind, host_bytes=None))]
pub(crate) fn device_count_collective(kind: &str, host_bytes: Option<u64>) -> PyResult<()> {
    backend()?.count_collective(kind, host_bytes).map_err(error)
}

/// Runs the collective `kind` (`all_reduce`, `all_gather`, `reduce_scatter`, `all_to_all`,
/// `collective_permute`) inside one program across the replicas `devices`: `handles` are this
/// process's members in replica order, and the results are new device tensors, one per member.
/// `groups` lists replica groups by position in `devices` (default: all of them), `reduce` is
/// `sum`, `product`, `max` or `min`, `pairs` the `(source, target)` replicas of a permute.
/// `label` names the collective in the statistics (`all_gather_into_tensor`, ...; `kind` when
/// `None`). With `in_step` the collective is recorded into the member's pending program, which
/// then runs as one replica of `devices` (one member only).
#[pyfunction]
#[pyo3(signature = (kind, handles, devices, reduce=None, dimension=0, split_dimension=0, concat_dimension=0, groups=None, pairs=None, label=None, in_step=false))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn device_collective<'py>(
    py: Python<'py>,
    kind: &str,
    handles: Vec<Bound<'py, PyAny>>,
    devices: Vec<usize>,
    reduce: Option<&str>,
    dimension: i64,
    split_dimension: i64,
    concat_dimension: i64,
    groups: Option<Vec<Vec<i64>>>,
    pairs: Option<Vec<(i64, i64)>>,
    label: Option<&str>,
    in_step: bool,
) -> PyResult<Bound<'py, PyList>> {
    let tensors = handles.iter().map(handle_of).collect::<PyResult<Vec<_>>>()?;
    let count = i64::try_from(devices.len()).map_err(|_| error("too many devices"))?;
    let groups = groups.unwrap_or_else(|| vec![(0..count).collect()]);
    let reduction = || -> PyResult<ReduceKind> {
        Ok(match reduce.unwrap_or("sum") {
            "sum" => ReduceKind::Sum,
            "product" => ReduceKind::Product,
            "max" => ReduceKind::Max,
            "min" => ReduceKind::Min,
            other => {
                return Err(error(format!("ttpu: reduction `{other}` has no collective (sum, product, max, min)")));
            }
        })
    };
    let collective = match kind {
        "all_reduce" => Collective::AllReduce { kind: reduction()?, groups },
        "all_gather" => Collective::AllGather { dimension, groups },
        "reduce_scatter" => Collective::ReduceScatter { kind: reduction()?, dimension, groups },
        "all_to_all" => Collective::AllToAll { split_dimension, concat_dimension, groups },
        "collective_permute" => Collective::CollectivePermute { pairs: pairs.unwrap_or_default() },
        other => return Err(error(format!("ttpu: `{other}` is not a collective"))),
    };
    let backend = backend()?;
    let label = label.unwrap_or(kind);
    let results = py.detach(|| backend.collective(label, &tensors, &collective, &devices, in_step)).map_err(error)?;
    let items = results.into_iter().map(|tensor| tensor_tuple(py, tensor)).collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}

/// The runtime's index of device `index`: global in a job of several processes, where the
/// replicas of a collective program name devices this way.
#[pyfunction]
pub(crate) fn device_runtime_index(index: usize) -> PyResult<usize> {
    backend()?.runtime_index(index).map_err(error)
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

/// Runs device `index`'s programs over the mesh `mesh` (`"dp=2,tp=4"`) laid on `devices`.
#[pyfunction]
pub(crate) fn device_set_mesh(py: Python<'_>, index: usize, mesh: &str, devices: Vec<usize>) -> PyResult<()> {
    let mesh = Mesh::parse(mesh).map_err(|refused| error(refused.message))?;
    let backend = backend()?;
    py.detach(|| backend.set_mesh(index, mesh, devices)).map_err(error)
}

/// Lays the tensor's storage out over its mesh: per dim, the mesh axes it is split over.
#[pyfunction]
pub(crate) fn device_mark_sharding(py: Python<'_>, handle: &Bound<'_, PyAny>, dims: Vec<Vec<String>>) -> PyResult<()> {
    let tensor = handle_of(handle)?;
    let backend = backend()?;
    py.detach(|| backend.mark_sharding(&tensor, &Sharding { dims })).map_err(error)
}

/// The tensor's layout over its mesh (per dim, its axes), `None` on one device.
#[pyfunction]
pub(crate) fn device_sharding(handle: &Bound<'_, PyAny>) -> PyResult<Option<Vec<Vec<String>>>> {
    let sharding = backend()?.sharding_of(&handle_of(handle)?).map_err(error)?;
    Ok(sharding.map(|sharding| sharding.dims))
}

/// Bytes device `index`'s values hold on each device of its mesh.
#[pyfunction]
pub(crate) fn device_resident_bytes(index: usize) -> PyResult<Vec<u64>> {
    backend()?.resident_bytes(index).map_err(error)
}

/// The placement the driver's plan gives a weight (`kind` `"weight"`) or an input (`"input"`)
/// named `name` of `dtype` and `shape` over `mesh`: per dim, the mesh axes it is split over.
/// `plan` is `"ddp"`, `"fsdp"` or a plan file's text (the format of `ttpu run --plan`).
#[pyfunction]
pub(crate) fn plan_placement(
    mesh: &str,
    plan: &str,
    kind: &str,
    name: &str,
    dtype: &str,
    shape: Vec<i64>,
) -> PyResult<Vec<Vec<String>>> {
    let mesh = Mesh::parse(mesh).map_err(|refused| error(refused.message))?;
    let plan = match plan {
        "ddp" => Plan::Ddp,
        "fsdp" => Plan::Fsdp,
        text => Plan::Explicit(PlanFile::parse(text).map_err(error)?),
    };
    let parallel = Parallelism::new(Some(mesh), None, plan).map_err(error)?;
    let dtype: DType = dtype.parse().map_err(|_| error(format!("unknown dtype `{dtype}`")))?;
    let ty = TensorType::new(dtype, Shape::from_static(&shape));
    let sharding = match kind {
        "weight" => parallel.weight_sharding(name, &ty),
        "input" => parallel.input_sharding(name, &ty),
        other => return Err(error(format!("unknown placement kind `{other}`"))),
    }
    .map_err(error)?;
    Ok(sharding.dims)
}
