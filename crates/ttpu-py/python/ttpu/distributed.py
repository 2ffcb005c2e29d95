"""``ttpu.distributed``: distributed training on the ttpu device.

Several processes (one per device or host, launched by ``torchrun`` or ``ttpu launch``) use
PyTorch's own APIs: ``dist.init_process_group("ttpu")``, then DDP, FSDP2 ``fully_shard`` or
tensor parallelism, unchanged from CUDA but for the device name (see ``ttpu._distributed``);
:func:`set_debug` compares the ranks' flushes.

One process can also drive every device it has (single controller), as the ``.fx`` path's
``--parallel`` and ``--plan`` do::

    mesh = ttpu.distributed.Mesh(devices=8, axes={"dp": 2, "tp": 4})
    ttpu.distributed.shard_module(model, mesh, "fsdp")    # or "ddp", or a plan (--plan's format)
    ttpu.distributed.mark_sharding(x, mesh, ("dp", None))  # inputs; code written as for one device

The model stays on ``ttpu:0``, whose programs then run over the mesh: each tensor is one global
lazy value, a marked one is split over the mesh's devices, and each flush is one SPMD program
that XLA's partitioner (Shardy) splits, adding the collectives. Plans are the driver's (the same
ddp and fsdp rules, the same plan files); a partition spec names, per dim, the mesh axes that
dim is split over (``None`` for whole), and DTensor placements (``[Shard(0), Replicate()]``, one
per mesh axis) are accepted as another spelling of it.

Explicit collectives across the devices of one process (:func:`all_reduce`, :func:`all_gather`,
:func:`reduce_scatter`, :func:`all_to_all`, :func:`permute`) take one tensor per device, as
``torch.cuda.comm`` does, and run as one program over those devices: the data moves device to
device, never through the host. The pending work of each device runs first.
"""

from __future__ import annotations

import os
import torch

from . import _ttpu
from ._device import TtpuTensor
from ._distributed import _finish_reduce, fused_collectives, set_debug

__all__ = [
    "Mesh",
    "all_gather",
    "all_reduce",
    "all_to_all",
    "fused_collectives",
    "input_spec",
    "mark_sharding",
    "permute",
    "reduce_scatter",
    "resident_bytes",
    "set_debug",
    "shard_module",
    "sharding_of",
]


class Mesh:
    """The devices of this process as a named grid: ``Mesh(devices=8)`` (one axis named
    ``devices``), ``Mesh(devices=8, axes={"dp": 2, "tp": 4})`` (row-major), or a list of device
    indices for ``devices``. Creating it makes ``ttpu:0`` run its programs over these devices
    (pending work runs first)."""

    def __init__(self, devices: int | list[int] | None = None, axes: dict[str, int] | None = None):
        count = torch.ttpu.device_count()
        indices = list(range(count if devices is None else devices)) if not isinstance(devices, list) else devices
        axes = dict(axes) if axes else {"devices": len(indices)}
        size = 1
        for value in axes.values():
            size *= value
        if size != len(indices):
            raise ValueError(f"ttpu: mesh axes {axes} hold {size} devices, given {len(indices)}")
        if any(not 0 <= index < count for index in indices):
            raise ValueError(
                f"ttpu: devices {indices} for a mesh, but this process has {count} (TTPU_DEVICES sets the CPU plugin's)"
            )
        self.devices = indices
        self.axes = axes
        self.text = ",".join(f"{name}={value}" for name, value in axes.items())
        _ttpu.device_set_mesh(0, self.text, indices)

    @property
    def axis_names(self) -> list[str]:
        return list(self.axes)

    def __repr__(self) -> str:
        return f"Mesh({self.text}, devices={self.devices})"


def _spec_dims(tensor: torch.Tensor, mesh: Mesh, spec) -> list[list[str]]:
    """A partition spec (per dim: an axis name, a tuple of them, or None) or DTensor placements
    (per mesh axis: Shard(dim) or Replicate()) as per-dim axis lists."""
    rank = tensor.dim()
    spec = list(spec)
    placements = [item for item in spec if type(item).__name__ in ("Shard", "Replicate", "Partial")]
    if placements and len(placements) == len(spec):
        if len(spec) != len(mesh.axes):
            raise ValueError(f"ttpu: {len(spec)} placements for a mesh of {len(mesh.axes)} axes ({mesh.text})")
        dims: list[list[str]] = [[] for _ in range(rank)]
        for axis, placement in zip(mesh.axis_names, spec):
            kind = type(placement).__name__
            if kind == "Shard":
                dim = placement.dim + rank if placement.dim < 0 else placement.dim
                if not 0 <= dim < rank:
                    raise ValueError(f"ttpu: Shard({placement.dim}) of a tensor of {rank} dims")
                dims[dim].append(axis)
            elif kind == "Partial":
                raise ValueError("ttpu: Partial() is a pending reduction, not a layout of a tensor's values")
        return dims
    if len(spec) > rank:
        raise ValueError(f"ttpu: a partition spec of {len(spec)} dims for a tensor of {rank}")
    dims = []
    for item in spec + [None] * (rank - len(spec)):
        if item is None:
            dims.append([])
        elif isinstance(item, str):
            dims.append([item])
        else:
            dims.append(list(item))
    return dims


