"""The ``ttpu`` device for PyTorch: ``model.to("ttpu")`` and eager PyTorch code, unchanged.

``import ttpu`` registers PyTorch's PrivateUse1 backend renamed ``ttpu`` through PyTorch's own
Python-backend helper (hooks and a device guard, so ``torch.accelerator`` keeps working), and a
``torch.ttpu`` device module. A tensor on the device is a :class:`TtpuTensor`: a wrapper subclass
whose ATen calls reach ``__torch_dispatch__`` below autograd, so ``loss.backward()``,
``torch.optim``, ``clip_grad_norm_``, activation checkpointing and autocast run unchanged and
their ATen calls land here.

Each call crosses to Rust once (``ttpu_device``): the op table builds it (the same table as
exported ``.fx`` programs), it is recorded, not run, and pending work runs as one fused program
at a sync point: a host read (``item``, ``cpu``, printing, ``bool``, sizes the data decides),
the optimizer's step, or ``torch.ttpu.synchronize()``. Views and in-place ops keep PyTorch's
aliasing (a storage shared by views, writes through views reach their base). What this module
knows of an overload is what PyTorch's schema says (functional, view, mutating, in-place view);
what it computes is the table's.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import warnings

import torch
from torch.utils._mode_utils import no_dispatch

from . import _ttpu
from ._convert import _torch_dtypes, to_torch, to_wire
from ._ttpu import TtpuError

NAME = "ttpu"
_UNBOUNDED = 1 << 46

__all__ = ["TtpuTensor", "allow_cpu_fallback", "execution_mode", "stats"]

_TO_IR, _FROM_IR = _torch_dtypes()

# Callables `observer(func, args, kwargs, result)` run after every call dispatched to the device
# (the accuracy mode and the profiler attach here); empty, they cost one test per call.
OBSERVERS: list = []
_DEVICES: list[torch.device] = []
_STATE = threading.local()


class TtpuCpuFallbackWarning(UserWarning):
    """A call ran on the CPU because the ttpu device has no decomposition for it (only with
    ``ttpu.allow_cpu_fallback()``)."""


class TtpuTensor(torch.Tensor):
    """A tensor on the ttpu device. Its value lives in the device's lazy runtime (``_h`` is its
    handle there); its sizes, strides and dtype are PyTorch's."""

    @staticmethod
    def __new__(cls, handle, sizes, strides, offset, dtype, device):
        # The wrapper's storage is never allocated; its size only bounds what `as_strided_` may
        # address, which `set_` and `.data =` use to give the wrapper another view's metadata.
        tensor = torch.Tensor._make_wrapper_subclass(
            cls, sizes, strides=strides, storage_offset=offset, dtype=dtype, device=device, storage_size=_UNBOUNDED
        )
        tensor._h = handle
        return tensor

    __torch_function__ = torch._C._disabled_torch_function_impl

    # `torch.compile` sees a ttpu tensor as a traceable wrapper of one inner tensor, `_raw`: a
    # plain meta tensor of the same sizes, strides and dtype, carrying the handle. While
    # AOTAutograd traces, the inner tensor is a fake one and calls run on it (see `_traced`); at
    # run time the compiled graph receives the inner tensors and runs on their handles, and its
    # results come back wrapped (`__tensor_unflatten__`). The device and the storage offset travel
    # in the context.
    def __tensor_flatten__(self):
        return ["_raw"], (self.device, self.storage_offset())

    @staticmethod
    def __tensor_unflatten__(inner, context, outer_size, outer_stride):
        raw = inner["_raw"]
        device, offset = context
        handle = getattr(raw, "_h", None)
        tensor = TtpuTensor(handle, outer_size, outer_stride, offset, raw.dtype, device)
        if handle is None:
            # A fake inner tensor of the inner one's meta device is made a fake of this device, so
            # it meets the fakes of tensors made on the device while tracing.
            from torch._subclasses.fake_tensor import FakeTensor

            if isinstance(raw, FakeTensor) and raw.device != device:
                raw = FakeTensor(raw.fake_mode, raw, device)
            tensor._fake = raw
        return tensor

    def __coerce_same_metadata_as_tangent__(self, expected_metadata, expected_type=None):
        # A compiled backward traced on plain tensors receives a gradient of the device as its
        # inner tensor (the handle and metadata), which it runs on like any input.
        if expected_type is torch.Tensor and self._h is not None:
            return self._raw
        return None

    @property
    def _raw(self):
        if self._h is None:
            return self._fake
        # One inner tensor per handle: Dynamo's guards compare inner tensors by identity.
        inner = self.__dict__.get("_inner")
        if inner is None or inner._h is not self._h:
            with no_dispatch():
                inner = torch.empty_strided(self.shape, self.stride(), dtype=self.dtype, device="meta")
            inner._h = self._h
            # Where the outer tensor lives, for a graph that falls back and runs it eagerly.
            inner._outer_place = (self.device, self.storage_offset())
            self.__dict__["_inner"] = inner
        return inner

    @staticmethod
    def _of_inner(inner) -> "TtpuTensor":
        """The ttpu tensor an inner tensor (`_raw`) stands for."""
        device, offset = inner._outer_place
        return TtpuTensor(inner._h, inner.shape, inner.stride(), offset, inner.dtype, device)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        if _DEFERRED[0] is not None and torch._C._current_graph_task_id() == -1:
            _raise_deferred()
        first = args[0] if args else None
        if (first._h is None) if type(first) is TtpuTensor else _traced_call(args, kwargs):
            return _traced(func, args, kwargs or {})
        # Another tensor subclass among the arguments (a DTensor beside device tensors, as a
        # foreach step over a mixed parameter list) dispatches first; it hands its local
        # tensors back here.
        if len(types) > 1 and not all(issubclass(kind, TtpuTensor) for kind in types):
            return NotImplemented
        handler = _HANDLERS.get(func)
        if handler is None:
            handler = _handler(func)
        kwargs = kwargs or {}
        if _ANY_REFUSED[0]:
            _check_refused(args)
            _check_refused(kwargs.values())
        try:
            result = handler(args, kwargs)
        except Exception as error:
            # PyTorch's autograd engine aborts the process when a call its C++ backward nodes
            # make on the device's thread raises; the error waits for the next call instead.
            if torch._C._current_graph_task_id() == -1:
                raise
            result = _deferred(error, func, args, kwargs)
        if OBSERVERS:
            for observer in OBSERVERS:
                observer(func, args, kwargs, result)
        return result

    def __repr__(self, *, tensor_contents=None):
        # One flush to format the values on the host; PyTorch's own printing of this tensor
        # around them (device, dtype and grad_fn suffixes as for any accelerator).
        if self._h is None:
            # A tensor of a trace (debug logs print them): its fake, which has no values.
            return f"TtpuTensor(fake={self._fake!r}, device='{self.device}')"
        if tensor_contents is None:
            with torch.no_grad():
                host = _read(self, "print")
            if host.numel() > 0:
                tensor_contents = torch._tensor_str._tensor_str(host, len("tensor("))
        text = torch._tensor_str._str(self, tensor_contents=tensor_contents)
        # PyTorch names a subclass where it prints `tensor(`; this is a plain device tensor, and a
        # parameter, as on any device.
        text = "tensor(" + text.split("(", 1)[1]
        return "Parameter containing:\n" + text if getattr(self, "_is_param", False) else text

    def tolist(self):
        return _read(self, "tolist").tolist()

    def numpy(self, *, force: bool = False):
        if force:
            return _read(self, "numpy").numpy()
        raise TypeError(
            f"can't convert {self.device} device type tensor to numpy. "
            "Use Tensor.cpu() to copy the tensor to host memory first."
        )

    def __reduce_ex__(self, protocol):
        # torch.save stores the host value and loads it back onto the same device.
        host = _read(self, "torch.save")
        return (
            torch._utils._rebuild_device_tensor_from_cpu_tensor,
            (host, self.dtype, str(self.device), self.requires_grad),
        )

    @property
    def data(self):
        return self.detach()

    @data.setter
    def data(self, value):
        if not isinstance(value, TtpuTensor):
            value = value.to(self.device)
        with torch.no_grad():
            self.set_(value)

    def untyped_storage(self):
        if self._h is None:
            return self._fake.untyped_storage()
        return _Storage(self)


