"""User kernels from Python (StableHLO text, a JAX function) in models loaded, exported and
compiled with torch.compile, against PyTorch's eager custom ops; ``ttpu.profile`` traces and
``torch.profiler`` ranges; the accuracy mode: ``capture_intermediates`` and ``debug_accuracy``
finding a perturbed op with its Python line."""

from __future__ import annotations

import json
import os
import warnings

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

import ttpu
import ttpu._dynamo
from conftest import REPO_ROOT, assert_matches

KERNELS = os.path.join(REPO_ROOT, "fixtures", "kernels")


@torch.library.custom_op("mylib::silu", mutates_args=())
def silu(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x)


@silu.register_fake
def _(x):
    return torch.empty_like(x)


def causal_attention_jax(q, k, v):
    import jax
    import jax.numpy as jnp

    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / jnp.sqrt(jnp.float32(q.shape[-1]))
    mask = jnp.tril(jnp.ones((q.shape[-2], q.shape[-2]), dtype=bool))
    scores = jnp.where(mask, scores, jnp.finfo(scores.dtype).min)
    return jax.nn.softmax(scores, axis=-1) @ v


@pytest.fixture(scope="module", autouse=True)
def kernels():
    # The registry is the process's: register once for every test here.
    if "mylib::silu" not in ttpu.registered_kernels():
        with open(os.path.join(KERNELS, "mylib.silu.mlir"), encoding="utf-8") as f:
            ttpu.register_kernel("mylib::silu", f.read())
    if "mylib::causal_attention" not in ttpu.registered_kernels():
        shape = torch.empty(2, 4, 8, 8)
        ttpu.register_kernel("mylib::causal_attention", causal_attention_jax, shape, shape, shape)


def fixture_outputs(name: str):
    folder = os.path.join(KERNELS, name)
    run = ttpu.load(folder)
    inputs = load_file(os.path.join(folder, "inputs.safetensors"))
    expected = load_file(os.path.join(folder, "expected.safetensors"))
    return run(*inputs.values()), expected["output_0"]


def test_a_stablehlo_kernel_runs_the_mlps_custom_activation():
    got, want = fixture_outputs("mlp")
    assert_matches(got, want)


def test_a_jax_function_runs_the_gpt2_blocks_attention():
    got, want = fixture_outputs("gpt2_block")
    assert_matches(got, want)


def test_torch_compile_runs_a_custom_op_with_its_kernel():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 32)).eval()

    def forward(x):
        return model[1](torch.ops.mylib.silu(model[0](x)))

    x = torch.randn(4, 16)
    from ttpu._dynamo import calls

    before = calls["ttpu"]
    with torch.no_grad():
        want = forward(x)
        with warnings.catch_warnings():
            warnings.simplefilter("error", ttpu._dynamo.TtpuFallbackWarning)
            got = torch.compile(forward, backend="ttpu")(x)
    assert calls["ttpu"] == before + 1, "the graph ran on ttpu"
    assert_matches(got, want)


def test_bad_kernels_are_refused_naming_the_op():
    with open(os.path.join(KERNELS, "mylib.silu.mlir"), encoding="utf-8") as f:
        text = f.read()
    with pytest.raises(ttpu.TtpuError, match=r"^kernel `mylib::silu`: registered twice$"):
        ttpu.register_kernel("mylib::silu", text)
    with pytest.raises(ttpu.TtpuError, match=r"^kernel `mylib::broken`: the module does not parse: "):
        ttpu.register_kernel("mylib::broken", "module { not mlir }")


def test_a_profile_traces_every_stage_and_torch_profiler_sees_the_runs(tmp_path):
    folder = os.path.join(KERNELS, "mlp")
    x = load_file(os.path.join(folder, "inputs.safetensors"))["x"]
    trace = tmp_path / "trace.json"
    with ttpu.profile(trace):
        ttpu.load(folder)(x)
    events = json.loads(trace.read_text())["traceEvents"]
    names = {event["name"] for event in events if event["ph"] == "X"}
    assert {"parse", "import", "weights_in", "run", "compile", "execute", "transfer_in", "transfer_out"} <= names, names
    run = ttpu.load(folder)
    with torch.profiler.profile() as prof:
        run(x)
    assert "ttpu.run" in {event.name for event in prof.events()}


def test_capture_intermediates_keys_every_node_by_name(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).eval()
    x = torch.randn(3, 4)
    ep = torch.export.export(model, (x,))
    values = ttpu.capture_intermediates(ep, (x,), tmp_path / "values.safetensors")
    assert "relu" in values and values["relu"].shape == (3, 8)
    assert_matches(load_file(tmp_path / "values.safetensors")["relu"], F.relu(model[0](x)).detach())


def gelu_block(x):
    y = x @ x.T
    z = F.gelu(y)  # the perturbed op: its line is what the report names
    return (z * 2).sum(dim=0)


def test_debug_accuracy_finds_no_mismatch_in_a_correct_run():
    x = torch.randn(4, 4).to("ttpu")
    with ttpu.debug_accuracy() as report:
        gelu_block(x).cpu()
    assert report.first is None
    assert report.checked >= 4


def test_debug_accuracy_finds_a_perturbed_op_with_its_line():
    from ttpu import _device

    busy = [False]

    def perturb(func, args, kwargs, result):
        # A wrong gelu: its result scaled in place, before the accuracy check reads it.
        if func is torch.ops.aten.gelu.default and not busy[0]:
            busy[0] = True
            try:
                result.mul_(1.01)
            finally:
                busy[0] = False

    x = torch.randn(4, 4).to("ttpu")
    _device.OBSERVERS.insert(0, perturb)
    try:
        with ttpu.debug_accuracy() as report:
            gelu_block(x).cpu()
    finally:
        _device.OBSERVERS.remove(perturb)
    first = report.first
    assert first is not None and first.op == "aten.gelu.default", report.mismatches
    assert first.where.endswith(f"test_kernels_profile_accuracy.py:{gelu_block.__code__.co_firstlineno + 2}"), first.where
    assert first.code == "z = F.gelu(y)  # the perturbed op: its line is what the report names"
    assert 0 < first.max_abs and first.mismatched > 0
