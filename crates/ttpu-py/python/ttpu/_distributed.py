"""``torch.distributed`` on the ttpu device: the ``ttpu`` process-group backend and the
collectives of ttpu tensors.

``dist.init_process_group("ttpu")`` makes process groups whose CPU traffic (barriers, object
collectives) runs through gloo and whose device collectives are the device's. A ttpu tensor is a
wrapper subclass, so a collective on one reaches the tensor's ``__torch_dispatch__`` before any
backend: the process-group ops (``c10d.allreduce_``, ``c10d._allgather_base_``, ...) are
rewritten here to functional collectives (``_c10d_functional.all_reduce``, ...) and copies, and
each functional collective is one collective step of the device, counted in
``torch.ttpu.stats()["collectives"]``. ``wait_tensor`` is the identity (a collective is complete
when its value is), and every process-group op returns completed work.

Where a collective step runs depends on ``TTPU_COLLECTIVES``:

- ``host`` (the default): the pending work of the device runs (one flush, reason
  ``collective <kind>``), the operand is read, the group's gloo backend computes the collective,
  and the result goes back to the device, where the program goes on. This is the path for the
  CPU plugin, which refuses programs across processes.
- ``program``: the device's runtime joins the job its launcher describes (ttpu's, JAX's or
  torchrun's variables, with ``TTPU_COORDINATOR`` naming a ``file://`` or ``redis://`` store),
  each group learns its members' runtime device ids through its store when it is created, and
  each collective runs as a program of its own over the group's devices (``all_reduce``,
  ``all_gather``, ``reduce_scatter``, ``all_to_all``; a broadcast is an all-gather of which the
  source's block is kept, so its bits are exact): the pending work runs first, and no data goes
  through the host. The plugin must run programs across processes (NCCL in the CUDA plugin); one
  that cannot fails at the first collective with its own message. An all-to-all with uneven
  splits, and the rooted and point-to-point ops (``scatter``, ``gather``, ``reduce``, ``send``,
  ``recv``), take the host path, counted as such. Inside ``ttpu.distributed.fused_collectives()``
  the collectives are recorded into the step's program instead, so a step is one program.

AVG is SUM and a divide, as in the compiled form.

Every rank must make the same collectives in the same order and flush at the same points (an
``.item()``, ``print`` or ``.cpu()`` on one rank only breaks that): with
``ttpu.distributed.set_debug(True)`` (or ``TTPU_DIST_DEBUG=1``) the ranks of a group compare
their flush logs through the store at each collective and stop with an error naming the first
flush that differs. A collective a peer never joins ends with a timeout error naming the group,
after the process group's timeout.

The backend's own methods are reached for ttpu tensors only below PyTorch's Python dispatch,
where nothing of the device sends them; there they are an error, never a silent host copy.
"""

from __future__ import annotations

import datetime
import json
import os

import torch
import torch.distributed as dist
from torch.utils._pytree import tree_flatten

from . import _device, _ttpu
from ._device import TtpuTensor

__all__ = ["fused_collectives", "set_debug"]

BACKEND = "ttpu"

c10d = torch.ops.c10d
F = torch.ops._c10d_functional
aten = torch.ops.aten
_C = torch._C._distributed_c10d

_REDUCE = {
    dist.ReduceOp.SUM: "sum",
    dist.ReduceOp.AVG: "avg",
    dist.ReduceOp.PRODUCT: "product",
    dist.ReduceOp.MIN: "min",
    dist.ReduceOp.MAX: "max",
}
_GLOO_REDUCE = {
    "sum": dist.ReduceOp.SUM,
    "avg": dist.ReduceOp.SUM,
    "product": dist.ReduceOp.PRODUCT,
    "min": dist.ReduceOp.MIN,
    "max": dist.ReduceOp.MAX,
}

_DEBUG = {"enabled": False}

_MODES = ("host", "program")


def collectives_in_programs() -> bool:
    """Whether device collectives run inside programs (``TTPU_COLLECTIVES=program``) rather than
    on the host (``host``, the default)."""
    mode = os.environ.get("TTPU_COLLECTIVES", "host").strip() or "host"
    if mode not in _MODES:
        raise RuntimeError(f"ttpu: TTPU_COLLECTIVES=`{mode}`: expected `host` or `program`")
    return mode == "program"