def _traced_call(args, kwargs) -> bool:
    """Whether the call is traced by `torch.compile`: one of its ttpu tensors wraps a fake tensor
    (Dynamo traces), or a fake tensor of the device meets a real ttpu tensor made while tracing
    (AOTAutograd traces plain fakes)."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch._subclasses.functional_tensor import FunctionalTensor

    for value in torch.utils._pytree.tree_leaves((args, kwargs)):
        if isinstance(value, TtpuTensor):
            if value._h is None:
                return True
        elif isinstance(value, (FakeTensor, FunctionalTensor)):
            return True
    return False


def _fake_mode(wrapped):
    """The fake mode of a trace: that of a traced ttpu tensor's fake (under functionalization, the
    fake inside its functional tensor), else the one in context."""
    for value in wrapped:
        fake = value._fake
        fake = getattr(fake, "elem", fake)
        mode = getattr(fake, "fake_mode", None)
        if mode is not None:
            return mode
    return torch._guards.detect_fake_mode()


def _traced(func, args, kwargs):
    """A call while `torch.compile` traces: the call on fake tensors. A ttpu tensor that wraps a
    fake stands for it, and the results are wrapped again (Dynamo's trace of ttpu tensors); a real
    ttpu tensor (a constant the traced code made) takes part as a fake of its metadata."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.utils._pytree import tree_leaves, tree_map

    leaves = tree_leaves((args, kwargs))
    wrapped = [value for value in leaves if isinstance(value, TtpuTensor) and value._h is None]
    device = next(value.device for value in leaves if isinstance(value, torch.Tensor) and value.device.type == NAME)

    def unwrap(value):
        if not isinstance(value, TtpuTensor):
            return value
        if value._h is None:
            return value._fake
        with no_dispatch():
            meta = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
        return FakeTensor(_fake_mode(wrapped), meta, value.device)

    unwrapped = tree_map(unwrap, (args, kwargs))
    out = func(*unwrapped[0], **unwrapped[1])
    if not wrapped:
        return out

    def wrap(value):
        if isinstance(value, torch.Tensor) and not isinstance(value, TtpuTensor):
            tensor = TtpuTensor(None, value.shape, value.stride(), value.storage_offset(), value.dtype, device)
            tensor._fake = value
            return tensor
        return value

    return tree_map(wrap, out)


class _Storage:
    """What ``tensor.untyped_storage()`` is asked for on the device: its identity (equal for a
    tensor and its views, as ``data_ptr`` is), its size, and its device."""

    def __init__(self, tensor: TtpuTensor):
        self._tensor = tensor
        self._id, self._numel = _ttpu.device_storage(tensor._h)

    def data_ptr(self) -> int:
        return self._id

    def nbytes(self) -> int:
        return self._numel * self._tensor.element_size()

    def size(self) -> int:
        return self.nbytes()

    @property
    def device(self) -> torch.device:
        return self._tensor.device

    def __len__(self) -> int:
        return self.nbytes()

    def resize_(self, nbytes: int) -> "_Storage":
        """0 releases the storage's memory, its own size takes it back (FSDP frees unsharded
        parameters between uses this way); other sizes are refused."""
        _ttpu.device_storage_resize(self._tensor._h, int(nbytes))
        self._id, self._numel = _ttpu.device_storage(self._tensor._h)
        return self


# ---- results ----


def _wrap(result):
    """A native result as tensors: `(handle, sizes, strides, offset, dtype, device)` tuples."""
    if isinstance(result, tuple) and result and isinstance(result[0], _ttpu.Handle):
        handle, sizes, strides, offset, dtype, device = result
        return TtpuTensor(handle, sizes, strides, offset, _FROM_IR[dtype], _DEVICES[device])
    if isinstance(result, list):
        return [_wrap(item) for item in result]
    return result


def _read(tensor: TtpuTensor, reason: str) -> torch.Tensor:
    """The tensor's value as a CPU tensor (a host read: pending work runs first)."""
    if _DEFERRED[0] is not None and torch._C._current_graph_task_id() == -1:
        _raise_deferred()
    if getattr(tensor, "_refused", None):
        raise RuntimeError(tensor._refused)
    return to_torch(_ttpu.device_read(tensor._h, reason))


# An error a call raised inside the backward pass, raised at the next call or host read outside
# it (see `_deferred`).
_DEFERRED: list = [None]


def _deferred(error: Exception, func, args, kwargs):
    """Results of the shapes `func` gives (zeros) for a call that raised `error` inside the
    backward pass, where raising would abort the process (PyTorch's engine cannot carry an error
    out of a C++ node on the device's thread); `error` is raised at the next call or host read,
    as CUDA reports an error at the next synchronizing call. Where even the shapes cannot be
    had, the error is raised at once."""
    if _DEFERRED[0] is None:
        _DEFERRED[0] = error
    meta = _meta
    device = next((value.device for value in args if isinstance(value, TtpuTensor)), torch.device("ttpu", 0))
    try:
        shapes = func(*meta(list(args)), **{key: meta(value) for key, value in kwargs.items()})
    except Exception:
        # No meta function (some `*_backward` overloads): the shapes come from running the call
        # on the CPU, counted as a fallback; the error is still raised at the next call.
        try:
            shapes = _cpu_fallback(func, _name(func), args, kwargs)
        except Exception:
            raise error from None

    def zeros(value):
        if isinstance(value, torch.Tensor):
            return torch.zeros(value.shape, dtype=value.dtype, device=device)
        if isinstance(value, (list, tuple)):
            return type(value)(zeros(item) for item in value)
        return value

    return zeros(shapes)


def _raise_deferred():
    error, _DEFERRED[0] = _DEFERRED[0], None
    try:
        raised = type(error)(
            f"{error} (raised inside the backward pass, where PyTorch's autograd engine cannot carry an "
            "error out of the device's thread; the gradients of that pass are not valid)"
        )
    except Exception:
        raise error from None
    raise raised from error


def _host_of(tensor: torch.Tensor):
    return to_wire("a CPU tensor", tensor)


def _upload(tensor: torch.Tensor, device: torch.device) -> TtpuTensor:
    buffer, dtype, shape = to_wire("a CPU tensor", tensor)
    return _wrap(_ttpu.device_upload(_index(device), buffer, dtype, shape))


def _index(device) -> int:
    if device is None:
        return torch.ttpu.current_device()
    device = torch.device(device)
    return torch.ttpu.current_device() if device.index is None else device.index


# ---- handlers: one per overload, made on first sight from its schema ----

_HANDLERS: dict = {}
_FALLBACK = {"enabled": False, "warned": set()}


def _name(func) -> str:
    return str(func)


def _user_line() -> str:
    """Where the user's code made the current call: the innermost frame outside PyTorch and ttpu."""
    import traceback

    skip = (os.path.dirname(torch.__file__), os.path.dirname(__file__))
    for frame in reversed(traceback.extract_stack()):
        if not frame.filename.startswith(skip) and "<frozen" not in frame.filename:
            return f"{frame.filename}:{frame.lineno}"
    return "<unknown>"


def _functional_overload(func) -> str | None:
    """The functional overload computing what the mutating (in-place, ``out=``) or in-place view
    overload ``func`` writes: same arguments, none written, under the name without the trailing
    underscore (in-place) or the same name (``out=``)."""
    schema = func._schema
    base = schema.name.split("::")[-1]
    name = base[:-1] if base.endswith("_") and not base.endswith("__") else base
    packet = getattr(getattr(torch.ops, func.namespace), name, None)
    if packet is None:
        return None
    wanted = [
        (arg.name, str(arg.type))
        for arg in schema.arguments
        if not (arg.kwarg_only and arg.alias_info is not None and arg.alias_info.is_write)
    ]
    for overload in packet.overloads():
        candidate = getattr(packet, overload)
        arguments = candidate._schema.arguments
        if any(arg.alias_info is not None and arg.alias_info.is_write for arg in arguments):
            continue
        if [(arg.name, str(arg.type)) for arg in arguments] == wanted:
            return str(candidate)
    return None


def _handler(func):
    """The handler of ``func``: its special one (reads, copies between devices), else the
    generic one its schema gives."""
    special = _SPECIAL.get(func)
    if special is None and func in _UNREADABLE:
        special = _without_unreadable(func)
    if special is None and func.namespace in NAMESPACE_HANDLERS:
        special = NAMESPACE_HANDLERS[func.namespace](func)
    handler = special if special is not None else _generic(func)
    _HANDLERS[func] = handler
    return handler


# Handlers of ops that modules ttpu does not import define (FSDP's `fsdp.*`), by namespace:
# `namespace -> (overload -> handler or None)`, asked when an overload of theirs first arrives.
NAMESPACE_HANDLERS: dict = {}

_REGISTERED: dict = {}


def _register(func):
    """``(op id, whether the table runs it, kind)`` of ``func``, registered once from its schema."""
    known = _REGISTERED.get(func)
    if known is not None:
        return known
    name = _name(func)
    schema = func._schema
    arguments = schema.arguments
    written = [
        (position, arg.name)
        for position, arg in enumerate(arguments)
        if arg.alias_info is not None and arg.alias_info.is_write
    ]
    returns = schema.returns
    if torch.Tag.inplace_view in func.tags:
        kind, functional = "inplace_view", _functional_overload(func)
    elif written:
        kind, functional = "mutating", _functional_overload(func)
    elif returns and returns[0].alias_info is not None:
        kind, functional = "view", None
    else:
        kind, functional = "functional", None
    fresh = sum(1 for ret in returns if ret.alias_info is None)
    op, supported = _ttpu.device_register(name, kind, written, fresh, functional)
    _REGISTERED[func] = (op, supported, kind)
    return _REGISTERED[func]


_GENERIC: dict = {}


def _generic(func):
    """The handler that runs ``func`` through the op table, as its schema says."""
    known = _GENERIC.get(func)
    if known is not None:
        return known
    name = _name(func)
    if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd"):
        # Composite overloads (`to`, `reshape`, `contiguous`, ...) reach the device only when
        # called below autograd, as decompositions call them. Their composite kernel is what
        # PyTorch runs above autograd, and it decides whether the result aliases the input.
        handler = _GENERIC[func] = lambda args, kwargs: func.decompose(*args, **kwargs)
        return handler
    op, supported, kind = _register(func)
    schema = func._schema
    arguments, returns = schema.arguments, schema.returns
    if not supported:
        handler = _decomposed(func, name, kind) or _unsupported(func, name)
    elif kind == "inplace_view":
        handler = _inplace_view(func, op)
    elif kind == "mutating":
        handler = _mutating(func, op, arguments, returns)
    else:
        many = len(returns) > 1
        single_list = len(returns) == 1 and str(returns[0].type).endswith("[]")

        def handler(args, kwargs):
            result = _wrap(_ttpu.device_dispatch(op, args, kwargs))
            if many and isinstance(result, list):
                return tuple(result)
            if single_list and result is None:
                return []
            return result

    _GENERIC[func] = handler
    return handler


def _mutating(func, op, arguments, returns):
    # Results that alias an argument are that argument; the others come back from the device,
    # in order.
    by_set = {}
    for position, arg in enumerate(arguments):
        if arg.alias_info is not None:
            for alias in arg.alias_info.before_set:
                by_set[alias] = (position, arg.name)
    plan = []
    for ret in returns:
        if ret.alias_info is not None and ret.alias_info.before_set:
            plan.append(by_set.get(next(iter(ret.alias_info.before_set))))
        else:
            plan.append(None)

    def handler(args, kwargs):
        fresh = _wrap(_ttpu.device_dispatch(op, args, kwargs))
        fresh = fresh if isinstance(fresh, list) else ([] if fresh is None else [fresh])
        results = []
        for item in plan:
            if item is None:
                results.append(fresh.pop(0))
            else:
                position, name = item
                results.append(args[position] if position < len(args) else kwargs[name])
        if not results:
            return None
        return results[0] if len(results) == 1 else tuple(results)

    return handler


def _inplace_view(func, op):
    def handler(args, kwargs):
        _ttpu.device_dispatch(op, args, kwargs)
        # The wrapper's own sizes and strides change as the op says (the trick PyTorch's
        # functional tensors use): its metadata, not its data.
        with no_dispatch():
            func(*args, **kwargs)
        return args[0]

    return handler


_DECOMPOSITIONS: dict = {}
_DECOMPOSED: dict = {}

# PyTorch decompositions that do not compute their overload's results, left out so that a call
# is refused rather than answered wrongly: PyTorch 2.15's `_scaled_dot_product_flash_attention_for_cpu`
# returns the attention weights (`[B, H, L, S]`) where the kernel returns the logsumexp
# (`[B, H, L]`).
_WRONG_DECOMPOSITIONS = ("aten._scaled_dot_product_flash_attention_for_cpu.default",)


def _decomposition(func):
    """PyTorch's own decomposition of ``func`` (the one ``run_decompositions()`` applies before
    a program is exported, so the device computes what the exported program computes)."""
    if not _DECOMPOSITIONS:
        from torch._decomp import core_aten_decompositions, decomposition_table

        _DECOMPOSITIONS.update(decomposition_table)
        _DECOMPOSITIONS.update(core_aten_decompositions())
        for name in _WRONG_DECOMPOSITIONS:
            _DECOMPOSITIONS.pop(_op_named(name), None)
    return _DECOMPOSITIONS.get(func)


def _op_named(name: str):
    namespace, op, overload = name.split(".")
    return getattr(getattr(getattr(torch.ops, namespace), op), overload)


def _decomposed(func, name, kind):
    """A handler running an overload the table lacks through PyTorch's decomposition of it (of
    its functional form, for a mutating overload: the results are then copied into the tensors
    it writes); ``None`` when PyTorch has none."""
    if kind == "mutating":
        functional = _functional_overload(func)
        target = _op_named(functional) if functional else None
        decomposition = _decomposition(target) if target is not None else None
        if decomposition is None:
            return None
        arguments = func._schema.arguments
        written = [
            (position, arg.name)
            for position, arg in enumerate(arguments)
            if arg.alias_info is not None and arg.alias_info.is_write
        ]
        returns_fresh = [ret.alias_info is None for ret in func._schema.returns]
        out_names = {arg.name for arg in arguments if arg.kwarg_only and arg.alias_info is not None}

        def mutating(args, kwargs):
            _DECOMPOSED[name] = _DECOMPOSED.get(name, 0) + 1
            result = decomposition(*args, **{k: v for k, v in kwargs.items() if k not in out_names})
            results = list(result) if isinstance(result, (tuple, list)) else [result]
            fresh = results[: sum(returns_fresh)]
            new_values = results[sum(returns_fresh):] or results
            targets = []
            for position, arg_name in written:
                target = args[position] if position < len(args) else kwargs.get(arg_name)
                targets.extend(target if isinstance(target, (list, tuple)) else [target])
            for target, value in zip(targets, new_values):
                if target is not None:
                    aten.copy_.default(target, value)
            out = []
            for is_fresh in returns_fresh:
                out.append(fresh.pop(0) if is_fresh else targets.pop(0))
            return None if not out else (out[0] if len(out) == 1 else tuple(out))

        return mutating
    decomposition = _decomposition(func)
    if decomposition is None:
        return None

    def decomposed(args, kwargs):
        _DECOMPOSED[name] = _DECOMPOSED.get(name, 0) + 1
        return decomposition(*args, **kwargs)

    return decomposed


# Forward overloads whose backward overload has neither a table entry nor a PyTorch
# decomposition: where a gradient is wanted, autograd on the device records PyTorch's
# decomposition of the forward instead (`_autograd_through_decomposition`), so the backward is
# made of ops the device has.
_DECOMPOSED_FOR_AUTOGRAD = (
    "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d",
    "_upsample_nearest_exact1d", "_upsample_nearest_exact2d", "_upsample_nearest_exact3d",
    "upsample_linear1d", "upsample_bilinear2d", "upsample_bicubic2d", "upsample_trilinear3d",
    "replication_pad1d", "replication_pad2d", "replication_pad3d",
    "softshrink", "hardshrink", "grid_sampler_2d",
    "multi_margin_loss", "multilabel_margin_loss_forward",
)


def _autograd_through_decomposition(func):
    decomposition = _decomposition(func)

    def kernel(*args, **kwargs):
        wants_grad = torch.is_grad_enabled() and any(
            isinstance(value, torch.Tensor) and value.requires_grad
            for value in (*args, *kwargs.values())
        )
        if wants_grad:
            result = decomposition(*args, **kwargs)
            if result is not NotImplemented:
                return result
            # PyTorch's decomposition declines these arguments (a size that does not divide):
            # refused here, in the forward, rather than left without a gradient.
            raise NotImplementedError(
                f"ttpu: the gradient of `{_name(func)}` for these arguments is not supported on the ttpu "
                "device: its backward overload is not, and PyTorch's decomposition of it declines them "
                "(the call works under torch.no_grad())"
            )
        with torch._C._AutoDispatchBelowAutograd():
            return func(*args, **kwargs)

    return kernel


def _unsupported(func, name):
    def handler(args, kwargs):
        if func.namespace not in ("aten", "prims") and _ttpu.table_has(name):
            # A custom op whose kernel was registered since its first call here: handled anew,
            # the kernel's way.
            for known in (_REGISTERED, _GENERIC, _HANDLERS):
                known.pop(func, None)
            return _handler(func)(args, kwargs)
        if not _FALLBACK["enabled"]:
            raise NotImplementedError(
                f"ttpu: `{name}` is not supported on the ttpu device (called at {_user_line()}); "
                "docs/ops.md lists what is, and ttpu.allow_cpu_fallback() runs such calls on the CPU"
            )
        return _cpu_fallback(func, name, args, kwargs)

    return handler


def _cpu_fallback(func, name, args, kwargs):
    if name not in _FALLBACK["warned"]:
        _FALLBACK["warned"].add(name)
        warnings.warn(
            f"ttpu: `{name}` ran on the CPU (no decomposition on the ttpu device), called at {_user_line()}",
            TtpuCpuFallbackWarning,
            stacklevel=3,
        )
    _ttpu.device_count_fallback(name)
    device = None
    hosts = {}

    def to_host(value):
        nonlocal device
        if isinstance(value, TtpuTensor):
            device = device or value.device
            host = _read(value, f"cpu fallback of {name}")
            hosts[id(host)] = value
            return host
        if isinstance(value, (list, tuple)):
            return type(value)(to_host(item) for item in value)
        if isinstance(value, torch.device) and value.type == NAME:
            return torch.device("cpu")
        return value

    host_args = to_host(list(args))
    host_kwargs = {key: to_host(value) for key, value in kwargs.items()}
    if "device" in host_kwargs and host_kwargs["device"] is not None:
        host_kwargs["device"] = "cpu"
    with no_dispatch():
        out = func(*host_args, **host_kwargs)
    # Writes into arguments go back to the device tensors they came from.
    for host_id, tensor in hosts.items():
        for host in _flat(host_args) + _flat(list(host_kwargs.values())):
            if id(host) == host_id and isinstance(host, torch.Tensor):
                _copy_into(tensor, host)

    def to_device(value):
        if isinstance(value, torch.Tensor) and not isinstance(value, TtpuTensor):
            original = hosts.get(id(value))
            return original if original is not None else _upload(value, device or _DEVICES[0])
        if isinstance(value, (list, tuple)):
            return type(value)(to_device(item) for item in value)
        return value

    return to_device(out)


def _flat(values):
    out = []
    for value in values:
        if isinstance(value, (list, tuple)):
            out.extend(_flat(value))
        else:
            out.append(value)
    return out


def _copy_into(tensor: TtpuTensor, host: torch.Tensor) -> None:
    with torch.no_grad():
        aten.copy_.default(tensor, _upload(host, tensor.device))


aten = torch.ops.aten


# ---- calls that read data or move it between devices ----


def _item(args, kwargs):
    return _read(args[0], "item").item()


def _is_nonzero(args, kwargs):
    return bool(_read(args[0], "bool").item())


def _equal(args, kwargs):
    a, b = (_read(x, "equal") if isinstance(x, TtpuTensor) else x for x in args[:2])
    return torch.equal(a, b)


def _to_copy(args, kwargs):
    (tensor,) = args[:1]
    device = kwargs.get("device")
    if device is not None:
        device = torch.device(device)
        if device.type != NAME:
            host = _read(tensor, "to cpu")
            rest = {k: v for k, v in kwargs.items() if k not in ("device", "pin_memory", "non_blocking")}
            return aten._to_copy.default(host, **rest) if rest else host
        if _index(device) != tensor.device.index:
            moved = _wrap(_ttpu.device_to(tensor._h, _index(device)))
            rest = {k: v for k, v in kwargs.items() if k != "device"}
            return aten._to_copy.default(moved, **rest) if rest.get("dtype") is not None else moved
    return _generic(aten._to_copy.default)(args, kwargs)


def _copy_(args, kwargs):
    dst, src = args[0], args[1]
    if not isinstance(dst, TtpuTensor):
        # A device-to-host copy into a CPU tensor.
        host = _read(src, "copy to cpu")
        with no_dispatch():
            dst.copy_(host)
        return dst
    if not isinstance(src, TtpuTensor):
        src = _upload(src.detach(), dst.device)
    elif src.device != dst.device:
        src = _wrap(_ttpu.device_to(src._h, dst.device.index))
    return _generic(aten.copy_.default)((dst, src, *args[2:]), kwargs)


def _set_(args, kwargs):
    tensor, source = args[0], args[1]
    if not isinstance(source, TtpuTensor):
        source = _upload(source, tensor.device)
    same = (tensor.shape, tensor.stride(), tensor.storage_offset(), tensor.dtype) == (
        source.shape, source.stride(), source.storage_offset(), source.dtype
    )
    if same:
        _ttpu.device_rebind(tensor._h, source._h)
        return tensor
    if tensor.dtype != source.dtype:
        raise RuntimeError(
            f"ttpu: set_ of a {tensor.dtype} tensor to a {source.dtype} one is not supported on the ttpu device"
        )
    _ttpu.device_rebind(tensor._h, source._h)
    with no_dispatch():
        tensor.as_strided_(source.shape, source.stride(), source.storage_offset())
    return tensor


def _lift_fresh(args, kwargs):
    return args[0]


def _eye_out(args, kwargs):
    """`eye.out(n, *, out)` / `eye.m_out(n, m, *, out)`: what `torch.eye` on the device becomes
    (PyTorch's kernel fills an empty tensor), built from two iotas compared."""
    out = kwargs.get("out", args[-1] if args and isinstance(args[-1], torch.Tensor) else None)
    sizes = [value for value in args if not isinstance(value, torch.Tensor)]
    n = int(sizes[0])
    m = int(sizes[1]) if len(sizes) > 1 else n
    if n < 0 or m < 0:
        raise RuntimeError(f"n must be greater or equal to 0, got {n if n < 0 else m}")
    rows = torch.arange(n, device=out.device).unsqueeze(1)
    cols = torch.arange(m, device=out.device).unsqueeze(0)
    identity = (rows == cols).to(out.dtype)
    if tuple(out.shape) != (n, m):
        # PyTorch resizes `out` (empty, from `torch.eye`): it takes the new tensor's storage.
        return out.set_(identity)
    out.copy_(identity)
    return out


# Results the op table refuses to make up (their value follows no rule another algorithm can
# reproduce), by overload: the flag that asks for them and, by result index, what they are.
# PyTorch asks for them whenever a tensor subclass is involved (`eigvalsh` calls `_linalg_eigh`
# with `compute_v=True` on the device), so the call runs without them and they come back as
# placeholders that refuse to be read or used (`_refused`).
_UNREADABLE = {
    aten._linalg_eigh.default: ("compute_v", 2, {1: "the eigenvectors of linalg.eigh"}),
    aten._linalg_svd.default: (
        "compute_uv",
        3,
        {0: "the left singular vectors of linalg.svd", 2: "the right singular vectors of linalg.svd"},
    ),
}
_ANY_REFUSED = [False]


def _without_unreadable(func):
    flag, position, unreadable = _UNREADABLE[func]
    generic = _generic(func)

    def handler(args, kwargs):
        asked = kwargs.get(flag, args[position] if len(args) > position else True)
        if not asked:
            return generic(args, kwargs)
        args = list(args)
        if len(args) > position:
            args[position] = False
        else:
            kwargs = {**kwargs, flag: False}
        results = list(generic(tuple(args), kwargs))
        shapes = func(*[_meta(value) for value in args[:position]], **{k: _meta(v) for k, v in kwargs.items() if k != flag})
        for index, what in unreadable.items():
            placeholder = torch.zeros(shapes[index].shape, dtype=shapes[index].dtype, device=results[0].device)
            placeholder._refused = (
                f"ttpu: reading {what} is refused: each is unique only up to its sign (a repeated value's basis "
                "up to a rotation), which LAPACK fixes by the course of its own algorithm; the values, and what "
                "does not depend on that choice (linalg.eigvalsh, linalg.svdvals, the pseudo-inverse, the matrix "
                "norms), are computed"
            )
            results[index] = placeholder
        _ANY_REFUSED[0] = True
        return tuple(results)

    return handler


def _meta(value):
    if isinstance(value, torch.Tensor):
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
    if isinstance(value, (list, tuple)):
        return type(value)(_meta(item) for item in value)
    return value


def _check_refused(values):
    """Raises where one of `values` (a call's arguments) is a result `_UNREADABLE` refused."""
    for value in values:
        if isinstance(value, (list, tuple)):
            _check_refused(value)
        elif isinstance(value, TtpuTensor) and getattr(value, "_refused", None):
            raise RuntimeError(value._refused)


_SPECIAL = {
    aten._local_scalar_dense.default: _item,
    aten.is_nonzero.default: _is_nonzero,
    aten.equal.default: _equal,
    aten._to_copy.default: _to_copy,
    aten.copy_.default: _copy_,
    aten.set_.source_Tensor: _set_,
    aten.lift_fresh.default: _lift_fresh,
    aten.eye.out: _eye_out,
    aten.eye.m_out: _eye_out,
    # Device memory is never pinned host memory (checkpoint writers ask).
    aten.is_pinned.default: lambda args, kwargs: False,
}


# ---- factories and copies PyTorch makes without Python dispatch (PrivateUse1 kernels) ----


def _factory(func):
    def kernel(*args, **kwargs):
        if kwargs.get("pin_memory"):
            raise RuntimeError(_PINNED_MEMORY)
        op, supported, _ = _register(func)
        if not supported:
            return _generic(func)(args, kwargs)
        return _wrap(_ttpu.device_dispatch(op, args, kwargs, _index(kwargs.get("device"))))

    return kernel


def _copy_from(src, dst, non_blocking=False):
    """A copy between the CPU and the device that PyTorch makes with Python dispatch off
    (``torch.tensor(data, device="ttpu")``)."""
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(dst, FakeTensor) or (isinstance(dst, TtpuTensor) and dst._h is None):
        # While `torch.compile` traces: the copy is part of the graph, its result only metadata.
        return dst
    if isinstance(dst, TtpuTensor):
        return _copy_((dst, src), {})
    host = _read(src, "copy to cpu")
    with no_dispatch():
        dst.copy_(host)
    return dst


# ---- autocast: PyTorch's CPU policy ----

# The ops autocast runs in the lower precision on the CPU (PyTorch's `lower_precision_fp` list for
# the CPU), and the ones it runs in float32; every other op runs in the dtype it is given.
_AUTOCAST_LOWER = (
    "conv1d", "conv2d", "conv3d", "bmm", "mm", "linalg_vecdot", "baddbmm", "addmm", "addbmm", "linear",
    "_convolution", "matmul", "conv_tbc", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "prelu",
    "scaled_dot_product_attention",
)
_AUTOCAST_FP32 = (
    "avg_pool3d", "binary_cross_entropy", "grid_sampler", "polar", "prod", "quantile", "nanquantile", "stft",
    "cdist", "trace", "view_as_complex", "cholesky", "cholesky_inverse", "cholesky_solve", "inverse", "lu_solve",
    "orgqr", "ormqr", "pinverse", "max_pool3d", "max_unpool2d", "max_unpool3d", "adaptive_avg_pool3d",
    "reflection_pad1d", "reflection_pad2d", "replication_pad1d", "replication_pad2d", "replication_pad3d",
    "mse_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d", "hinge_embedding_loss", "poisson_nll_loss",
    "smooth_l1_loss", "cross_entropy_loss", "l1_loss", "huber_loss", "margin_ranking_loss", "soft_margin_loss",
    "triplet_margin_loss", "multi_margin_loss", "ctc_loss", "kl_div", "multilabel_margin_loss",
    "binary_cross_entropy_with_logits",
)


def _autocast_kernel(op, lower: bool):
    key = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)

    def kernel(*args, **kwargs):
        dtype = torch.get_autocast_dtype(NAME) if lower else torch.float32

        def cast(value):
            if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != torch.float64:
                return value.to(dtype)
            if isinstance(value, (list, tuple)):
                return type(value)(cast(item) for item in value)
            return value

        with torch._C._ExcludeDispatchKeyGuard(key):
            return op(*cast(args), **{name: cast(value) for name, value in kwargs.items()})

    return kernel


