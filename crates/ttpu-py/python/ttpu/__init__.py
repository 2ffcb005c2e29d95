"""ttpu: PyTorch programs on XLA devices through PJRT plugins.

Three ways in:

- ``torch.compile(model, backend="ttpu")``: Dynamo hands each graph to ttpu, which compiles it to
  StableHLO and runs it on the plugin; graphs ttpu cannot take run in eager PyTorch, with one
  warning per graph naming the reason.
- ``ttpu.export(model, args, "out/")``: ``torch.export`` + ``run_decompositions()``, written as
  the files the ``ttpu`` CLI reads (``model.fx``, ``weights.safetensors``, ``inputs.safetensors``).
- ``ttpu.load(exported_program_or_path)``: a callable on ``torch.Tensor``s (or NumPy arrays) with
  the weights resident on the device, compiled once per shape.
- ``model.to("ttpu")``: the ttpu device, registered with PyTorch at ``import ttpu`` (when PyTorch
  is installed): eager PyTorch code, autograd and ``torch.optim`` unchanged, each call recorded
  and run fused at sync points (see ``ttpu._device``); ``torch.ttpu`` is its device module.
- ``ttpu.export_llm(hf_model, "dir/", max_batch=B, max_seq_len=L, tokenizer=tok)``: a Hugging Face
  causal language model as the step program ``ttpu serve`` and ``ttpu generate`` run (KV cache on
  the device, continuous batching, sampling on the device).

The plugin is ``device=`` (a PJRT plugin file), else ``$TTPU_PJRT_PLUGIN``, else the CPU plugin
``cargo xtask setup`` installed, as in the CLI, else the CPU plugin the package depends on (PyPI's
``lammps-jax-pjrt-cpu``, the same build); compiled programs are cached on disk in the same
folder the CLI uses (``$TTPU_CACHE_DIR``, else ``~/.cache/ttpu/compiled``).
"""

from __future__ import annotations

import os
from typing import Any

from . import _ttpu
from ._accuracy import capture_intermediates, debug_accuracy
from ._convert import is_numpy_array, is_torch_tensor, to_numpy, to_torch, to_wire
from ._kernels import register_kernel, registered_kernels
from ._profile import profile, record
from ._ttpu import TtpuError, TtpuIndexError

__all__ = [
    "Compiled",
    "TtpuError",
    "TtpuIndexError",
    "allow_cpu_fallback",
    "capture_intermediates",
    "debug_accuracy",
    "default_plugin",
    "execution_mode",
    "export",
    "export_llm",
    "load",
    "lower",
    "profile",
    "register_kernel",
    "registered_kernels",
]

try:
    from importlib.metadata import version as _version

    __version__ = _version("ttpu")
except Exception:  # run from a source tree without installed metadata
    __version__ = "0.0.0+source"


def export(model, args, path, dynamic_shapes=None, *, kwargs=None, strict: bool = False):
    """Exports ``model`` on ``args`` and writes what ``ttpu run`` reads into the folder ``path``:
    ``model.fx`` (the printed program after ``run_decompositions()``), ``weights.safetensors``
    (parameters, buffers and constants by signature target) and ``inputs.safetensors`` (the
    tensors of ``args`` and ``kwargs`` by placeholder name). Returns the exported program.

    ``ttpu run path/model.fx --weights path/weights.safetensors --inputs path/inputs.safetensors``
    then runs it."""
    from ._export import export_program, exported_tensors, write_exported

    args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
    ep = export_program(model, args, kwargs, dynamic_shapes, strict)
    write_exported(ep, exported_tensors(ep, args, kwargs), path)
    return ep


def export_llm(
    model,
    path,
    *,
    max_batch: int,
    max_seq_len: int,
    tokenizer=None,
    batch_buckets=None,
    prompt_buckets=None,
    window_buckets=None,
):
    """Exports a Hugging Face causal language model (any decoder family that drives its cache
    through transformers' cache interface: Llama, Mistral, Qwen2/3, Gemma, Phi-3, GPT-2, ...)
    into the folder ``path`` for ``ttpu serve`` and ``ttpu generate``: ``model.fx`` (one step
    program for prefill and decode, symbolic in its sizes), ``weights.safetensors``,
    ``serve.json`` (KV cache layout, buckets, end-of-sequence tokens, sampling defaults), the
    generation config, and the tokenizer's files when ``tokenizer`` is given.

    ``max_batch`` requests run at once, each holding at most ``max_seq_len`` tokens. The buckets
    are the sizes the server compiles the program at (rows per step, tokens per prefill row,
    attended positions); by default powers of two. Returns the exported program."""
    from ._llm import export_llm as _export_llm

    return _export_llm(
        model,
        path,
        max_batch=max_batch,
        max_seq_len=max_seq_len,
        tokenizer=tokenizer,
        batch_buckets=batch_buckets,
        prompt_buckets=prompt_buckets,
        window_buckets=window_buckets,
    )


