"""From a PyTorch program to what ttpu reads: the `.fx` text and its tensors, keyed as the CLI
expects (weights by the graph signature's target, inputs by placeholder name)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any


@dataclass
class ExportedTensors:
    """The tensors of one exported program and one call of it."""

    # Parameters, buffers (persistent or not) and lifted constants, by signature target.
    weights: dict[str, Any]
    # Tensor user inputs by placeholder name, in graph order (numbers are specialized by the
    # export and take no data).
    inputs: dict[str, Any]


def export_program(model, args: tuple, kwargs: dict | None = None, dynamic_shapes=None, strict: bool = False):
    """`torch.export.export(...).run_decompositions()`: the core ATen program ttpu imports."""
    import torch

    ep = torch.export.export(model, tuple(args), kwargs=kwargs, dynamic_shapes=dynamic_shapes, strict=strict)
    return ep.run_decompositions()


def weights_of(ep) -> dict[str, Any]:
    """Every PARAMETER, BUFFER and CONSTANT_TENSOR input of `ep`, by target."""
    from torch.export.graph_signature import InputKind

    state, constants = ep.state_dict, ep.constants
    weights = {}
    for spec in ep.graph_signature.input_specs:
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            value = state[spec.target] if spec.target in state else constants[spec.target]
            weights[spec.target] = value.detach()
    return weights


def user_input_names(ep) -> list[str]:
    """The placeholder names of `ep`'s tensor user inputs, in graph order."""
    from torch.export.graph_signature import InputKind, TensorArgument

    return [
        spec.arg.name
        for spec in ep.graph_signature.input_specs
        if spec.kind == InputKind.USER_INPUT and isinstance(spec.arg, TensorArgument)
    ]


def exported_tensors(ep, args: tuple, kwargs: dict | None = None) -> ExportedTensors:
    """`ep`'s weights, and the tensors of `args`/`kwargs` keyed by the placeholders they feed."""
    import torch
    from torch.export.graph_signature import InputKind
    from torch.utils import _pytree as pytree

    unsupported = [
        spec
        for spec in ep.graph_signature.input_specs
        if spec.kind
        not in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR, InputKind.USER_INPUT)
    ]
    if unsupported:
        raise NotImplementedError(f"input kind {unsupported[0].kind.name} ({unsupported[0]}) is not supported")
    names = user_input_names(ep)
    tensors = [leaf for leaf in pytree.tree_leaves((tuple(args), kwargs or {})) if isinstance(leaf, torch.Tensor)]
    if len(names) != len(tensors):
        raise ValueError(f"the program takes {len(names)} tensor inputs ({', '.join(names)}), got {len(tensors)}")
    return ExportedTensors(weights=weights_of(ep), inputs=dict(zip(names, tensors)))


def write_exported(ep, tensors: ExportedTensors, path: str | os.PathLike) -> None:
    """Writes `model.fx`, `weights.safetensors` (when there are weights) and `inputs.safetensors`
    into the folder `path`, through the same safetensors writer the CLI reads with."""
    from . import _ttpu
    from ._convert import to_wire

    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "model.fx"), "w", encoding="utf-8", newline="\n") as f:
        f.write(str(ep))
    weights_file = os.path.join(path, "weights.safetensors")
    if tensors.weights:
        _ttpu.write_safetensors(weights_file, {k: to_wire(k, v) for k, v in tensors.weights.items()})
    elif os.path.exists(weights_file):
        os.remove(weights_file)  # a stale file from an earlier export would not match
    _ttpu.write_safetensors(
        os.path.join(path, "inputs.safetensors"), {k: to_wire(k, v) for k, v in tensors.inputs.items()}
    )
