"""Shared pieces of the package's tests: the repository's model definitions and a comparison
that names the worst element."""

from __future__ import annotations

import os
import sys
import warnings

import pytest
import torch

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
# fixtures/export.py holds the MLP, GPT-2 block and CNN the fixtures are made from.
sys.path.insert(0, os.path.join(REPO_ROOT, "fixtures"))

# Per output dtype, as docs/numerics.md sets them for the fixtures.
TOLERANCES = {torch.float32: (1e-4, 1e-5), torch.float64: (1e-7, 1e-9), torch.bfloat16: (2e-2, 2e-2)}


def assert_matches(got, want, what: str = "output") -> None:
    """`got` equals `want` in structure, dtype and shape, and in value within the dtype's
    tolerance (exactly for integers and bools)."""
    if isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want), f"{what}: {type(got)} vs {type(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_matches(g, w, f"{what}[{i}]")
        return
    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), f"{what}: keys differ"
        for key in want:
            assert_matches(got[key], want[key], f"{what}[{key!r}]")
        return
    if not isinstance(want, torch.Tensor):
        assert got == want, f"{what}: {got!r} != {want!r}"
        return
    assert isinstance(got, torch.Tensor), f"{what}: a {type(got).__name__}, not a tensor"
    assert got.dtype == want.dtype and got.shape == want.shape, f"{what}: {got.dtype}{list(got.shape)} vs {want.dtype}{list(want.shape)}"
    if want.dtype.is_floating_point or want.dtype.is_complex:
        rtol, atol = TOLERANCES.get(want.dtype, (1e-4, 1e-5))
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")
    else:
        assert torch.equal(got, want), f"{what}: integer values differ"


@pytest.fixture
def no_fallback():
    """Fails the test if any graph falls back to eager PyTorch, and checks that ttpu ran."""
    from ttpu import _dynamo

    before = dict(_dynamo.calls)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    fallbacks = [str(w.message) for w in caught if issubclass(w.category, _dynamo.TtpuFallbackWarning)]
    assert not fallbacks, fallbacks
    assert _dynamo.calls["ttpu"] > before["ttpu"], "no graph ran on ttpu"
    assert _dynamo.calls["eager"] == before["eager"], "a graph ran in eager PyTorch"