def mark_sharding(tensor: torch.Tensor, mesh: Mesh, spec) -> torch.Tensor:
    """Lays ``tensor`` (a whole ttpu tensor on ``ttpu:0``: a parameter, a buffer, an input) out
    over ``mesh`` by ``spec``; returns it. Its values do not change, only where they live."""
    if not isinstance(tensor, TtpuTensor):
        raise TypeError(f"ttpu: mark_sharding takes a ttpu tensor, not one on {tensor.device}")
    _ttpu.device_mark_sharding(tensor._h, _spec_dims(tensor, mesh, spec))
    return tensor


def sharding_of(tensor: torch.Tensor) -> list[list[str]] | None:
    """``tensor``'s layout over its mesh (per dim, the axes it is split over), once computed;
    ``None`` for a value on one device."""
    return _ttpu.device_sharding(tensor._h)


def resident_bytes() -> list[int]:
    """Bytes the values of ``ttpu:0`` hold on each device of its mesh."""
    return list(_ttpu.device_resident_bytes(0))


_DTYPES = None


def _ir_dtype(dtype: torch.dtype) -> str:
    global _DTYPES
    if _DTYPES is None:
        from ._convert import _torch_dtypes

        _DTYPES = _torch_dtypes()[0]
    return _DTYPES[dtype]


def _plan_text(plan: str) -> str:
    if plan in ("ddp", "fsdp"):
        return plan
    if "\n" not in plan and "=" not in plan and os.path.exists(plan):
        with open(plan) as file:
            return file.read()
    if "[" in plan:
        return plan
    raise ValueError(f"ttpu: plan {plan!r}: \"ddp\", \"fsdp\", a plan file or its text")


def shard_module(module: torch.nn.Module, mesh: Mesh, plan: str) -> torch.nn.Module:
    """Lays every parameter and buffer of ``module`` (on ``ttpu:0``) out over ``mesh`` as the
    driver's plan ``plan`` places weights: ``"ddp"`` (replicated), ``"fsdp"`` (each split along
    its first dim the device count divides) or a plan file (its path or text, the format of
    ``ttpu run --plan``; weights matched by their names in ``module``). Returns ``module``.
    Inputs are marked with :func:`mark_sharding`."""
    text = _plan_text(plan)
    seen = set()
    for name, tensor in list(module.named_parameters()) + list(module.named_buffers()):
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        dims = _ttpu.plan_placement(mesh.text, text, "weight", name, _ir_dtype(tensor.dtype), list(tensor.shape))
        _ttpu.device_mark_sharding(tensor._h, dims)
    return module


def input_spec(tensor: torch.Tensor, mesh: Mesh, plan: str, name: str = "input") -> list[list[str]]:
    """The placement the plan ``plan`` gives an input ``name`` like ``tensor`` (``"ddp"``
    splits every input's batch)."""
    return _ttpu.plan_placement(mesh.text, _plan_text(plan), "input", name, _ir_dtype(tensor.dtype), list(tensor.shape))


# ---- explicit collectives across this process's devices ----

_REDUCTIONS = ("sum", "avg", "product", "max", "min")