def set_debug(enabled: bool = True) -> None:
    """Compares the ranks' flush logs at every collective (see the module docs); the error names
    the first flush where a rank went its own way."""
    _DEBUG["enabled"] = enabled
    _ttpu.device_set_flush_log(enabled)
    _FLUSHES.clear()


class _Group:
    """What the device keeps of a process group: its name, its members' global ranks and
    global device ids, its gloo backend for the host path, and its store."""

    def __init__(self, name, ranks, rank, devices, backend, store, timeout, runtime_devices=None):
        self.name, self.ranks, self.rank = name, ranks, rank
        self.devices, self.backend, self.store, self.timeout = devices, backend, store, timeout
        # The members' runtime device indices, in group-rank order: the replicas of the group's
        # collective programs (``TTPU_COLLECTIVES=program`` only).
        self.runtime_devices = runtime_devices
        self.collectives = 0

    def describe(self) -> str:
        return f"process group '{self.name}' (global ranks {self.ranks})"


_GROUPS: dict[str, _Group] = {}


def _seconds(timeout) -> float:
    return timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout)


class TtpuBackend(torch._C._distributed_c10d.Backend):
    """The ``ttpu`` c10d backend of one process group. CPU tensors (barriers, object
    collectives) go to its gloo backend; ttpu tensors never reach it (their collectives are
    taken at dispatch), and one that does is refused."""

    def __init__(self, store, rank, size, timeout):
        super().__init__(rank, size)
        self._gloo = dist.ProcessGroupGloo(dist.PrefixStore("ttpu/gloo", store), rank, size, timeout)

    def getBackendName(self):  # noqa: N802 (c10d's name)
        return BACKEND

    def _delegate(self, method, tensors, *args):
        if any(isinstance(t, TtpuTensor) for t in tensors):
            _ttpu.device_count_backend_call(method)
            raise RuntimeError(
                f"ttpu: the ttpu process-group backend's `{method}` was called on a ttpu tensor below "
                "PyTorch's Python dispatch; device collectives are taken at dispatch (a ttpu bug if "
                "PyTorch called this)"
            )
        return getattr(self._gloo, method)(*args)

    def allreduce(self, tensors, opts=None):
        return self._delegate("allreduce", tensors, tensors, opts or _C.AllreduceOptions())

    def allreduce_coalesced(self, tensors, opts=None):
        return self._delegate("allreduce_coalesced", tensors, tensors, opts or _C.AllreduceCoalescedOptions())

    def broadcast(self, tensors, opts=None):
        return self._delegate("broadcast", tensors, tensors, opts or _C.BroadcastOptions())

    def allgather(self, outputs, inputs, opts=None):
        flat = [t for group in outputs for t in group] + list(inputs)
        return self._delegate("allgather", flat, outputs, inputs, opts or _C.AllgatherOptions())

    def all_gather_single(self, output, input, opts=None):
        return self._delegate("_allgather_base", [output, input], output, input, opts or _C.AllgatherOptions())

    def reduce_scatter(self, outputs, inputs, opts=None):
        flat = list(outputs) + [t for group in inputs for t in group]
        return self._delegate("reduce_scatter", flat, outputs, inputs, opts or _C.ReduceScatterOptions())

    def reduce_scatter_single(self, output, input, opts=None):
        return self._delegate(
            "_reduce_scatter_base", [output, input], output, input, opts or _C.ReduceScatterOptions()
        )

    def reduce(self, tensors, opts=None):
        return self._delegate("reduce", tensors, tensors, opts or _C.ReduceOptions())

    def gather(self, outputs, inputs, opts=None):
        flat = [t for group in outputs for t in group] + list(inputs)
        return self._delegate("gather", flat, outputs, inputs, opts or _C.GatherOptions())

    def scatter(self, outputs, inputs, opts=None):
        flat = list(outputs) + [t for group in inputs for t in group]
        return self._delegate("scatter", flat, outputs, inputs, opts or _C.ScatterOptions())

    def alltoall(self, outputs, inputs, opts=None):
        return self._delegate("alltoall", list(outputs) + list(inputs), outputs, inputs, opts or _C.AllToAllOptions())

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return self._delegate(
            "alltoall_base", [output, input], output, input, output_split_sizes, input_split_sizes,
            opts or _C.AllToAllOptions(),
        )

    def barrier(self, opts=None):
        return self._gloo.barrier(opts or _C.BarrierOptions())

    def send(self, tensors, dst, tag):
        return self._delegate("send", tensors, tensors, dst, tag)

    def recv(self, tensors, src, tag):
        return self._delegate("recv", tensors, tensors, src, tag)

    def recv_anysource(self, tensors, tag):
        return self._delegate("recv_anysource", tensors, tensors, tag)