# ---- the device module, torch.ttpu ----


class _Stream:
    """A stream of the device: the device runs one lazy program at a time, so streams order
    nothing and every wait is already satisfied."""

    def __init__(self, device=None, priority=0, **kwargs):
        self.device = torch.device(NAME, _index(device))
        self.device_index = self.device.index
        # c10's DeviceType number, as `torch.Stream.device_type` gives it (PrivateUse1).
        self.device_type = 20
        self.stream_id = 0
        self.priority = priority

    def wait_stream(self, stream):
        pass

    def wait_event(self, event):
        pass

    def record_event(self, event=None):
        event = event or _Event()
        event.record(self)
        return event

    def synchronize(self):
        _ttpu.device_synchronize("stream synchronize", check=True)

    def query(self):
        return True

    def __eq__(self, other):
        return isinstance(other, _Stream) and other.device == self.device

    def __hash__(self):
        return hash((NAME, self.device_index))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Event:
    """An event of the device (see :class:`_Stream`)."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self.enable_timing = enable_timing

    def record(self, stream=None):
        pass

    def wait(self, stream=None):
        pass

    def query(self):
        return True

    def synchronize(self):
        _ttpu.device_synchronize("event synchronize", check=True)


class _DeviceModule:
    """``torch.ttpu``: the device module, in the style of ``torch.cuda``."""

    Stream = _Stream
    Event = _Event

    def __init__(self):
        self._current = 0
        self._count = 1

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def _is_in_bad_fork(self) -> bool:
        return False

    def device_count(self) -> int:
        return self._count

    def current_device(self) -> int:
        return self._current

    def set_device(self, device) -> None:
        index = device if isinstance(device, int) else torch.device(device).index or 0
        if not 0 <= index < self._count:
            raise RuntimeError(f"invalid device ttpu:{index}: the plugin has {self._count} device(s)")
        self._current = index

    def get_device_name(self, device=None) -> str:
        return f"ttpu ({_PLATFORM[0]})"

    def synchronize(self, device=None) -> None:
        if _DEFERRED[0] is not None:
            _raise_deferred()
        _ttpu.device_synchronize("synchronize", check=True)

    def manual_seed(self, seed) -> None:
        _ttpu.device_manual_seed(int(seed) & 0xFFFF_FFFF_FFFF_FFFF)

    def manual_seed_all(self, seed) -> None:
        self.manual_seed(seed)

    def seed(self) -> None:
        self.manual_seed(torch.initial_seed())

    def seed_all(self) -> None:
        self.seed()

    def initial_seed(self) -> int:
        return _ttpu.device_rng_state()[0]

    def get_rng_state(self, device=None) -> torch.Tensor:
        seed, draws = _ttpu.device_rng_state()
        return torch.tensor([seed, draws], dtype=torch.uint64).view(torch.uint8)

    def set_rng_state(self, state, device=None) -> None:
        seed, draws = state.view(torch.uint64).tolist()
        _ttpu.device_set_rng_state(seed, draws)

    def get_rng_state_all(self):
        return [self.get_rng_state()]

    def set_rng_state_all(self, states) -> None:
        self.set_rng_state(states[0])

    def get_amp_supported_dtype(self):
        return [torch.bfloat16, torch.float16]

    def is_bf16_supported(self, including_emulation: bool = True) -> bool:
        return True

    def current_stream(self, device=None) -> _Stream:
        return _Stream(device)

    def default_stream(self, device=None) -> _Stream:
        return _Stream(device)

    def stream(self, stream=None):
        return contextlib.nullcontext(stream)

    def set_stream(self, stream) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def memory_allocated(self, device=None) -> int:
        """Bytes the storages of live tensors on the device hold (views count once)."""
        return _ttpu.device_memory(_index(device))[0]

    def max_memory_allocated(self, device=None) -> int:
        """The most :meth:`memory_allocated` has been since the last reset."""
        return _ttpu.device_memory(_index(device))[1]

    # The runtime keeps no cache of freed memory: what is reserved is what is allocated.
    def memory_reserved(self, device=None) -> int:
        return self.memory_allocated(device)

    def max_memory_reserved(self, device=None) -> int:
        return self.max_memory_allocated(device)

    def reset_peak_memory_stats(self, device=None) -> None:
        _ttpu.device_reset_peak(_index(device))

    def memory_stats(self, device=None) -> dict:
        current, peak = _ttpu.device_memory(_index(device))
        return {"allocated_bytes.all.current": current, "allocated_bytes.all.peak": peak}

    def mem_get_info(self, device=None) -> tuple[int, int]:
        # The host's memory for the CPU plugin; (free, total) in bytes.
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        free = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
        return free, total

    def stats(self) -> dict:
        """What the device has done: calls, templates built, programs compiled and found
        cached, executions, flushes and copies to the host by reason, uploads, donated
        buffers, CPU fallbacks."""
        return stats()


_PLATFORM = ["uninitialized"]


def stats() -> dict:
    """``torch.ttpu.stats()``: the device's counters (see :meth:`_DeviceModule.stats`)."""
    raw = _ttpu.device_stats()
    out = {key: dict(value) if isinstance(value, list) else value for key, value in raw.items()}
    out["decomposed"] = dict(_DECOMPOSED)
    collectives = _ttpu.device_collective_stats()
    out["collectives"] = {key: dict(value) if isinstance(value, list) else value for key, value in collectives.items()}
    return out


