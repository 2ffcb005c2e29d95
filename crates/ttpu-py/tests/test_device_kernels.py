"""User kernels on the ``"ttpu"`` device: a custom op whose kernel is registered runs it, deferred
and fused with its neighbours like any call, in eager code and in ``torch.compile`` graphs on the
device, and matches the op's CPU implementation; a call of other types is the kernel's error; a
custom op without a kernel keeps the device's refusal (or the CPU fallback)."""

from __future__ import annotations

import re
import warnings

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_matches

import ttpu
import ttpu._dynamo


# The ops live in a namespace of their own: other test modules define `mylib::` ops in the same
# process, and the kernel registry is the process's.
@torch.library.custom_op("devk::silu", mutates_args=())
def silu(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x)


@silu.register_fake
def _(x):
    return torch.empty_like(x)


@torch.library.custom_op("devk::silu_gate", mutates_args=())
def silu_gate(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    gate = torch.sigmoid(x)
    return x * gate, gate


@silu_gate.register_fake
def _(x):
    return torch.empty_like(x), torch.empty_like(x)


@torch.library.custom_op("devk::softplus", mutates_args=())
def softplus(x: torch.Tensor) -> torch.Tensor:
    return F.softplus(x)


@softplus.register_fake
def _(x):
    return torch.empty_like(x)


@torch.library.custom_op("devk::wrong_silu", mutates_args=())
def wrong_silu(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x)


@wrong_silu.register_fake
def _(x):
    return torch.empty_like(x)


@torch.library.custom_op("devk::silu_trained", mutates_args=())
def silu_trained(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x)


@silu_trained.register_fake
def _(x):
    return torch.empty_like(x)


def _silu_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    gate = torch.sigmoid(x)
    return grad * gate * (1 + x * (1 - gate))


silu_trained.register_autograd(_silu_backward, setup_context=lambda ctx, inputs, output: ctx.save_for_backward(*inputs))


@torch.library.custom_op("devk::late", mutates_args=())
def late(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x)


@torch.library.custom_op("devk::bump", mutates_args=("x",))
def bump(x: torch.Tensor) -> None:
    x.add_(1)


@torch.library.custom_op("devk::no_kernel", mutates_args=())
def no_kernel(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x)


SHAPE = (4, 8)

# StableHLO in generic op form, as `ttpu.register_kernel` takes it without JAX.
SILU = """module {
  func.func @main(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
    %gate = "stablehlo.logistic"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
    %res = "stablehlo.multiply"(%x, %gate) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    return %res : tensor<4x8xf32>
  }
}"""

SILU_GATE = """module {
  func.func @main(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
    %gate = "stablehlo.logistic"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
    %res = "stablehlo.multiply"(%x, %gate) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    return %res, %gate : tensor<4x8xf32>, tensor<4x8xf32>
  }
}"""

# A kernel that computes the gate only: not what `wrong_silu`'s CPU implementation computes.
GATE_ONLY = """module {
  func.func @main(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
    %gate = "stablehlo.logistic"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
    return %gate : tensor<4x8xf32>
  }
}"""


def softplus_jax(x):
    import jax

    return jax.nn.softplus(x)


def register_once(name: str, implementation, *example_args) -> None:
    if name not in ttpu.registered_kernels():
        ttpu.register_kernel(name, implementation, *example_args)


@pytest.fixture(scope="module", autouse=True)
def kernels():
    register_once("devk::silu", SILU)
    register_once("devk::silu_gate", SILU_GATE)
    register_once("devk::wrong_silu", GATE_ONLY)
    register_once("devk::bump", SILU)
    register_once("devk::silu_trained", SILU)
    pytest.importorskip("jax")
    register_once("devk::softplus", softplus_jax, torch.empty(SHAPE))


def sample(seed: int = 0) -> torch.Tensor:
    return torch.randn(SHAPE, generator=torch.Generator().manual_seed(seed)) * 3


def test_a_custom_op_runs_its_kernel_on_the_device_deferred_and_fused_with_its_neighbours():
    x = sample()
    device_x = x.to("ttpu")
    torch.ttpu.synchronize()
    before = torch.ttpu.stats()
    y = torch.ops.devk.silu(device_x * 2) + 1
    recorded = torch.ttpu.stats()
    assert y.device.type == "ttpu" and y.shape == SHAPE and y.dtype == torch.float32
    assert recorded["calls"] == before["calls"] + 3
    assert (recorded["executions"], recorded["flushes"]) == (before["executions"], before["flushes"]), "deferred"
    got = y.cpu()
    after = torch.ttpu.stats()
    assert after["executions"] == before["executions"] + 1, "mul, the kernel and add ran as one program"
    assert after["fallbacks"].get("devk.silu.default") is None
    want = silu(x * 2) + 1
    assert_matches(got, want)
    # Again on other values: the same template and program.
    assert_matches((torch.ops.devk.silu(sample(1).to("ttpu") * 2) + 1).cpu(), silu(sample(1) * 2) + 1)
    assert torch.ttpu.stats()["templates"] == after["templates"]


def test_a_kernel_reads_a_views_values_and_gives_contiguous_results():
    x = torch.randn(8, 4)
    y = torch.ops.devk.silu(x.to("ttpu").t())
    assert y.stride() == (8, 1)
    assert_matches(y.cpu(), silu(x.t()))


def test_a_kernel_with_two_results_gives_a_tuple_of_tensors():
    x = sample(2)
    out, gate = torch.ops.devk.silu_gate(x.to("ttpu"))
    want_out, want_gate = silu_gate(x)
    assert_matches(out.cpu(), want_out)
    assert_matches(gate.cpu(), want_gate)


def test_a_kernel_exported_from_jax_runs_on_the_device():
    x = sample(3)
    got = torch.ops.devk.softplus(x.to("ttpu") - 1).exp()
    assert_matches(got.cpu(), softplus(x - 1).exp())


def test_a_call_of_other_types_is_the_kernels_error():
    wrong_dtype = sample().double().to("ttpu")
    message = "devk.silu.default: argument 0 is f64[4, 8], but kernel `devk::silu` takes f32[4, 8]"
    with pytest.raises(ttpu.TtpuError, match=f"^{re.escape(message)}$"):
        torch.ops.devk.silu(wrong_dtype)
    wrong_shape = torch.zeros(2, 8, device="ttpu")
    message = "devk.silu.default: argument 0 is f32[2, 8], but kernel `devk::silu` takes f32[4, 8]"
    with pytest.raises(ttpu.TtpuError, match=f"^{re.escape(message)}$"):
        torch.ops.devk.silu(wrong_shape)


def test_torch_compile_of_a_function_calling_the_op_runs_on_the_device_without_falling_back():
    from ttpu._dynamo import calls

    def forward(x, w):
        hidden = torch.ops.devk.silu(x @ w)
        return torch.ops.devk.softplus(hidden) * 2

    x, w = sample(4), torch.randn(8, 8) / 3
    want = forward(x, w)
    compiled = torch.compile(forward, backend="ttpu")
    before = dict(calls)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ttpu._dynamo.TtpuFallbackWarning)
        got = compiled(x.to("ttpu"), w.to("ttpu"))
        assert got.device.type == "ttpu"
        assert_matches(got.cpu(), want)
        # CPU tensors take the same graph path: uploaded, run on ttpu, read back.
        assert_matches(torch.compile(forward, backend="ttpu")(x, w), want)
    assert calls["eager"] == before["eager"], "no graph ran in eager PyTorch"
    assert calls["ttpu"] == before["ttpu"] + 2