def _device_id(global_rank: int) -> int:
    """The global device id of rank ``global_rank``'s current device: each process's devices
    numbered after the ranks before it (one job, one runtime per process)."""
    return global_rank * torch.ttpu.device_count() + torch.ttpu.current_device()


def _create_backend(options, backend_options=None):
    """The c10d creator (extended form): the group's backend, after its members exchange their
    global device ids through the group's store."""
    store, rank, size = options.store, options.group_rank, options.group_size
    timeout = options.timeout
    ranks = list(options.global_ranks_in_group) or list(range(size))
    name = options.group_id
    devices = _exchange(store, rank, size, "device", _device_id(ranks[rank]), name, ranks, timeout)
    runtime_devices = None
    if collectives_in_programs():
        runtime_devices = _exchange(
            store, rank, size, "runtime_device", _ttpu.device_runtime_index(torch.ttpu.current_device()), name, ranks,
            timeout,
        )
    backend = TtpuBackend(store, rank, size, timeout)
    _GROUPS[name] = _Group(name, ranks, rank, devices, backend, store, timeout, runtime_devices)
    return backend


def _exchange(store, rank, size, what, mine, name, ranks, timeout) -> list[int]:
    """Every member's ``what`` (an int), in group-rank order, through the group's store."""
    store.set(f"ttpu/{what}/{rank}", str(mine))
    values = []
    for peer in range(size):
        try:
            values.append(int(store.get(f"ttpu/{what}/{peer}")))
        except RuntimeError as error:
            raise RuntimeError(
                f"ttpu: process group '{name}' (global ranks {ranks}): group rank {peer} did not publish its "
                f"{what.replace('_', ' ')} within {_seconds(timeout):g} s ({error})"
            ) from error
    return values


def _group(name: str) -> _Group:
    group = _GROUPS.get(name)
    if group is None:
        raise RuntimeError(
            f"ttpu: collective on process group '{name}', which has no ttpu backend; create process groups "
            "for the device with backend \"ttpu\" (init_process_group(\"ttpu\"), or \"cpu:gloo,ttpu:ttpu\")"
        )
    return group


# ---- the host path ----

_FLUSHES: list = []


def _check_divergence(group: _Group, kind: str) -> None:
    """Compares this rank's flush log with the group's other ranks' (debug mode)."""
    _FLUSHES.extend(_ttpu.device_take_flush_log())
    group.collectives += 1
    key = f"ttpu/flushes/{group.collectives}"
    mine = [[reason, steps] for _, reason, steps in _FLUSHES]
    group.store.set(f"{key}/{group.rank}", json.dumps(mine))
    for peer in range(len(group.ranks)):
        if peer == group.rank:
            continue
        try:
            theirs = json.loads(group.store.get(f"{key}/{peer}"))
        except RuntimeError as error:
            raise _timeout(group, kind, error) from error
        if theirs == mine:
            continue
        first = next(
            (index for index, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs))
        )

        def describe(log, rank):
            if first >= len(log):
                return f"rank {rank} had no flush {first}"
            reason, steps = log[first]
            return f"rank {rank}'s flush {first} ran {steps} pending steps for `{reason}`"

        raise RuntimeError(
            f"ttpu: the ranks of {group.describe()} diverged before collective {kind} #{group.collectives}: "
            f"{describe(mine, group.ranks[group.rank])}, {describe(theirs, group.ranks[peer])}; every rank must "
            "flush at the same points (a host read such as .item(), print or .cpu() on one rank only makes it "
            "flush alone, and the mesh deadlocks once collectives run inside programs)"
        )


def _timeout(group: _Group, kind: str, error: Exception) -> RuntimeError:
    return RuntimeError(
        f"ttpu: collective {kind} on {group.describe()} did not complete within "
        f"{_seconds(group.timeout):g} s: a rank of the group never joined it ({error})"
    )


def _read(tensor: TtpuTensor, kind: str) -> torch.Tensor:
    return _device._read(tensor, f"collective {kind}")


