"""The ``torch.compile`` backend: ``torch.compile(model, backend="ttpu")``, for inference and
training.

Dynamo hands the backend a graph of torch-level ops; AOTAutograd (PyTorch's own, with the
min-cut partitioner) turns it into ATen graphs: a forward and a backward for calls that need
gradients, or one inference graph, with PyTorch's core decompositions applied (those
``run_decompositions()`` applies to an exported program, so the graphs hold what ttpu's op
table holds). Each graph is then recorded node by node through that table (``_ttpu.GraphRecorder``,
the entry point eager calls on the ttpu device use) into one program per input signature, and
runs as one step on the device:

- with tensors on the ``"ttpu"`` device, the program is recorded on the device's lazy tape like
  any call, so the forward, the backward (saved activations stay on the device) and an eager
  optimizer step run as one fused program at the step's end;
- with CPU tensors, inputs are uploaded (parameters and buffers once per version) and the results
  read back, so uploads and downloads are the only extra cost.

Shapes, and the values of size arguments (``dynamic=True``), decide the program: each signature
records and compiles once. A graph ttpu cannot take (an op neither its table nor a decomposition
covers, a size the data decides) runs in eager PyTorch instead, with one warning naming the
graph and the reason, counted in ``calls["eager"]``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import operator
import os
import warnings

import torch

from . import _ttpu
from ._convert import _torch_dtypes


class TtpuFallbackWarning(UserWarning):
    """A graph, or a call of it, runs in eager PyTorch instead of on ttpu."""


# How many graph calls ran on ttpu and how many in eager PyTorch, in this process, how many Dynamo
# graphs were compiled for ttpu, and how many programs their signatures recorded.
calls = {"ttpu": 0, "eager": 0, "graphs": 0, "programs": 0}

_graph_count = 0

# Programs one graph records before ttpu warns that its signatures keep changing.
_MANY_PROGRAMS = 16


class TtpuRecompileWarning(UserWarning):
    """A compiled graph keeps recording programs for new input signatures."""

# Why a graph recorded another program: `TTPU_LOG=recompiles` (or this logger at INFO) names, for
# each new program, what differs from the closest recorded one.
_RECOMPILES = logging.getLogger("ttpu.recompiles")
if "recompiles" in os.environ.get("TTPU_LOG", "").split(","):
    _RECOMPILES.setLevel(logging.INFO)
    _RECOMPILES.addHandler(logging.StreamHandler())


def _graph_name(gm) -> str:
    """A name for warnings: the graph's number in this process and its first ops."""
    global _graph_count
    _graph_count += 1
    ops = [
        getattr(node.target, "__name__", str(node.target))
        for node in gm.graph.nodes
        if node.op in ("call_function", "call_method")
    ]
    shown = ", ".join(ops[:3]) + (", ..." if len(ops) > 3 else "")
    return f"#{_graph_count} ({len(ops)} ops: {shown})" if ops else f"#{_graph_count}"


def _fallback_warning(name: str, reason: str) -> None:
    warnings.warn(f"ttpu: graph {name} runs in eager PyTorch: {reason}", TtpuFallbackWarning, stacklevel=3)


