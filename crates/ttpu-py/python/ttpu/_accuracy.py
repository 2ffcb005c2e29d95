"""The accuracy mode on the PyTorch side.

``with ttpu.debug_accuracy() as report:`` runs every call dispatched to the ttpu device once more
on the CPU with PyTorch, on the same operand values read back from the device, and compares the
results; ``report.first`` is the first call whose result differs beyond tolerance, with the
Python line that made it. Each call is checked on its own inputs, so rounding never accumulates
from one op to the next and the first mismatch is where a wrong result starts. Reading values
back forces the device to run what it has recorded: the mode is for finding a bug, not for speed.
Calls that mutate their operands, draw random numbers or return no tensor are not compared.

``ttpu.capture_intermediates(ep, args, path)`` writes PyTorch's value of every node of an exported
program, by node name, for ``ttpu parity --bisect --intermediates``.
"""

from __future__ import annotations

import contextlib
import os
import traceback
from dataclasses import dataclass, field

_PACKAGE = os.path.dirname(os.path.abspath(__file__))


@dataclass
class Mismatch:
    """A call whose device result differs from PyTorch's on the CPU."""

    op: str
    """The overload, like ``aten.gelu.default``."""
    where: str
    """The Python line that made the call, ``file:line``."""
    code: str
    """That line's text."""
    max_abs: float
    """The largest absolute difference (infinite where NaN or infinity differ)."""
    mismatched: int
    """Elements outside tolerance."""
    total: int
    """Elements compared."""

    def __str__(self) -> str:
        return (
            f"{self.op} at {self.where}: {self.mismatched}/{self.total} elements differ from CPU PyTorch "
            f"(max abs {self.max_abs:.3e})\n    {self.code}"
        )


@dataclass
class AccuracyReport:
    """What ``debug_accuracy`` found."""

    checked: int = 0
    """Calls compared."""
    skipped: int = 0
    """Calls not compared (mutating, random, or without tensor results)."""
    mismatches: list = field(default_factory=list)
    """Every call that differed, in order."""

    @property
    def first(self) -> Mismatch | None:
        """The first call that differed, or ``None``."""
        return self.mismatches[0] if self.mismatches else None


@contextlib.contextmanager
def debug_accuracy(rtol: float = 1e-4, atol: float = 1e-5, *, raise_on_mismatch: bool = False):
    """Checks every call dispatched to the ttpu device against CPU PyTorch while the block runs;
    yields the ``AccuracyReport``. With ``raise_on_mismatch``, the first mismatch raises
    ``ttpu.TtpuError`` at the call that made it."""
    import torch
    from torch.utils import _pytree as pytree

    from . import _device
    from ._ttpu import TtpuError

    report = AccuracyReport()
    busy = [False]

    def to_cpu(value):
        return value.cpu() if isinstance(value, torch.Tensor) and value.device.type != "cpu" else value

    def observer(func, args, kwargs, result):
        # Reading values back dispatches calls of its own: those are not the user's.
        if busy[0]:
            return
        busy[0] = True
        try:
            compare(func, args, kwargs, result)
        finally:
            busy[0] = False

    def compare(func, args, kwargs, result):
        schema = getattr(func, "_schema", None)
        mutates = schema is not None and schema.is_mutable
        random = torch.Tag.nondeterministic_seeded in getattr(func, "tags", ())
        outputs = [leaf for leaf in pytree.tree_leaves(result) if isinstance(leaf, torch.Tensor)]
        if mutates or random or not outputs:
            report.skipped += 1
            return
        with torch.no_grad():
            expected = func(*pytree.tree_map(to_cpu, args), **pytree.tree_map(to_cpu, kwargs))
            expected = [leaf for leaf in pytree.tree_leaves(expected) if isinstance(leaf, torch.Tensor)]
            got = [to_cpu(leaf) for leaf in outputs]
        report.checked += 1
        for have, want in zip(got, expected):
            mismatch = _differs(have, want, rtol, atol)
            if mismatch is None:
                continue
            where, code = _caller()
            found = Mismatch(str(func), where, code, *mismatch)
            report.mismatches.append(found)
            if raise_on_mismatch:
                raise TtpuError(str(found))
            return

    _device.OBSERVERS.append(observer)
    try:
        yield report
    finally:
        _device.OBSERVERS.remove(observer)


def _differs(got, want, rtol: float, atol: float):
    """``(max_abs, mismatched, total)`` when ``got`` differs from ``want``, else ``None``."""
    import torch

    if got.shape != want.shape or got.dtype != want.dtype:
        return (float("inf"), max(got.numel(), want.numel()), max(got.numel(), want.numel()))
    if got.is_floating_point() or got.is_complex():
        close = torch.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
        difference = (got.to(torch.float64) - want.to(torch.float64)).abs() if not got.is_complex() else (got - want).abs()
        finite = difference[torch.isfinite(difference)]
        max_abs = float(finite.max()) if finite.numel() else 0.0
        if not bool(close.all()):
            max_abs = max(max_abs, float("inf") if (~torch.isfinite(difference) & ~close).any() else 0.0)
    else:
        close = got == want
        max_abs = float((got.to(torch.float64) - want.to(torch.float64)).abs().max()) if got.numel() else 0.0
    mismatched = int((~close).sum())
    return None if mismatched == 0 else (max_abs, mismatched, got.numel())


def _caller() -> tuple[str, str]:
    """The innermost frame of user code (outside PyTorch and this package): ``file:line`` and its text."""
    import torch

    library = (_PACKAGE, os.path.dirname(os.path.abspath(torch.__file__)), "<frozen ")
    for frame in reversed(traceback.extract_stack()):
        if not os.path.abspath(frame.filename).startswith(library) and not frame.filename.startswith("<frozen "):
            return f"{frame.filename}:{frame.lineno}", (frame.line or "").strip()
    return "<unknown>", ""


def capture_intermediates(ep, args, path, kwargs=None) -> dict:
    """Runs the exported program ``ep`` (decomposed as ``ttpu.export`` does) on ``args`` in eager
    PyTorch and writes every node's tensor value, keyed by node name, to the safetensors file
    ``path``: what ``ttpu parity --bisect --intermediates`` compares the program with. Returns the
    values."""
    import torch
    from safetensors.torch import save_file
    from torch.export.graph_signature import InputKind
    from torch.utils import _pytree as pytree

    ep = ep.run_decompositions()
    user = pytree.tree_leaves((tuple(args), kwargs or {}))
    user_tensors = iter([value for value in user if isinstance(value, torch.Tensor)])
    inputs = []
    for spec in ep.graph_signature.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            inputs.append(next(user_tensors) if isinstance(spec.arg, torch.export.graph_signature.TensorArgument) else None)
        else:
            inputs.append(ep.state_dict[spec.target] if spec.target in ep.state_dict else ep.constants[spec.target])
    values: dict = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, node):
            result = super().run_node(node)
            if node.op == "call_function" and isinstance(result, torch.Tensor):
                values[node.name] = result.detach().clone().contiguous()
            return result

    with torch.no_grad():
        Recorder(ep.graph_module).run(*[value for value in inputs if value is not None])
    save_file(values, os.fspath(path))
    return values
