"""The ``torch.compile`` backend: ``torch.compile(model, backend="ttpu")``.

Dynamo hands the backend an FX graph of torch-level ops and example inputs. The backend exports
that graph with ``torch.export`` (core ATen after ``run_decompositions()``, the form ttpu
imports), with:

- the module's parameters and buffers, which Dynamo passes as graph inputs, made weights of the
  export, so they stay resident on the device and are uploaded again only when PyTorch changes
  them (a new tensor, or an in-place update, seen through its version counter);
- the size arguments Dynamo adds for dynamic shapes (``torch.compile(dynamic=True)``) read off
  the tensors they describe, so the exported program takes tensors only, with those dims
  symbolic.

A graph ttpu cannot take (an op it does not support, an export failure) runs in eager PyTorch
instead, with one warning naming the graph and the reason; so does a call that needs autograd,
since the compiled programs compute values only (training goes through ``ttpu train``).
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from . import Compiled, _output_kinds, _plugin, _ttpu
from ._convert import to_wire
from ._export import weights_of
from ._ttpu import TtpuError


class TtpuFallbackWarning(UserWarning):
    """A graph, or a call of it, runs in eager PyTorch instead of on ttpu."""


# How many graph calls ran on ttpu and how many in eager PyTorch, in this process.
# `graphs`: how many graphs were compiled for ttpu.
calls = {"ttpu": 0, "eager": 0, "graphs": 0}


def _eager(gm):
    def run(*args):
        calls["eager"] += 1
        return gm(*args)

    return run


@dataclass
class _Slot:
    """Where one argument of the Dynamo graph comes from when the exported program runs."""

    kind: str  # "input": a tensor input; "weight": a parameter or buffer; "size": a dim; "const"
    index: int = 0  # input: position among the inputs; weight: position among the weights
    dim: int = 0  # size: the dim of input `index`
    value: Any = None  # const: the value


def ttpu_backend(gm, example_inputs, **kwargs):
    """Compiles ``gm`` with ttpu; falls back to ``gm`` itself (eager) when ttpu cannot take it.

    ``options`` (``torch.compile(..., options={...})``) may hold ``device`` (the PJRT plugin),
    ``fuse``, ``fast_math`` and ``prepare_weights``, as for ``ttpu.load``."""
    name = _graph_name(gm)
    try:
        runner = _GraphRunner(gm, list(example_inputs), name, kwargs.get("options") or {})
    except Exception as error:  # any reason the graph cannot run on ttpu is a reason to fall back
        _fallback_warning(name, _reason(error))
        return _eager(gm)
    calls["graphs"] += 1
    return runner


_graph_count = 0


def _graph_name(gm) -> str:
    """A name for the warning: the graph's number in this process and its first ops."""
    global _graph_count
    _graph_count += 1
    ops = [
        getattr(node.target, "__name__", str(node.target))
        for node in gm.graph.nodes
        if node.op in ("call_function", "call_method")
    ]
    shown = ", ".join(ops[:3]) + (", ..." if len(ops) > 3 else "")
    return f"#{_graph_count} ({len(ops)} ops: {shown})" if ops else f"#{_graph_count}"


