"""`ttpu.export` writes what the CLI runs; `ttpu.load` runs exported programs and files."""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest
import torch
from conftest import REPO_ROOT, assert_matches
from safetensors.torch import load_file

import ttpu


def _mlp():
    import export as models

    torch.manual_seed(0)
    return models.MLP().eval()


def test_export_files_are_accepted_by_ttpu_run(tmp_path):
    model, x = _mlp(), torch.randn(4, 16)
    ep = ttpu.export(model, (x,), tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["inputs.safetensors", "model.fx", "weights.safetensors"]
    weights = load_file(tmp_path / "weights.safetensors")
    assert sorted(weights) == sorted(k for k, _ in model.named_parameters())
    assert list(load_file(tmp_path / "inputs.safetensors")) == ["x"]
    binary = os.environ.get("TTPU_BIN") or os.path.join(REPO_ROOT, "target", "debug", "ttpu")
    out = tmp_path / "out.safetensors"
    subprocess.run(
        [binary, "run", str(tmp_path / "model.fx"), "--weights", str(tmp_path / "weights.safetensors"),
         "--inputs", str(tmp_path / "inputs.safetensors"), "-o", str(out)],
        check=True,
    )
    with torch.no_grad():
        want = model(x)
    assert_matches(load_file(out)["output_0"], want)
    assert list(ep.graph_signature.user_inputs) == ["x"]


def test_load_an_exported_program_and_a_folder(tmp_path):
    model, x = _mlp(), torch.randn(4, 16)
    ep = ttpu.export(model, (x,), tmp_path, dynamic_shapes={"x": {0: torch.export.Dim("batch", min=1, max=64)}})
    from_ep = ttpu.load(ep)
    from_folder = ttpu.load(tmp_path)
    [(name, ty)] = from_ep.inputs
    assert name == "x" and ty.startswith("f32[s") and ty.endswith(", 16]"), ty
    with torch.no_grad():
        for batch in (4, 7):
            x = torch.randn(batch, 16)
            want = model(x)
            assert_matches(from_ep(x), want)
            assert_matches(from_folder(x), want)


def test_numpy_in_numpy_out(tmp_path):
    model, x = _mlp(), torch.randn(4, 16)
    ttpu.export(model, (x,), tmp_path)
    compiled = ttpu.load(tmp_path / "model.fx")
    got = compiled(x.numpy())
    assert isinstance(got, np.ndarray) and got.dtype == np.float32
    with torch.no_grad():
        assert_matches(torch.from_numpy(got.copy()), model(x))


def test_bf16_and_nested_outputs():
    class Pair(torch.nn.Module):
        def forward(self, x, y):
            return {"sum": x + y, "both": (x * y, y.to(torch.float32).sum())}

    x = torch.randn(3, 5, dtype=torch.bfloat16)
    y = torch.randn(3, 5, dtype=torch.bfloat16)
    compiled = ttpu.load(torch.export.export(Pair(), (x, y)))
    assert_matches(compiled(x, y), Pair()(x, y))


def test_mutated_buffers_and_inputs_follow_pytorch():
    class Counter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", torch.zeros(2))

        def forward(self, x):
            self.count.add_(1.0)
            x.mul_(2.0)
            return x + self.count

    x = torch.ones(2)
    compiled = ttpu.load(torch.export.export(Counter(), (x.clone(),)))
    first = compiled(x)
    assert_matches(x, torch.full((2,), 2.0))  # the input was mutated, as in PyTorch
    assert_matches(first, torch.full((2,), 3.0))
    second = compiled(torch.ones(2))
    assert_matches(second, torch.full((2,), 4.0))  # the buffer stayed on the device and counted on
    assert_matches(compiled.state("count"), torch.full((2,), 2.0))


def test_wrong_inputs_are_errors():
    compiled = ttpu.load(torch.export.export(_mlp(), (torch.randn(4, 16),)))
    with pytest.raises(ttpu.TtpuError, match=r"takes 1 tensor inputs \(x\), got 2"):
        compiled(torch.randn(4, 16), torch.randn(4, 16))
    with pytest.raises(ttpu.TtpuError, match=r"input `x`: expected f32\[4, 16\], found f32\[4, 15\]"):
        compiled(torch.randn(4, 15))


def test_lower_prints_what_the_cli_prints():
    fixture = os.path.join(REPO_ROOT, "fixtures", "mlp", "model.fx")
    binary = os.environ.get("TTPU_BIN") or os.path.join(REPO_ROOT, "target", "debug", "ttpu")
    cli = subprocess.run([binary, "lower", fixture], check=True, capture_output=True, text=True).stdout
    text = ttpu.lower(fixture)
    assert text == cli
    assert text.count('"stablehlo.dot_general"') == 3


def test_the_plugin_is_found_and_a_missing_one_is_named(tmp_path):
    assert os.path.isfile(ttpu.default_plugin())
    ep = torch.export.export(_mlp(), (torch.randn(4, 16),))
    missing = tmp_path / "nowhere.so"
    with pytest.raises(ttpu.TtpuError, match="nowhere.so"):
        ttpu.load(ep, device=missing)


@pytest.mark.parametrize(
    ("shape", "dtype", "message"),
    [
        ([-1], "f32", r"tensor `a`: invalid shape \[-1\]"),
        ([2**62, 2**62], "f32", r"tensor `a`: invalid shape"),
        ([3], "f32", r"tensor `a`: a tensor of type f32\[3\] needs 12 bytes, found 4"),
        ([1], "f33", r"tensor `a`: unknown dtype `f33`"),
    ],
)
def test_malformed_tensors_are_errors_not_crashes(tmp_path, shape, dtype, message):
    with pytest.raises(ttpu.TtpuError, match=message):
        ttpu._ttpu.write_safetensors(str(tmp_path / "a.safetensors"), {"a": (np.zeros(4, np.uint8), dtype, shape)})