def test_a_custom_op_with_an_autograd_formula_trains_on_the_device_eager_and_compiled():
    from ttpu._dynamo import calls

    torch.manual_seed(0)
    layer = torch.nn.Linear(8, 8)
    x = sample(8)

    def forward(layer, x):
        return torch.ops.devk.silu_trained(layer(x)).square().mean()

    want_loss = forward(layer, x)
    want_loss.backward()
    want_grads = [p.grad for p in layer.parameters()]
    for compiled in (False, True):
        on_device = torch.nn.Linear(8, 8).to("ttpu")
        on_device.load_state_dict(layer.state_dict())
        # The compiled forward's backward graph runs at `backward()`, as for any compiled model.
        run = torch.compile(forward, backend="ttpu") if compiled else forward
        before = dict(calls)
        loss = run(on_device, x.to("ttpu"))
        loss.backward()
        assert_matches(loss.detach().cpu(), want_loss.detach())
        for got, want in zip((p.grad for p in on_device.parameters()), want_grads):
            assert got.device.type == "ttpu"
            assert_matches(got.cpu(), want)
        if compiled:
            assert calls["eager"] == before["eager"] and calls["ttpu"] >= before["ttpu"] + 2, calls


def test_a_kernel_registered_after_the_ops_first_call_on_the_device_runs_it():
    x = sample(5)
    device_x = x.to("ttpu")
    if "devk::late" not in ttpu.registered_kernels():
        with pytest.raises(NotImplementedError, match=r"`devk\.late\.default` is not supported on the ttpu device"):
            torch.ops.devk.late(device_x)
        ttpu.register_kernel("devk::late", SILU)
    assert_matches(torch.ops.devk.late(device_x).cpu(), late(x))


def test_a_custom_op_that_mutates_its_arguments_is_refused_naming_it():
    message = (
        "`devk.bump.default` mutates or aliases its arguments, and its kernel `devk::bump` can only stand for a "
        "custom op that returns new tensors (`mutates_args=()`) on the ttpu device"
    )
    x = sample().to("ttpu")
    with pytest.raises(ttpu.TtpuError, match=f"^{re.escape(message)}$"):
        torch.ops.devk.bump(x)


def test_a_custom_op_without_a_kernel_keeps_the_devices_refusal_and_the_cpu_fallback():
    x = sample(6)
    with pytest.raises(NotImplementedError) as error:
        torch.ops.devk.no_kernel(x.to("ttpu"))
    assert "`devk.no_kernel.default` is not supported on the ttpu device" in str(error.value)
    ttpu.allow_cpu_fallback()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = torch.ops.devk.no_kernel(x.to("ttpu"))
        assert got.device.type == "ttpu"
        assert_matches(got.cpu(), no_kernel(x))
        assert any("`devk.no_kernel.default` ran on the CPU" in str(w.message) for w in caught)
    finally:
        ttpu.allow_cpu_fallback(False)


def test_a_kernel_that_computes_something_else_than_the_op_is_caught():
    x = sample(7)
    got = torch.ops.devk.wrong_silu(x.to("ttpu")).cpu()
    # The comparison these tests use rejects it...
    with pytest.raises(AssertionError):
        assert_matches(got, wrong_silu(x))
    assert_matches(got, torch.sigmoid(x))
    # ... and so does the accuracy mode, which names the op.
    with ttpu.debug_accuracy() as report:
        torch.ops.devk.wrong_silu(x.to("ttpu")).cpu()
    assert report.first is not None and report.first.op == "devk.wrong_silu.default", report.mismatches