def lower(program, *, fuse: bool = True, fast_math: bool = False) -> str:
    """The StableHLO text of ``program`` (an exported program, a ``.fx`` file or a folder holding
    ``model.fx``), as ``ttpu lower`` prints it."""
    source, path, _ = _program_source(program)
    return _ttpu.lower(source, path, fuse=fuse, fast_math=fast_math)


def default_plugin() -> str:
    """The PJRT plugin file used when none is given."""
    plugin = _plugin(None) or _ttpu.configured_plugin()
    if plugin is None:
        raise TtpuError("no PJRT plugin: set TTPU_PJRT_PLUGIN, run `cargo xtask setup`, or pip install lammps-jax-pjrt-cpu")
    return plugin


def _plugin(device) -> str | None:
    """The plugin file for ``device``; ``None`` lets the library choose as the CLI does
    (``$TTPU_PJRT_PLUGIN``, else the one ``cargo xtask setup`` installed), unless neither is there
    and the pip-installed CPU plugin is."""
    if device is not None:
        return os.fspath(device)
    if _ttpu.configured_plugin() is not None:
        return None
    import importlib.util

    spec = importlib.util.find_spec("lammps_jax_pjrt_cpu")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(folder, "pjrt_c_api_cpu_plugin.so")
        if os.path.isfile(path):
            return path
    return None


class Compiled:
    """A loaded model: call it like the module it came from.

    Tensor arguments are matched, in order, to the program's tensor inputs (Python numbers were
    specialized by the export and are not passed to the device). Results come back as the
    exported program's output structure when it is known (a program loaded from an
    ``ExportedProgram``), else as the one output or a tuple of them; as ``torch.Tensor``s on the
    first input's device, or NumPy arrays when the inputs were NumPy arrays."""

    def __init__(self, native, out_spec=None, output_kinds=None):
        self._native = native
        self._out_spec = out_spec
        self._output_kinds = output_kinds
        self._input_names = [name for name, _ in native.inputs]
        self._user_outputs = sorted(
            (key for key in native.outputs if key.startswith("output_") and key[7:].isdigit()),
            key=lambda key: int(key[7:]),
        )

    @property
    def inputs(self) -> list[tuple[str, str]]:
        """``(placeholder name, type)`` of each tensor input, like ``("x", "f32[s0, 8]")``."""
        return self._native.inputs

    @property
    def platform(self) -> str:
        """The plugin's platform, like ``cpu (PJRT C API 0.115)``."""
        return self._native.platform

    @property
    def compile_count(self) -> int:
        """How many sizes this model has been compiled for."""
        return self._native.compile_count

    def __call__(self, *args, **kwargs):
        leaves = _leaves(args, kwargs)
        tensors = [leaf for leaf in leaves if is_torch_tensor(leaf) or is_numpy_array(leaf)]
        if len(tensors) != len(self._input_names):
            names = ", ".join(self._input_names)
            raise TtpuError(f"the model takes {len(self._input_names)} tensor inputs ({names}), got {len(tensors)}")
        by_name = dict(zip(self._input_names, tensors))
        with record("ttpu.run"):
            results = self._native.run({name: to_wire(name, value) for name, value in by_name.items()})
        as_numpy = bool(tensors) and all(is_numpy_array(t) for t in tensors)
        device = next((t.device for t in tensors if is_torch_tensor(t)), None)

        def convert(wire):
            return to_numpy(wire) if as_numpy else to_torch(wire, device)

        # A program that mutates an input writes the new value under the input's name: apply it,
        # as running the module would have.
        for name, value in by_name.items():
            if name in results:
                new = convert(results[name])
                if is_torch_tensor(value):
                    value.copy_(new)
                else:
                    value[...] = new
        outputs = [convert(results[key]) for key in self._user_outputs]
        if self._output_kinds is not None:
            outputs = [out if is_tensor else out.item() for out, is_tensor in zip(outputs, self._output_kinds)]
        if self._out_spec is not None:
            from torch.utils import _pytree as pytree

            return pytree.tree_unflatten(outputs, self._out_spec)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def state(self, key: str):
        """The current value of a buffer the model keeps on the device, as a ``torch.Tensor``."""
        return to_torch(self._native.state(key))