def _reason(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    first = lines[0] if lines else ""
    return first if isinstance(error, TtpuError) else f"{type(error).__name__}: {first}"


def _fallback_warning(name: str, reason: str) -> None:
    warnings.warn(f"ttpu: graph {name} runs in eager PyTorch: {reason}", TtpuFallbackWarning, stacklevel=3)


def _is_weight(node, value) -> bool:
    """Whether a Dynamo graph input is one of the module's parameters or buffers."""
    if isinstance(value, torch.nn.Parameter):
        return True
    source = getattr(node.meta.get("grapharg"), "source", None)
    if source is None:
        return False
    name = getattr(source, "name", None)  # a method in some PyTorch versions, a property in others
    text = name() if callable(name) else str(name or source)
    return "._buffers[" in text or "._parameters[" in text


def _flat_module(gm, slots: list[_Slot], input_names: list[str], weights: list):
    """The Dynamo graph as a module of its tensor inputs alone: weights become buffers (``w0``,
    ...), size arguments ``sym_size`` of the inputs they describe, constants stay inline. Its
    nodes carry no metadata: Dynamo's fake tensors and sources name Dynamo's own frame
    (``L['x']``), which the export's trace must not see."""
    root = torch.nn.Module()
    for i, weight in enumerate(weights):
        root.register_buffer(_weight_key(i), weight.detach())
    graph = torch.fx.Graph()
    inputs = [graph.placeholder(name) for name in input_names]
    values = []
    for slot in slots:
        if slot.kind == "input":
            values.append(inputs[slot.index])
        elif slot.kind == "weight":
            values.append(graph.get_attr(_weight_key(slot.index)))
        elif slot.kind == "size":
            values.append(graph.call_function(torch.ops.aten.sym_size.int, (inputs[slot.index], slot.dim)))
        else:
            values.append(slot.value)
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    output = graph.graph_copy(gm.graph, dict(zip(placeholders, values)))
    graph.output(output)
    copied = set(graph.nodes) - set(inputs) - {value for value in values if isinstance(value, torch.fx.Node)}
    for node in graph.nodes:
        node.meta = {}
        if node in copied and node.op in ("get_attr", "call_module"):
            # Constants and submodules of the Dynamo graph itself, under names of their own.
            attr = functools.reduce(getattr, node.target.split("."), gm)
            node.target = "graph_" + node.target.replace(".", "_")
            setattr(root, node.target, attr)
    return torch.fx.GraphModule(root, graph)


def _weight_key(index: int) -> str:
    return f"weight{index}"


def _input_name(node) -> str:
    """``x`` for Dynamo's ``l_x_``: the name the program's input will have."""
    name = node.name
    if name.lower().startswith("l_") and name.endswith("_") and len(name) > 3:
        name = name[2:-1]
    return name


class _GraphRunner:
    def __init__(self, gm, example_inputs: list, name: str, options: dict):
        self._gm = gm
        self._name = name
        self._grad_warned = False
        placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
        if len(placeholders) != len(example_inputs):
            raise TtpuError(f"{len(placeholders)} placeholders but {len(example_inputs)} example inputs")

        slots: list[_Slot] = []
        inputs: list[int] = []  # graph argument positions of the tensor inputs
        weights: list[int] = []  # graph argument positions of the weights
        dynamic: list[dict[int, Any]] = []
        for node, value in zip(placeholders, example_inputs):
            position = len(slots)
            if isinstance(value, torch.Tensor):
                if _is_weight(node, value):
                    slots.append(_Slot("weight", len(weights)))
                    weights.append(position)
                    continue
                shape = getattr(node.meta.get("example_value"), "shape", value.shape)
                dynamic.append({d: torch.export.Dim.AUTO for d, size in enumerate(shape) if isinstance(size, torch.SymInt)})
                slots.append(_Slot("input", len(inputs)))
                inputs.append(position)
            elif isinstance(value, (int, float, bool, torch.SymInt)):
                slots.append(_Slot("const", value=value))
            else:
                raise TtpuError(f"graph input `{node.name}` is a {type(value).__name__}, not a tensor or a number")

        # Dynamo's size arguments (`s0`, for dynamic shapes) become dims read off the tensor inputs.
        for slot, node in zip(slots, placeholders):
            fake = node.meta.get("example_value")
            if slot.kind != "const" or not isinstance(fake, torch.SymInt):
                continue
            found = next(
                (
                    (j, d)
                    for j, position in enumerate(inputs)
                    for d, size in enumerate(getattr(placeholders[position].meta.get("example_value"), "shape", ()))
                    if isinstance(size, torch.SymInt) and size.node.expr == fake.node.expr
                ),
                None,
            )
            if found is None:
                raise TtpuError(f"size argument `{node.name}` ({fake}) is not a dim of any tensor input")
            slot.kind, slot.index, slot.dim = "size", found[0], found[1]

        self._slots = slots
        self._input_positions = inputs
        self._weight_positions = weights
        names = [_input_name(placeholders[p]) for p in inputs]
        module = _flat_module(gm, slots, names, [example_inputs[p] for p in weights])
        shapes = tuple(d or None for d in dynamic) if any(dynamic) else None
        with torch.no_grad():
            ep = torch.export.export(module, tuple(example_inputs[p] for p in inputs), dynamic_shapes=shapes, strict=False)
            ep = ep.run_decompositions()
        self._source = str(ep)
        # Constants the export lifted stay as they are; the module's weights (`weight0`, ...) are
        # uploaded again when PyTorch changes them.
        keys = {_weight_key(i) for i in range(len(weights))}
        self._constants = {k: to_wire(k, v) for k, v in weights_of(ep).items() if k not in keys}
        self._options = {
            "plugin": _plugin(options.get("device")),
            **{key: options[key] for key in ("fuse", "fast_math", "prepare_weights") if key in options},
        }
        self._out_spec = ep.call_spec.out_spec
        # Weights the graph updates in place (batch norm's running statistics in training mode):
        # after each run their new values go back into PyTorch's tensors, as eager would leave them.
        self._mutated = [
            int(target[len("weight") :])
            for target in ep.graph_signature.buffers_to_mutate.values()
            if target in keys
        ]
        self._output_kinds = _output_kinds(ep)
        self._load([example_inputs[p] for p in weights])

    def _load(self, weights: list) -> None:
        wire = {_weight_key(i): to_wire(_weight_key(i), w) for i, w in enumerate(weights)}
        native = _ttpu.load(self._source, f"<dynamo graph {self._name}>", weights={**self._constants, **wire}, **self._options)
        self._compiled = Compiled(native, self._out_spec, self._output_kinds)
        self._versions = [(w.data_ptr(), w._version) for w in weights]

    def __call__(self, *args):
        weights = [args[p] for p in self._weight_positions]
        inputs = [args[p] for p in self._input_positions]
        if torch.is_grad_enabled() and any(t.requires_grad for t in (*weights, *inputs)):
            if not self._grad_warned:
                self._grad_warned = True
                _fallback_warning(
                    self._name,
                    "the call needs autograd, and ttpu's compiled graphs compute values only "
                    "(run inference under torch.no_grad() or torch.inference_mode())",
                )
            calls["eager"] += 1
            return self._gm(*args)
        if [(w.data_ptr(), w._version) for w in weights] != self._versions:
            # PyTorch changed a weight (an optimizer step, load_state_dict): upload them again.
            self._load(weights)
        calls["ttpu"] += 1
        out = self._compiled(*inputs)
        if self._mutated:
            with torch.no_grad():
                for index in self._mutated:
                    weights[index].copy_(self._compiled.state(_weight_key(index)))
            # Those copies are ours: the device already holds these values.
            self._versions = [(w.data_ptr(), w._version) for w in weights]
        return out
