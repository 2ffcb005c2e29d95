"""Profiling: ``with ttpu.profile("out.json"):`` records ttpu's stages as a Chrome trace.

Inside the block, every span ttpu's Rust code opens (parse, import, fuse, lower, compile or cache
hit, weight upload, transfers in, execute, transfers out, ...) is kept, and the file written at
the end opens in Perfetto or ``chrome://tracing``. Calls of models ttpu runs also show in
``torch.profiler`` traces as ``record_function`` ranges named ``ttpu.run`` and ``ttpu.load``,
so a PyTorch user's usual profiling sees them among PyTorch's own ops.
"""

from __future__ import annotations

import contextlib
import os
import sys

from . import _ttpu


@contextlib.contextmanager
def profile(path):
    """Records ttpu's spans while the block runs and writes them to ``path`` as a Chrome trace."""
    _ttpu.trace_start()
    try:
        yield
    finally:
        _ttpu.trace_stop(os.fspath(path))


def record(name: str):
    """A ``torch.profiler.record_function`` range named ``name`` when PyTorch is loaded (a no-op
    otherwise), so ttpu's calls show in ``torch.profiler`` traces."""
    if "torch" in sys.modules:
        import torch

        return torch.profiler.record_function(name)
    return contextlib.nullcontext()