def _members(tensors, name: str) -> list[int]:
    """The devices of ``tensors`` (one ttpu tensor per device, of one type), in order."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError(f"ttpu.distributed.{name}: needs at least one tensor")
    for tensor in tensors:
        if not isinstance(tensor, TtpuTensor):
            raise TypeError(f"ttpu.distributed.{name}: takes ttpu tensors, not one on {tensor.device}")
        if tensor.dtype != tensors[0].dtype or tensor.shape != tensors[0].shape:
            raise ValueError(
                f"ttpu.distributed.{name}: tensors of one dtype and shape, found {tensors[0].dtype}"
                f"{list(tensors[0].shape)} and {tensor.dtype}{list(tensor.shape)}"
            )
    devices = [tensor.device.index for tensor in tensors]
    if len(set(devices)) != len(devices):
        raise ValueError(f"ttpu.distributed.{name}: one tensor per device, found devices {devices}")
    return devices


def _groups(groups, count: int, name: str):
    """Replica groups by position, checked as XLA needs them: equal sizes, each position once."""
    if groups is None:
        return None
    groups = [[int(member) for member in group] for group in groups]
    members = sorted(member for group in groups for member in group)
    if members != list(range(count)) or len({len(group) for group in groups}) != 1:
        raise ValueError(
            f"ttpu.distributed.{name}: groups must split positions 0..{count - 1} into groups of one size, "
            f"found {groups}"
        )
    return groups


def _group_size(groups, count: int) -> int:
    return len(groups[0]) if groups else count


def _run(kind: str, tensors, name: str, groups=None, **params) -> list[torch.Tensor]:
    from ._device import _wrap

    tensors = list(tensors)
    devices = _members(tensors, name)
    groups = _groups(groups, len(devices), name)
    handles = [tensor._h for tensor in tensors]
    return _wrap(_ttpu.device_collective(kind, handles, devices, groups=groups, **params))


def _reduction(op: str, name: str) -> str:
    if op not in _REDUCTIONS:
        raise ValueError(f"ttpu.distributed.{name}: op must be one of {', '.join(_REDUCTIONS)}, not {op!r}")
    return op


def all_reduce(tensors, op: str = "sum", groups=None) -> list[torch.Tensor]:
    """The elementwise ``op`` (``sum``, ``avg``, ``product``, ``max``, ``min``) of each group's
    tensors, for every member: one tensor per device in, one per device out. ``groups`` splits
    the positions of ``tensors`` into groups of one size (default: one group of all)."""
    reduce = _reduction(op, "all_reduce")
    results = _run("all_reduce", tensors, "all_reduce", groups, reduce="sum" if reduce == "avg" else reduce)
    if reduce == "avg":
        size = _group_size(groups, len(results))
        results = [_finish_reduce("avg", result, size) for result in results]
    return results


def all_gather(tensors, dim: int = 0, groups=None) -> list[torch.Tensor]:
    """Each group's tensors concatenated along ``dim`` in group order, for every member."""
    tensors = list(tensors)
    dim = _dim(tensors, dim, "all_gather")
    return _run("all_gather", tensors, "all_gather", groups, dimension=dim)


def reduce_scatter(tensors, op: str = "sum", dim: int = 0, groups=None) -> list[torch.Tensor]:
    """The ``op`` of each group's tensors split along ``dim``: the ``i``-th member gets block
    ``i``. The size of ``dim`` must be a multiple of the group size."""
    tensors = list(tensors)
    reduce = _reduction(op, "reduce_scatter")
    dim = _dim(tensors, dim, "reduce_scatter")
    size = _blocks(tensors, dim, groups, "reduce_scatter")
    results = _run("reduce_scatter", tensors, "reduce_scatter", groups,
                   reduce="sum" if reduce == "avg" else reduce, dimension=dim)
    if reduce == "avg":
        results = [_finish_reduce("avg", result, size) for result in results]
    return results


def all_to_all(tensors, split_dim: int = 0, concat_dim: int = 0, groups=None) -> list[torch.Tensor]:
    """Each member splits its tensor along ``split_dim`` into one block per group member, sends
    block ``j`` to member ``j``, and concatenates what it receives along ``concat_dim``."""
    tensors = list(tensors)
    split_dim = _dim(tensors, split_dim, "all_to_all")
    concat_dim = _dim(tensors, concat_dim, "all_to_all")
    _blocks(tensors, split_dim, groups, "all_to_all")
    return _run("all_to_all", tensors, "all_to_all", groups, split_dimension=split_dim, concat_dimension=concat_dim)


def permute(tensors, pairs) -> list[torch.Tensor]:
    """Sends the tensor at position ``source`` to position ``target`` for each ``(source,
    target)`` pair (distinct sources, distinct targets); a position no pair targets gets zeros."""
    tensors = list(tensors)
    pairs = [(int(source), int(target)) for source, target in pairs]
    count = len(tensors)
    sources, targets = [pair[0] for pair in pairs], [pair[1] for pair in pairs]
    if any(not 0 <= position < count for position in sources + targets) or len(set(sources)) != len(sources) \
            or len(set(targets)) != len(targets):
        raise ValueError(
            f"ttpu.distributed.permute: pairs of distinct sources and distinct targets among positions "
            f"0..{count - 1}, found {pairs}"
        )
    return _run("collective_permute", tensors, "permute", pairs=pairs)


def _blocks(tensors, dim: int, groups, name: str) -> int:
    """The group size, checked to split ``dim`` of the tensors into whole blocks."""
    size = _group_size(_groups(groups, len(tensors), name), len(tensors))
    if tensors and tensors[0].shape[dim] % size:
        raise ValueError(
            f"ttpu.distributed.{name}: dim {dim} of size {tensors[0].shape[dim]} does not split into {size} blocks"
        )
    return size


def _dim(tensors, dim: int, name: str) -> int:
    rank = tensors[0].dim() if tensors else 0
    if not -rank <= dim < rank:
        raise IndexError(f"ttpu.distributed.{name}: dim {dim} is out of range for tensors of {rank} dims")
    return dim % rank