def _reason(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    first = lines[0] if lines else ""
    return first if isinstance(error, (_ttpu.TtpuError, _Unsupported)) else f"{type(error).__name__}: {first}"


class _Unsupported(Exception):
    """A node of a graph that ttpu cannot record."""


def ttpu_backend(gm, example_inputs, **kwargs):
    """Compiles ``gm`` with ttpu through AOTAutograd; falls back to eager PyTorch (with a warning)
    when ttpu cannot take it."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    from . import _device  # noqa: F401  (the device must be registered)

    options = dict(kwargs.pop("options", None) or {})
    if options or kwargs:
        # The graphs run on the ttpu device's plugin (`TTPU_DEVICE_PLUGIN`, else `$TTPU_PJRT_PLUGIN`,
        # else the CPU plugin), chosen once per process: an option would be ignored, so refuse it.
        raise _ttpu.TtpuError(
            f"torch.compile(backend=\"ttpu\") takes no options (got {sorted({**options, **kwargs})}); "
            "the plugin is the ttpu device's: set TTPU_DEVICE_PLUGIN before importing ttpu"
        )
    _adjust_pytorch_once()
    name = _graph_name(gm)
    compiler = _Compiler(name)
    backend = aot_autograd(
        fw_compiler=compiler.compile,
        bw_compiler=compiler.compile,
        partition_fn=min_cut_rematerialization_partition,
        decompositions=_decompositions(),
    )
    from torch.nn.attention import SDPBackend, sdpa_kernel

    # Ttpu tensors reach AOTAutograd as plain fake tensors of the ttpu device (Dynamo traced them
    # through `TtpuTensor.__tensor_flatten__`): AOTAutograd then traces ATen graphs of plain
    # tensors, and at run time the compiled graphs receive the ttpu tensors themselves.
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    traced = [node.meta.get("example_value") for node in placeholders]
    if len(traced) != len(example_inputs):
        traced = [None] * len(example_inputs)
    example_inputs = [_plain_fake(value, fake) for value, fake in zip(example_inputs, traced)]
    try:
        # Attention traces as its math (matrix products and a softmax), which the op table holds,
        # forward and backward; a fused kernel of one backend (the CPU's flash attention) has a
        # backward of its own that ttpu would have to match instead.
        with sdpa_kernel([SDPBackend.MATH]), _empty_device_constants_allowed():
            compiled = backend(gm, example_inputs)
    except (torch._dynamo.exc.RestartAnalysis, torch._dynamo.exc.SkipFrame):
        # Dynamo's own control flow (trace the frame again, differently): not a failure.
        raise
    except Exception as error:  # any reason the graph cannot run on ttpu is a reason to fall back
        _fallback_warning(name, _reason(error))
        return _eager(gm)
    calls["graphs"] += 1
    return compiled


_ADJUSTED = [False]


def _adjust_pytorch_once() -> None:
    """The adjustments of PyTorch's internals the backend needs, installed at its first graph."""
    if _ADJUSTED[0]:
        return
    _parameters_are_parameters_to_guards()
    _optimizer_steps_on_the_device()
    _tangents_restrided_on_the_device()
    _ADJUSTED[0] = True


def _parameters_are_parameters_to_guards() -> None:
    """Dynamo leaves parameters out of its no-aliasing guard (tied weights are one tensor under
    two names), testing ``type(value) is torch.nn.Parameter``; a parameter on the ttpu device is a
    ttpu tensor marked ``_is_param`` (as ``nn.Parameter`` marks subclasses), which that exact-type
    test misses, so the guard would refuse a model with tied weights on the frame it was made
    for. The guard builder's ``istype`` answers as it would for a plain parameter."""
    from torch._dynamo import guards

    from ._device import TtpuTensor

    original = guards.istype

    def istype(obj, allowed):
        if allowed is torch.nn.Parameter and type(obj) is TtpuTensor and getattr(obj, "_is_param", False):
            return True
        return original(obj, allowed)

    guards.istype = istype


def _tangents_restrided_on_the_device() -> None:
    """A compiled backward receives each output's gradient with the strides the output was traced
    with; AOTAutograd restrides one that differs (the zeros autograd makes for an output the loss
    does not use, such as a sliding-window cache's slice) by `empty_strided` and `copy_` on the
    gradient as the graph sees it, which for a ttpu tensor is its inner meta tensor: the copy
    would hold no data. A gradient of the device is restrided on the device instead."""
    from torch._functorch._aot_autograd import runtime_wrappers

    from ._device import TtpuTensor

    original = runtime_wrappers.coerce_to_expected_memory_format

    def coerce(x, memory_format):
        if getattr(x, "_h", None) is None or getattr(x, "_outer_place", None) is None:
            return original(x, memory_format)
        size, stride = memory_format.size, memory_format.stride
        if memory_format.memory_format is not None or size is None or stride is None:
            outer = TtpuTensor._of_inner(x)
            return original(outer, memory_format)._raw
        if x.shape == size and x.stride() == stride:
            return x
        outer = TtpuTensor._of_inner(x)
        restrided = torch.empty_strided(size, stride, dtype=x.dtype, device=outer.device)
        restrided.copy_(outer)
        return restrided._raw

    runtime_wrappers.coerce_to_expected_memory_format = coerce


def _optimizer_steps_on_the_device() -> None:
    """A compiled optimizer step keeps its step counters where its parameters are on CUDA
    (Dynamo creates the state with ``capturable=True`` for CUDA and XPU parameters only); on CPU
    they would be inputs the compiled step reads back to the host at its end. Parameters on the
    ttpu device get the device's counters too, so the step is one program and no host read."""
    try:
        from torch._dynamo.variables.optimizer import OptimizerVariable
    except ImportError:
        return
    original = getattr(OptimizerVariable, "_safe_to_set_capturable", None)
    if original is None or getattr(original, "_ttpu", False):
        return

    def safe_to_set_capturable(self, group):
        params = group.get("params", [])
        if params and "capturable" in group and all(p.device.type == "ttpu" and p not in self.value.state for p in params):
            return True
        return original(self, group)

    safe_to_set_capturable._ttpu = True
    OptimizerVariable._safe_to_set_capturable = safe_to_set_capturable


@contextlib.contextmanager
def _empty_device_constants_allowed():
    """AOTAutograd refuses a graph holding fake tensors (`assert_no_fake_params_or_buffers`), and
    a tensor made on the ttpu device while Dynamo traces is one: transformers' dynamic key-value
    cache starts each layer from an empty tensor made inside the forward, so every training loop
    of a decoder with `use_cache` on (the default) holds some. An empty one carries no data, and
    the compiled graph makes it again at run time (`_constant`), so those are let through; any
    other fake still refuses the graph, which then runs in eager PyTorch with its reason."""
    from torch._dynamo import utils

    strict = utils.assert_no_fake_params_or_buffers

    def lenient(module):
        from torch._subclasses.fake_tensor import is_fake

        for value in (*module.buffers(), *module.parameters()):
            if is_fake(value) and not (value.numel() == 0 and value.device.type == "ttpu"):
                return strict(module)
        return None

    utils.assert_no_fake_params_or_buffers = lenient
    try:
        yield
    finally:
        utils.assert_no_fake_params_or_buffers = strict


def _plain_fake(value, traced=None):
    """What AOTAutograd traces for the input `value`: a ttpu tensor becomes a plain fake tensor of
    the device. `traced` is the graph's example value for it (the fake Dynamo traced the call's
    real tensor as, whose sizes are symbolic where the graph is dynamic)."""
    from ._device import TtpuTensor

    if not isinstance(value, TtpuTensor):
        return value
    from torch._subclasses.fake_tensor import FakeTensor

    if value._h is not None and isinstance(traced, TtpuTensor) and traced._h is None:
        value = traced
    mode = torch._guards.detect_fake_mode()
    if value._h is None:
        fake = value._fake
        plain = fake if fake.device == value.device else FakeTensor(fake.fake_mode, fake, value.device)
    else:
        # A real tensor Dynamo did not trace: a fake of its metadata in the trace's mode.
        with torch.utils._mode_utils.no_dispatch():
            meta = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
        plain = FakeTensor(mode, meta, value.device)
    # AOTAutograd decides what needs gradients from its inputs.
    plain.requires_grad_(value.requires_grad)
    return plain


def _eager(gm):
    """A graph ttpu cannot compile, run by PyTorch op by op: on CPU tensors, or dispatched to the
    device for ttpu tensors (AOTAutograd passes their inner tensors, which stand for them)."""

    def run(*args):
        calls["eager"] += 1
        if any(hasattr(arg, "_outer_place") for arg in args):
            from ._device import TtpuTensor

            args = [TtpuTensor._of_inner(arg) if hasattr(arg, "_outer_place") else arg for arg in args]
        return gm(*args)

    return run


_DECOMPOSITIONS: dict = {}


def _decompositions() -> dict:
    if not _DECOMPOSITIONS:
        from torch._decomp import core_aten_decompositions

        # An op of ttpu's table stays whole: the table is the one set of semantics for `.fx`
        # text, eager dispatch and these graphs, and a decomposition may bring prims it lacks
        # (`lerp` becomes `prims.fma`).
        _DECOMPOSITIONS.update(
            (op, decomposition)
            for op, decomposition in core_aten_decompositions().items()
            if not (isinstance(op, torch._ops.OpOverload) and _in_table(str(op)))
        )
    return _DECOMPOSITIONS


def _in_table(overload: str) -> bool:
    """Whether ttpu's table has `overload`, or, for an in-place one (`lerp_.Scalar`), the
    functional overload functionalization turns it into."""
    if _ttpu.table_has(overload):
        return True
    packet, _, name = overload.rpartition(".")
    return packet.endswith("_") and not packet.endswith("__") and _ttpu.table_has(f"{packet[:-1]}.{name}")


class _Compiler:
    """Compiles each ATen graph AOTAutograd makes of one Dynamo graph (forward, backward or
    inference)."""

    def __init__(self, name: str):
        self.name = name

    def compile(self, gm, example_inputs):
        from torch._functorch.aot_autograd import make_boxed_func

        try:
            graph = _AtenGraph(gm, self.name)
        except _Unsupported as error:
            _fallback_warning(self.name, str(error))
            return _boxed_eager(gm)
        return make_boxed_func(graph)


def _boxed_eager(gm):
    def run(args):
        calls["eager"] += 1
        return gm(*args)

    run._boxed_call = True
    return run


# Operators on sizes that AOTAutograd leaves in its graphs (on SymInts), evaluated on the host.
_SIZE_MATH = {
    operator.add, operator.sub, operator.mul, operator.floordiv, operator.truediv, operator.mod, operator.neg,
    operator.pow, operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge, operator.and_,
    operator.or_, operator.not_, operator.abs, math.ceil, math.floor, math.sqrt,
}


def _size_functions() -> set:
    functions = set(_SIZE_MATH)
    for name in ("sym_max", "sym_min", "sym_not", "sym_float", "sym_int", "sym_ite", "sym_sqrt"):
        function = getattr(torch, name, None)
        if function is not None:
            functions.add(function)
    return functions


class _Value:
    """A tensor of the graph being recorded: its reference and PyTorch's metadata."""

    __slots__ = ("ref", "dtype", "shape", "stride", "offset")

    def __init__(self, ref, dtype, shape, stride, offset):
        self.ref, self.dtype, self.shape, self.stride, self.offset = ref, dtype, shape, stride, offset


class _AtenGraph:
    """One ATen graph: a program per input signature (shapes, strides, dtypes and the values of
    size arguments), recorded on first sight, run as one device step."""

    _boxed_call = True

    def __init__(self, gm, name: str):
        self.gm = gm
        self.name = name
        self.placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
        # Tensors the graph holds itself (lifted constants) are inputs of its programs too. A
        # constant made on the ttpu device while tracing is a fake with no data: empty ones (a
        # key-value cache's first state) are made again; others cannot be.
        self.constants = [node for node in gm.graph.nodes if node.op == "get_attr"]
        from torch._subclasses.fake_tensor import FakeTensor

        for node in self.constants:
            value = _attribute(gm, node.target)
            if isinstance(value, FakeTensor) and value.numel() > 0:
                raise _Unsupported(f"the graph holds `{node.target}`, a tensor made on the device while tracing")
        self.programs: dict = {}
        self.uploads: dict = {}
        size_functions = _size_functions()
        # Refuse at compile time what no signature can record, so the graph falls back whole.
        for node in gm.graph.nodes:
            if node.op == "call_function":
                target = node.target
                if isinstance(target, torch._ops.OpOverload):
                    if str(target) in _SIZE_OPS or _ttpu.table_has(str(target)):
                        continue
                    raise _Unsupported(f"`{target}` is not supported on ttpu")
                if target is operator.getitem or target in size_functions:
                    continue
                raise _Unsupported(f"`{getattr(target, '__name__', target)}` is not an ATen call")
            elif node.op not in ("placeholder", "output", "get_attr"):
                raise _Unsupported(f"a `{node.op}` node")
        self.size_functions = size_functions

    def __call__(self, *args):
        # AOTAutograd calls compiled graphs boxed (one list of arguments), but wrappers on the
        # way may unbox them; a graph's own arguments are never lists.
        args = list(args[0]) if len(args) == 1 and isinstance(args[0], list) else list(args)
        on_device = any(isinstance(arg, _device_tensor_class()) or hasattr(arg, "_h") for arg in args)
        constants = [_constant(self.gm, node.target) for node in self.constants]
        tensors = [self._on_device(arg) if isinstance(arg, torch.Tensor) else arg for arg in args + constants]
        key = tuple(
            (arg.dtype, tuple(arg.shape), tuple(arg.stride()), arg.storage_offset())
            if isinstance(arg, torch.Tensor)
            else (type(arg).__name__, arg)
            for arg in tensors
        )
        entry = self.programs.get(key)
        if entry is None:
            if self.programs and _RECOMPILES.isEnabledFor(logging.INFO):
                _RECOMPILES.info("%s", self._why(key))
            entry = self.programs[key] = self._record(tensors)
            calls["programs"] += 1
            if len(self.programs) == _MANY_PROGRAMS:
                warnings.warn(
                    f"ttpu: graph {self.name} has recorded {_MANY_PROGRAMS} programs, one per input signature: "
                    "sizes that keep changing (a growing key-value cache) compile once each. TTPU_LOG=recompiles "
                    "says what changed; for generate(), cache_implementation=\"static\" decodes with two programs",
                    TtpuRecompileWarning,
                    stacklevel=2,
                )
        program, plan = entry
        from ._device import _wrap

        inputs = [arg for arg in tensors if isinstance(arg, torch.Tensor)]
        results = [_wrap(result) for result in program.run(inputs)]
        calls["ttpu"] += 1
        outputs = []
        for item in plan:
            kind, value = item
            if kind == "result":
                out = results[value]
                outputs.append(out if on_device else out.cpu())
            elif kind == "input":
                outputs.append(args[value])
            else:
                outputs.append(value)
        return outputs

    def _why(self, key) -> str:
        """What makes the signature `key` new: its differences from the closest recorded one."""
        names = [node.name for node in self.placeholders + self.constants]

        def differences(other):
            found = []
            for name, new, old in zip(names, key, other):
                if new == old:
                    continue
                if len(new) == 4 and len(old) == 4:
                    what = ("dtype", "shape", "strides", "storage offset")
                    for label, a, b in zip(what, new, old):
                        if a != b:
                            found.append(f"input `{name}` {label} {list(a) if isinstance(a, tuple) else a} (was {list(b) if isinstance(b, tuple) else b})")
                else:
                    found.append(f"argument `{name}` = {new[1]!r} (was {old[1]!r}, a number the program holds)")
            return found

        closest = min((differences(other) for other in self.programs), key=len)
        return (
            f"ttpu: graph {self.name} records program {len(self.programs) + 1} (one per input signature): "
            + "; ".join(closest)
        )

    def _on_device(self, tensor):
        """``tensor`` on the ttpu device: itself (a ttpu tensor, or the inner tensor of one that
        AOTAutograd passes), or an upload kept while PyTorch leaves the tensor unchanged
        (parameters and buffers of a CPU model upload once per version)."""
        from ._device import TtpuTensor

        if isinstance(tensor, TtpuTensor) or hasattr(tensor, "_h"):
            return tensor
        if tensor.numel() == 0 and _is_fake(tensor):
            # An empty constant made on the device while tracing (see
            # `_empty_device_constants_allowed`): made again, as it holds no data.
            return torch.empty(tensor.shape, dtype=tensor.dtype, device="ttpu")
        key = id(tensor)
        version = (tensor.data_ptr(), tensor._version, tuple(tensor.shape), tensor.dtype)
        cached = self.uploads.get(key)
        if cached is not None and cached[0] == version and cached[1] is tensor:
            return cached[2]
        uploaded = tensor.detach().to("ttpu")
        if tensor.requires_grad or isinstance(tensor, torch.nn.Parameter) or tensor._version == 0:
            self.uploads[key] = (version, tensor, uploaded)
        return uploaded

    def _record(self, args):
        to_ir, _ = _torch_dtypes()
        recorder = _ttpu.GraphRecorder()
        env = {}
        for node, value in zip(self.placeholders + self.constants, args):
            traced = node.meta.get("val")
            if isinstance(value, torch.Tensor) and isinstance(traced, torch.Tensor):
                # A size the graph was traced with as a number is a number its ops hold: other
                # sizes would run ops made for that one.
                for dim, (want, got) in enumerate(zip(traced.shape, value.shape)):
                    if isinstance(want, int) and want != got:
                        raise _ttpu.TtpuError(
                            f"ttpu: graph {self.name} was traced with size {want} at dim {dim} of input "
                            f"`{node.name}` and received {got}"
                        )
            if isinstance(value, torch.Tensor):
                ref = recorder.input(to_ir[value.dtype], list(value.shape), list(value.stride()), value.storage_offset())
                env[node] = _Value(ref, value.dtype, tuple(value.shape), tuple(value.stride()), value.storage_offset())
            else:
                env[node] = value
        _, from_ir = _torch_dtypes()

        def value_of(result):
            if isinstance(result, tuple) and result and isinstance(result[0], _ttpu.Ref):
                ref, dtype, sizes, strides, offset = result
                return _Value(ref, from_ir[dtype], tuple(sizes), tuple(strides), offset)
            if isinstance(result, list):
                return [value_of(item) for item in result]
            return result

        def arg(value):
            if isinstance(value, torch.fx.Node):
                value = env[value]
            if isinstance(value, _Value):
                return value.ref
            if isinstance(value, (list, tuple)):
                return [arg(item) for item in value]
            if isinstance(value, torch.SymInt):
                return int(value)
            return value

        for node in self.gm.graph.nodes:
            if node.op != "call_function":
                continue
            target = node.target
            if target is operator.getitem:
                base, index = node.args
                env[node] = env[base][index]
            elif target in self.size_functions:
                env[node] = target(*[env[a] if isinstance(a, torch.fx.Node) else a for a in node.args])
            elif str(target) in _SIZE_OPS:
                env[node] = _SIZE_OPS[str(target)](env[node.args[0]], *node.args[1:])
            else:
                call_args = tuple(arg(a) for a in node.args)
                call_kwargs = {key: arg(value) for key, value in node.kwargs.items()}
                env[node] = value_of(recorder.call(str(target), call_args, call_kwargs))
        (returned,) = [node.args[0] for node in self.gm.graph.nodes if node.op == "output"]
        refs, plan = [], []
        for item in returned:
            value = env[item] if isinstance(item, torch.fx.Node) else item
            if isinstance(value, _Value):
                plan.append(("result", len(refs)))
                refs.append(value.ref)
            else:
                plan.append(("value", value))
        return recorder.finish(refs), plan


def _sym_size(value, dim):
    return value.shape[dim]


def _sym_stride(value, dim):
    return value.stride[dim]


def _sym_numel(value):
    return math.prod(value.shape)


def _sym_storage_offset(value):
    return value.offset


_SIZE_OPS = {
    "aten.sym_size.int": _sym_size,
    "aten.sym_stride.int": _sym_stride,
    "aten.sym_numel.default": _sym_numel,
    "aten.sym_storage_offset.default": _sym_storage_offset,
}


def _attribute(gm, target: str):
    value = gm
    for part in target.split("."):
        value = getattr(value, part)
    if not isinstance(value, torch.Tensor):
        raise _Unsupported(f"graph attribute `{target}` is a {type(value).__name__}, not a tensor")
    return value


def _is_fake(tensor) -> bool:
    from torch._subclasses.fake_tensor import is_fake

    return is_fake(tensor)


def _constant(gm, target: str):
    """A tensor the graph holds, as its programs read it (an empty fake made again on its device)."""
    from torch._subclasses.fake_tensor import FakeTensor

    value = _attribute(gm, target)
    if isinstance(value, FakeTensor):
        return torch.empty(value.shape, dtype=value.dtype, device=value.device)
    return value


def _device_tensor_class():
    from ._device import TtpuTensor

    return TtpuTensor