def _on_host(kind: str, group: _Group, tensors: list, run):
    """Runs one collective step on the host: the pending work runs, ``tensors`` are read, ``run``
    computes the collective on the host copies with the group's gloo backend, and its host
    results come back. Counted as one collective of ``kind`` on the host."""
    hosts = [_read(t, kind).contiguous() for t in tensors]
    if _DEBUG["enabled"]:
        _check_divergence(group, kind)
    try:
        results = run(group.backend._gloo, hosts)
    except RuntimeError as error:
        raise _timeout(group, kind, error) from error
    moved = sum(h.numel() * h.element_size() for h in hosts)
    moved += sum(r.numel() * r.element_size() for r in results if isinstance(r, torch.Tensor))
    _ttpu.device_count_collective(kind, moved)
    return results


_FUSED = [0]


class fused_collectives:  # noqa: N801 (used as a function: `with fused_collectives():`)
    """Inside, the collectives of process groups are recorded into the pending program (the
    step's) instead of running as programs of their own: a training step and its collectives
    become one program, which runs at the step's flush (needs ``TTPU_COLLECTIVES=program``). Every
    rank must record the same program and flush at the same point, or the job deadlocks; the debug
    mode (``ttpu.distributed.set_debug``) compares the ranks' flushes."""

    def __enter__(self):
        if not collectives_in_programs():
            raise RuntimeError(
                "ttpu: fused_collectives() records collectives into programs, which needs TTPU_COLLECTIVES=program "
                "when the device starts"
            )
        _FUSED[0] += 1
        return self

    def __exit__(self, *exc):
        _FUSED[0] -= 1
        return False


def _in_program(kind: str, label: str, group: _Group, tensor: TtpuTensor, **params) -> TtpuTensor:
    """Runs one collective step as a program over the group's devices (``TTPU_COLLECTIVES=program``):
    the pending work runs first, and the result stays on the device; inside ``fused_collectives()``
    it is recorded into the pending program instead. Counted as ``label``."""
    if _DEBUG["enabled"]:
        _check_divergence(group, label)
    try:
        result = _ttpu.device_collective(
            kind, [tensor._h], group.runtime_devices, label=label, in_step=_FUSED[0] > 0, **params
        )
    except RuntimeError as error:
        raise RuntimeError(
            f"ttpu: collective {label} on {group.describe()} inside a program over devices "
            f"{group.runtime_devices}: {error} (TTPU_COLLECTIVES=host runs collectives on the host)"
        ) from error
    return _device._wrap(result[0])


def _programs(group: _Group) -> bool:
    return group.runtime_devices is not None


def _wait(work, group: _Group):
    work.wait(group.timeout)


def _to_device(host: torch.Tensor, like: TtpuTensor) -> TtpuTensor:
    return _device._upload(host.contiguous(), like.device)


def _reduce_name(op) -> str:
    if isinstance(op, str):
        name = op.lower()
    else:
        if isinstance(op, torch.ScriptObject):
            op = dist.ReduceOp.unbox(op)
        key = op.op if hasattr(op, "op") else op
        name = _REDUCE.get(key)
        if name is None:
            raise RuntimeError(f"ttpu: reduction {op} is not supported by the ttpu device's collectives")
    if name not in _GLOO_REDUCE:
        raise RuntimeError(f"ttpu: reduction `{name}` is not supported by the ttpu device's collectives")
    return name


def _finish_reduce(name: str, result: torch.Tensor, size: int) -> torch.Tensor:
    """AVG as SUM and a divide (as PyTorch averages: the sum divided by the group's size)."""
    if name != "avg":
        return result
    if not (result.is_floating_point() or result.is_complex()):
        raise RuntimeError(f"ttpu: ReduceOp.AVG of {result.dtype} tensors; averages need a floating dtype")
    return result / size


def _gloo_opts(cls, **fields):
    opts = cls()
    for key, value in fields.items():
        setattr(opts, key, value)
    return opts


# ---- functional collectives: one collective step each ----


def _all_reduce(args, kwargs):
    tensor, op, name = _bind(args, kwargs, "input", "reduce_op", "group_name")
    group = _group(_group_name(name))
    reduce = _reduce_name(op)
    if _programs(group):
        summed = _in_program("all_reduce", "all_reduce", group, tensor, reduce="sum" if reduce == "avg" else reduce)
        return _finish_reduce(reduce, summed, len(group.ranks))

    def run(gloo, hosts):
        host = hosts[0].clone()
        opts = _gloo_opts(_C.AllreduceOptions, reduceOp=_GLOO_REDUCE[reduce])
        _wait(gloo.allreduce([host], opts), group)
        return [_finish_reduce(reduce, host, len(group.ranks))]

    return _to_device(_on_host("all_reduce", group, [tensor], run)[0], tensor)