def allow_cpu_fallback(enabled: bool = True) -> None:
    """Runs calls the device has no decomposition for on the CPU, with one
    ``TtpuCpuFallbackWarning`` per overload, counted in ``torch.ttpu.stats()["fallbacks"]``. Off by
    default: such a call is an error naming the overload and the line that made it."""
    _FALLBACK["enabled"] = enabled


_MODES = {"defer_and_fuse", "defer_never", "defer_never_blocking"}


@contextlib.contextmanager
def execution_mode(mode: str):
    """Runs the block in execution mode ``mode``: ``"defer_and_fuse"`` (the default: calls are
    recorded and run fused at sync points), ``"defer_never"`` (each call runs at once as its own
    cached program) or ``"defer_never_blocking"`` (the same, waiting for the device after each).
    Pending work runs before the switch. ``TTPU_EXECUTION_MODE`` sets the mode at import."""
    if mode not in _MODES:
        raise ValueError(f"unknown execution mode {mode!r}: one of {sorted(_MODES)}")
    previous = _ttpu.device_mode()
    _ttpu.device_set_mode(mode)
    try:
        yield
    finally:
        _ttpu.device_set_mode(previous)


def _step_hook(optimizer, args, kwargs):
    # The end of an optimizer step is where a training step ends: run it as one program. A step
    # compiled by `torch.compile` is one program already, and Dynamo cannot trace the flush.
    if torch.compiler.is_compiling():
        return
    _ttpu.device_synchronize("optimizer step")