def load(
    program,
    device: str | os.PathLike | None = None,
    *,
    fuse: bool = True,
    fast_math: bool = False,
    prepare_weights: bool = True,
) -> Compiled:
    """Loads ``program`` and keeps its weights on the device.

    ``program`` is a ``torch.export.ExportedProgram`` (decomposed here if it was not), a ``.fx``
    file (weights from ``weights.safetensors`` beside it, if there is one) or a folder holding
    ``model.fx``. ``device`` is the PJRT plugin file to run on (``None``: ``$TTPU_PJRT_PLUGIN``,
    else the installed CPU plugin). ``fuse``, ``fast_math`` and ``prepare_weights`` are the CLI's
    ``--no-fuse``, ``--fast-math`` and ``--no-weight-prep``."""
    source, path, ep = _program_source(program)
    options = dict(plugin=_plugin(device), fuse=fuse, fast_math=fast_math, prepare_weights=prepare_weights)
    if ep is not None:
        from ._export import weights_of

        weights = {key: to_wire(key, value) for key, value in weights_of(ep).items()}
        with record("ttpu.load"):
            native = _ttpu.load(source, path, weights=weights, **options)
        return Compiled(native, ep.call_spec.out_spec, _output_kinds(ep))
    weights_file = os.path.join(os.path.dirname(path), "weights.safetensors")
    with record("ttpu.load"):
        native = _ttpu.load(source, path, weights_file=weights_file if os.path.exists(weights_file) else None, **options)
    return Compiled(native)


def _program_source(program) -> tuple[str, str, Any]:
    """``(.fx text, the path errors name, the decomposed exported program or None)``."""
    if isinstance(program, (str, os.PathLike)):
        path = os.fspath(program)
        if os.path.isdir(path):
            path = os.path.join(path, "model.fx")
        with open(path, encoding="utf-8") as f:
            return f.read(), path, None
    import torch

    if isinstance(program, torch.export.ExportedProgram):
        ep = program.run_decompositions()
        return str(ep), "<exported program>", ep
    raise TtpuError(
        f"expected a torch.export.ExportedProgram, a .fx file or a folder, found {type(program).__name__}"
    )


def _output_kinds(ep) -> list[bool]:
    """For each user output of ``ep``: whether it is a tensor (else a Python number, which ttpu
    returns as a scalar tensor)."""
    from torch.export.graph_signature import OutputKind, TensorArgument

    return [
        isinstance(spec.arg, TensorArgument)
        for spec in ep.graph_signature.output_specs
        if spec.kind == OutputKind.USER_OUTPUT
    ]


def _leaves(args: tuple, kwargs: dict) -> list:
    import sys

    if "torch" in sys.modules:
        from torch.utils import _pytree as pytree

        return pytree.tree_leaves((args, kwargs))
    return [*args, *kwargs.values()]


def _plugin_for_device() -> str | None:
    """The plugin of the ttpu device: ``$TTPU_DEVICE_PLUGIN``, else as for models."""
    return _plugin(os.environ.get("TTPU_DEVICE_PLUGIN"))


def allow_cpu_fallback(enabled: bool = True) -> None:
    """Runs calls the ttpu device has no decomposition for on the CPU, with one warning per
    overload (off by default: such a call is an error)."""
    from ._device import allow_cpu_fallback as allow

    allow(enabled)


def execution_mode(mode: str):
    """A context manager running its block in the device's execution mode ``mode``
    (``"defer_and_fuse"``, ``"defer_never"``, ``"defer_never_blocking"``)."""
    from ._device import execution_mode as mode_of

    return mode_of(mode)


def _register_device() -> None:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return
    from . import _device

    _device._init()
    from . import _distributed, distributed  # noqa: F401  (`ttpu.distributed`)

    _distributed._install()


_register_device()