def _all_gather(args, kwargs):
    tensor, size, name = _bind(args, kwargs, "input", "group_size", "group_name")
    group = _group(_group_name(name))
    _check_size(group, size, "all_gather_into_tensor")
    if _programs(group):
        operand = tensor if tensor.dim() else tensor.reshape(1)
        return _in_program("all_gather", "all_gather_into_tensor", group, operand, dimension=0)

    def run(gloo, hosts):
        host = hosts[0] if hosts[0].dim() else hosts[0].reshape(1)
        out = host.new_empty((host.shape[0] * size, *host.shape[1:]))
        _wait(gloo._allgather_base(out, host, _C.AllgatherOptions()), group)
        return [out]

    return _to_device(_on_host("all_gather_into_tensor", group, [tensor], run)[0], tensor)


def _reduce_scatter(args, kwargs):
    tensor, op, size, name = _bind(args, kwargs, "input", "reduce_op", "group_size", "group_name")
    group = _group(_group_name(name))
    _check_size(group, size, "reduce_scatter_tensor")
    reduce = _reduce_name(op)
    if tensor.dim() == 0 or tensor.shape[0] % size:
        raise RuntimeError(
            f"ttpu: reduce_scatter_tensor of shape {list(tensor.shape)} over {size} ranks: dim 0 must divide evenly"
        )
    if _programs(group):
        scattered = _in_program(
            "reduce_scatter", "reduce_scatter_tensor", group, tensor,
            reduce="sum" if reduce == "avg" else reduce, dimension=0,
        )
        return _finish_reduce(reduce, scattered, len(group.ranks))

    def run(gloo, hosts):
        host = hosts[0]
        out = host.new_empty((host.shape[0] // size, *host.shape[1:]))
        opts = _gloo_opts(_C.ReduceScatterOptions, reduceOp=_GLOO_REDUCE[reduce])
        _wait(gloo._reduce_scatter_base(out, host, opts), group)
        return [_finish_reduce(reduce, out, len(group.ranks))]

    return _to_device(_on_host("reduce_scatter_tensor", group, [tensor], run)[0], tensor)


def _all_to_all(args, kwargs):
    tensor, out_splits, in_splits, name = _bind(
        args, kwargs, "input", "output_split_sizes", "input_split_sizes", "group_name"
    )
    group = _group(_group_name(name))
    size = len(group.ranks)
    even = tensor.dim() > 0 and tensor.shape[0] % size == 0
    blocks = [tensor.shape[0] // size] * size if even else None
    if _programs(group) and even and all(not s or list(s) == blocks for s in (out_splits, in_splits)):
        return _in_program("all_to_all", "all_to_all_single", group, tensor, split_dimension=0, concat_dimension=0)

    def run(gloo, hosts):
        host = hosts[0]
        rows = sum(out_splits) if out_splits else host.shape[0]
        out = host.new_empty((rows, *host.shape[1:]))
        _wait(gloo.alltoall_base(out, host, list(out_splits), list(in_splits), _C.AllToAllOptions()), group)
        return [out]

    return _to_device(_on_host("all_to_all_single", group, [tensor], run)[0], tensor)


def _broadcast(args, kwargs):
    tensor, src, name = _bind(args, kwargs, "input", "src", "group_name")
    group = _group(_group_name(name))
    if _programs(group):
        # Every member's value gathered, the source's kept: exact bits, one program on every rank.
        gathered = _in_program("all_gather", "broadcast", group, tensor.reshape(1, *tensor.shape), dimension=0)
        return gathered[src].clone()

    def run(gloo, hosts):
        # `src` is a rank of the group, as the functional op's own kernel reads it.
        host = hosts[0].clone()
        _wait(gloo.broadcast([host], _gloo_opts(_C.BroadcastOptions, rootRank=src, rootTensor=0)), group)
        return [host]

    return _to_device(_on_host("broadcast", group, [tensor], run)[0], tensor)


def _coalesced(single):
    def handler(args, kwargs):
        inputs, *rest = args
        return [single((tensor, *rest), kwargs) for tensor in inputs]

    return handler


def _wait_tensor(args, kwargs):
    return args[0]


def _wait_tensors(args, kwargs):
    return list(args[0])


def _wrap_tensor_autograd(args, kwargs):
    # Its own kernel makes an AsyncCollectiveTensor; a ttpu value is complete when computed.
    return aten.alias.default(args[0])


def _bind(args, kwargs, *names):
    values = list(args) + [kwargs[name] for name in names[len(args):]]
    return values


def _group_name(name) -> str:
    if isinstance(name, dist.ProcessGroup):
        return name.group_name
    return str(name)


def _check_size(group: _Group, size: int, kind: str) -> None:
    if size != len(group.ranks):
        raise RuntimeError(
            f"ttpu: {kind} over {size} ranks on {group.describe()}, which has {len(group.ranks)}"
        )


# ---- process-group ops: rewritten to functional collectives and copies ----


def _pg(obj) -> dist.ProcessGroup:
    return dist.ProcessGroup.unbox(obj) if isinstance(obj, torch.ScriptObject) else obj


def _done(result):
    future = torch.futures.Future()
    future.set_result(result)
    return torch._C._distributed_c10d._create_work_from_future(future).boxed()


def _c10d_allreduce(args, kwargs):
    tensors, pg, op = args[0], _pg(args[1]), args[2]
    reduce = _reduce_name(op)
    for tensor in tensors:
        tensor.copy_(F.wait_tensor(F.all_reduce(tensor, reduce, pg.group_name)))
    return tensors, _done(tensors)


def _c10d_allreduce_coalesced(args, kwargs):
    tensors, _ = _c10d_allreduce(args, kwargs)
    return _done(tensors)


def _c10d_allgather_base(args, kwargs):
    output, input, pg = args[0], args[1], _pg(args[2])
    gathered = F.wait_tensor(F.all_gather_into_tensor(input, pg.size(), pg.group_name))
    output.copy_(gathered.reshape(output.shape))
    return output, _done([output])


def _c10d_allgather(args, kwargs):
    outputs, inputs, pg = args[0], args[1], _pg(args[2])
    for group_outputs, input in zip(outputs, inputs):
        gathered = F.wait_tensor(F.all_gather_into_tensor(input.reshape(-1), pg.size(), pg.group_name))
        gathered = gathered.reshape(pg.size(), *input.shape)
        for rank, output in enumerate(group_outputs):
            output.copy_(gathered[rank])
    return outputs, _done([t for group in outputs for t in group])


def _c10d_allgather_coalesced(args, kwargs):
    outputs, inputs, pg = args[0], args[1], _pg(args[2])
    for output, input in zip(outputs, inputs):
        gathered = F.wait_tensor(F.all_gather_into_tensor(input, pg.size(), pg.group_name))
        output.copy_(gathered.reshape(output.shape))
    return _done(list(outputs))


def _c10d_reduce_scatter_base(args, kwargs):
    output, input, pg, op = args[0], args[1], _pg(args[2]), args[3]
    reduce = _reduce_name(op)
    scattered = F.wait_tensor(F.reduce_scatter_tensor(input, reduce, pg.size(), pg.group_name))
    output.copy_(scattered.reshape(output.shape))
    return output, _done([output])


def _c10d_reduce_scatter(args, kwargs):
    outputs, inputs, pg, op = args[0], args[1], _pg(args[2]), args[3]
    reduce = _reduce_name(op)
    for output, group_inputs in zip(outputs, inputs):
        stacked = torch.cat([t.reshape(-1) for t in group_inputs])
        scattered = F.wait_tensor(F.reduce_scatter_tensor(stacked, reduce, pg.size(), pg.group_name))
        output.copy_(scattered.reshape(output.shape))
    return outputs, _done(list(outputs))


def _c10d_reduce_scatter_coalesced(args, kwargs):
    outputs, inputs, pg, op = args[0], args[1], _pg(args[2]), args[3]
    reduce = _reduce_name(op)
    for output, input in zip(outputs, inputs):
        scattered = F.wait_tensor(F.reduce_scatter_tensor(input, reduce, pg.size(), pg.group_name))
        output.copy_(scattered.reshape(output.shape))
    return _done(list(outputs))


def _c10d_broadcast(args, kwargs):
    tensors, pg, root = args[0], _pg(args[1]), args[2]
    for tensor in tensors:
        tensor.copy_(F.wait_tensor(F.broadcast(tensor, root, pg.group_name)))
    return tensors, _done(tensors)


def _c10d_alltoall_base(args, kwargs):
    # On the host as gloo's own op; inside programs as the functional collective (whose uneven
    # splits go to the host there).
    output, input, pg, out_splits, in_splits = args[0], args[1], _pg(args[2]), args[3], args[4]
    if not _programs(_group(pg.group_name)):
        return _host_alltoall_base(args, kwargs)
    exchanged = F.wait_tensor(F.all_to_all_single(input, list(out_splits), list(in_splits), pg.group_name))
    output.copy_(exchanged.reshape(output.shape))
    return _done([output])


def _host_c10d(kind, run_outputs):
    """A process-group op computed on the host as one collective step: ``run_outputs(gloo,
    args, hosts)`` runs it on host copies of every ttpu tensor of the call and returns the
    (device tensor, host result) pairs to write back."""

    def handler(args, kwargs):
        pg = next(_pg(a) for a in tree_flatten(args)[0] if isinstance(a, (torch.ScriptObject, dist.ProcessGroup)))
        group = _group(pg.group_name)
        tensors = [a for a in tree_flatten(args)[0] if isinstance(a, TtpuTensor)]
        index = {id(t): i for i, t in enumerate(tensors)}

        def run(gloo, hosts):
            def host_of(value):
                if isinstance(value, TtpuTensor):
                    return hosts[index[id(value)]]
                if isinstance(value, list):
                    return [host_of(item) for item in value]
                return value

            return run_outputs(gloo, group, [host_of(a) for a in args])

        writes = _on_host(kind, group, tensors, run)
        with torch.no_grad():
            for position, host in writes:
                target = _at(args, position)
                target.copy_(_to_device(host, target))
        return _result_of(kind, args)

    return handler


def _at(args, position):
    value = args
    for index in position:
        value = value[index]
    return value


def _result_of(kind, args):
    outputs = args[0]
    work = _done(outputs if isinstance(outputs, list) else [outputs])
    return (outputs, work) if kind in ("scatter", "alltoall") else work


def _scatter(gloo, group, args):
    outputs, inputs, _, root = args[:4]
    opts = _gloo_opts(_C.ScatterOptions, rootRank=root)
    _wait(gloo.scatter(outputs, inputs if group.rank == root else [], opts), group)
    return [((0, i), host) for i, host in enumerate(outputs)]


def _gather(gloo, group, args):
    outputs, inputs, _, root = args[:4]
    opts = _gloo_opts(_C.GatherOptions, rootRank=root)
    _wait(gloo.gather(outputs if group.rank == root else [], inputs, opts), group)
    if group.rank != root:
        return []
    return [((0, i, j), host) for i, hosts in enumerate(outputs) for j, host in enumerate(hosts)]


def _reduce(gloo, group, args):
    tensors, _, op, root = args[:4]
    name = _reduce_name(op)
    opts = _gloo_opts(_C.ReduceOptions, reduceOp=_GLOO_REDUCE[name], rootRank=root, rootTensor=0)
    _wait(gloo.reduce(tensors, opts), group)
    if group.rank != root:
        return []
    return [((0, i), _finish_reduce(name, host, len(group.ranks))) for i, host in enumerate(tensors)]


def _alltoall(gloo, group, args):
    outputs, inputs = args[:2]
    _wait(gloo.alltoall(outputs, inputs, _C.AllToAllOptions()), group)
    return [((0, i), host) for i, host in enumerate(outputs)]


def _alltoall_base(gloo, group, args):
    output, input, _, out_splits, in_splits = args[:5]
    _wait(gloo.alltoall_base(output, input, list(out_splits), list(in_splits), _C.AllToAllOptions()), group)
    return [((0,), output)]


_host_alltoall_base = _host_c10d("alltoall_base", _alltoall_base)


def _send(gloo, group, args):
    tensors, _, dst, tag = args[:4]
    _wait(gloo.send(tensors, dst, tag), group)
    return []


def _recv(gloo, group, args):
    tensors, _, src, tag = args[:4]
    _wait(gloo.recv(tensors, src, tag), group)
    return [((0, i), host) for i, host in enumerate(tensors)]


def _barrier(args, kwargs):
    pg = _pg(args[1])
    group = _group(pg.group_name)
    _device._ttpu.device_synchronize("barrier")
    try:
        _wait(group.backend._gloo.barrier(_C.BarrierOptions()), group)
    except RuntimeError as error:
        raise _timeout(group, "barrier", error) from error
    return _done([])


def _record_grad_output_stream(args, kwargs):
    # Streams order nothing on the device: there is no memory to keep mapped for a stream.
    return None


def _kernel_of(func, key):
    """Runs ``func``'s own kernel for dispatch key ``key`` on ttpu tensors: the ops it calls
    come back to the device one by one, so its aliasing is the kernel's own (FSDP's
    ``all_gather_copy_in`` writes its output argument and returns a view of it)."""
    dispatch_key = getattr(torch._C.DispatchKey, key)

    def handler(args, kwargs):
        return func._op_dk(dispatch_key, *args, **kwargs)

    return handler


# FSDP2's custom ops run their own kernels, as on CUDA: their inner ops reach the device.
_FSDP_KERNELS = {
    "fsdp::all_gather_copy_in": "PrivateUse1",
    "fsdp::split_with_sizes_copy": "PrivateUse1",
    "fsdp::chunk_cat": "PrivateUse1",
    "fsdp::chunk_cat_mixed_dtype": "CompositeExplicitAutograd",
}


def _fsdp_handler(func):
    name = func._schema.name
    if name == "fsdp::record_grad_output_stream":
        return _record_grad_output_stream
    key = _FSDP_KERNELS.get(name)
    return _kernel_of(func, key) if key is not None else None


def _install() -> None:
    """Registers the ``ttpu`` backend and the device's handlers of collectives."""
    if not dist.is_available():
        return
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _create_backend, extended_api=True, devices=["cpu", BACKEND])
    special = _device._SPECIAL
    functional = {
        "all_reduce": _all_reduce,
        "all_gather_into_tensor": _all_gather,
        "reduce_scatter_tensor": _reduce_scatter,
        "all_to_all_single": _all_to_all,
        "broadcast": _broadcast,
        "wait_tensor": _wait_tensor,
        "wait_tensors": _wait_tensors,
        "_wrap_tensor_autograd": _wrap_tensor_autograd,
    }
    functional["all_reduce_coalesced"] = _coalesced(_all_reduce)
    functional["all_gather_into_tensor_coalesced"] = _coalesced(_all_gather)
    functional["reduce_scatter_tensor_coalesced"] = _coalesced(_reduce_scatter)
    for name, handler in functional.items():
        packet = getattr(F, name, None)
        if packet is not None:
            special[packet.default] = handler
    process_group = {
        "allreduce_": _c10d_allreduce,
        "allreduce_coalesced_": _c10d_allreduce_coalesced,
        "_allgather_base_": _c10d_allgather_base,
        "allgather_": _c10d_allgather,
        "allgather_into_tensor_coalesced_": _c10d_allgather_coalesced,
        "_reduce_scatter_base_": _c10d_reduce_scatter_base,
        "reduce_scatter_": _c10d_reduce_scatter,
        "reduce_scatter_tensor_coalesced_": _c10d_reduce_scatter_coalesced,
        "broadcast_": _c10d_broadcast,
        "scatter_": _host_c10d("scatter", _scatter),
        "gather_": _host_c10d("gather", _gather),
        "reduce_": _host_c10d("reduce", _reduce),
        "alltoall_": _host_c10d("alltoall", _alltoall),
        "alltoall_base_": _c10d_alltoall_base,
        "send": _host_c10d("send", _send),
        "recv_": _host_c10d("recv", _recv),
        "barrier": _barrier,
    }
    for name, handler in process_group.items():
        packet = getattr(c10d, name, None)
        if packet is not None:
            special[packet.default] = handler
    # FSDP2's ops exist once FSDP is imported (importing it here would cost every `import
    # ttpu` seconds): they are found by namespace when they first arrive.
    _device.NAMESPACE_HANDLERS["fsdp"] = _fsdp_handler
    # `_wrap_tensor_autograd` exists once the functional collectives' module is imported.
    _device.NAMESPACE_HANDLERS["_c10d_functional"] = (
        lambda func: _wrap_tensor_autograd if func._schema.name.endswith("::_wrap_tensor_autograd") else None
    )
    if os.environ.get("TTPU_DIST_DEBUG", "") not in ("", "0"):
        set_debug(True)