def _init() -> None:
    """Registers the device with PyTorch; called once by ``import ttpu``."""
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    from . import _plugin_for_device

    dtypes = {name: dtype for name, dtype in _FROM_IR.items()}
    env_devices = os.environ.get("TTPU_DEVICES")
    devices = int(env_devices) if env_devices else None
    from ._distributed import collectives_in_programs

    job = collectives_in_programs()
    platform, count = _ttpu.device_init(TtpuTensor, dtypes, _host_of, _plugin_for_device(), devices, job)
    _PLATFORM[0] = platform
    module = _DeviceModule()
    module._count = count
    _setup_privateuseone_for_python_backend(NAME, backend_module=module)
    from ._dynamo import _adjust_pytorch_once

    _adjust_pytorch_once()
    _DEVICES.extend(torch.device(NAME, index) for index in range(count))
    # `Module.to` swaps tensors rather than making new Parameters, so parameter objects (and
    # the ties between them, as GPT-2's embeddings) survive the move to the device.
    torch.__future__.set_swap_module_params_on_conversion(True)
    from torch.optim import optimizer as optim

    if TtpuTensor not in optim._foreach_supported_types:
        optim._foreach_supported_types.append(TtpuTensor)
    optim.register_optimizer_step_post_hook(_step_hook)

    library = torch.library.Library("aten", "IMPL")
    _LIBRARIES.append(library)
    for name in (
        "empty.memory_format", "empty_strided", "full", "zeros", "ones", "arange", "arange.start",
        "arange.start_step", "scalar_tensor", "rand", "randn", "randint", "randint.low", "randperm",
    ):
        packet, _, overload = name.partition(".")
        func = getattr(getattr(aten, packet), overload or "default")
        library.impl(name, _factory(func), "PrivateUse1")
    for name in _DECOMPOSED_FOR_AUTOGRAD:
        func = getattr(aten, name).default
        if _decomposition(func) is not None:
            library.impl(name, _autograd_through_decomposition(func), "AutogradPrivateUse1")
    # Autograd's zero gradients (`sgn`, complex ops): plain zeros on the device.
    library.impl(
        "_efficientzerotensor",
        lambda size, dtype=None, layout=None, device=None, pin_memory=None: torch.zeros(
            size, dtype=dtype, device=device
        ),
        "PrivateUse1",
    )
    library.impl("_copy_from", _copy_from, "PrivateUse1")
    library.impl("_copy_from_and_resize", lambda src, dst: _copy_from(src, dst), "PrivateUse1")

    fallthrough = torch.library.Library("_", "IMPL")
    _LIBRARIES.append(fallthrough)
    fallthrough.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    for names, lower in ((_AUTOCAST_LOWER, True), (_AUTOCAST_FP32, False)):
        for name in names:
            packet = getattr(aten, name, None)
            if packet is None:
                continue
            for overload in packet.overloads():
                full = name if overload == "default" else f"{name}.{overload}"
                with contextlib.suppress(RuntimeError):
                    library.impl(full, _autocast_kernel(getattr(packet, overload), lower), "AutocastPrivateUse1")

    mode = os.environ.get("TTPU_EXECUTION_MODE")
    if mode:
        if mode not in _MODES:
            raise ValueError(f"TTPU_EXECUTION_MODE={mode!r}: one of {sorted(_MODES)}")
        _ttpu.device_set_mode(mode)
    _check_autograd_engine()
    _fake_tensors_stay_off_the_device()
    _no_pinned_memory()


_PINNED_MEMORY = (
    "ttpu: the ttpu device has no pinned host memory (a pinned allocator needs a C++ backend); host tensors "
    "cross from ordinary memory, so pass pin_memory=False (for Hugging Face's Trainer, dataloader_pin_memory=False)"
)


def _no_pinned_memory() -> None:
    """Pinned host memory needs a C++ allocator hook, which a Python backend cannot give, and
    PyTorch's own error names its internals. `tensor.pin_memory()` for the ttpu device is refused
    with what to do instead; a DataLoader with `pin_memory=True` leaves its batches unpinned with
    one warning, as PyTorch's DataLoader does for MPS, so a loop written for CUDA runs unchanged."""
    from torch.utils.data import dataloader

    original_pin = torch.Tensor.pin_memory

    def pin_memory(self, device=None):
        if device is None or str(device) == "":
            accelerator = torch.accelerator.current_accelerator()
            target = accelerator.type if accelerator is not None else None
        else:
            target = torch.device(device).type
        if target == "ttpu":
            raise RuntimeError(_PINNED_MEMORY)
        return original_pin(self) if device is None else original_pin(self, device)

    torch.Tensor.pin_memory = pin_memory
    original_init = dataloader._BaseDataLoaderIter.__init__

    def init(self, loader):
        original_init(self, loader)
        if self._pin_memory and self._pin_memory_device == "ttpu":
            self._pin_memory = False
            warnings.warn(
                "'pin_memory' argument is set as true but the ttpu device has no pinned host memory; device "
                "pinned memory won't be used.",
                stacklevel=2,
            )

    dataloader._BaseDataLoaderIter.__init__ = init


def _fake_tensors_stay_off_the_device() -> None:
    """While Dynamo traces, PyTorch's fake tensor mode runs ops on small constants for real
    (`torch.tensor(3)` moved `.to(device)`, as Gemma 3's embedding scale is) unless it avoids
    initialising devices, which it does only where no CUDA, HPU or PrivateUse1 device is
    available. On the ttpu device that real run makes a ttpu tensor, a wrapper tensor, which
    cannot become the mode's constant (an assertion inside Dynamo). With no other accelerator in
    the process, the mode avoids the device as it would an absent one: such a constant is traced
    as an ordinary value, moved to the device when the graph runs."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    original = FakeTensorMode.avoid_device_init

    def avoid_device_init(self) -> bool:
        others = torch.cuda.is_available() or (hasattr(torch, "hpu") and torch.hpu.is_available())
        if others or (torch.xpu._is_compiled() and torch.xpu.is_available()):
            return original.fget(self)
        return True

    FakeTensorMode.avoid_device_init = property(avoid_device_init)


def _check_autograd_engine() -> None:
    """PyTorch's autograd engine makes its ready queues once, at the first backward pass, one per
    index of the devices registered then: after a backward pass that ran before `import ttpu`, a
    ttpu backward pass would find no queue (an internal assert in `loss.backward()`). The leaf
    below asks the engine for the device's queue and computes nothing. Where there is none, this
    thread runs its backward passes itself (PyTorch's multithreading off), which needs none."""
    leaf = torch.zeros((), device="ttpu", requires_grad=True)
    try:
        leaf.backward(torch.ones((), device="ttpu"))
    except RuntimeError as error:
        if "device_ready_queues_" not in str(error):
            raise
        torch._C._set_multithreading_enabled(False)
        warnings.warn(
            "ttpu: a backward pass ran before `import ttpu`, so PyTorch's autograd engine has no thread for the "
            "ttpu device; backward passes on this thread run on it without one (multithreading off), and those "
            "of other threads fail. Import ttpu before the first backward pass.",
            stacklevel=3,
        )


_LIBRARIES: list = []
