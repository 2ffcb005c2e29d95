"""Training under ``torch.compile(model, backend="ttpu")``: forward and backward graphs through
AOTAutograd, each run on ttpu, against the same loop in eager PyTorch."""

from __future__ import annotations

import copy

import models
import pytest
import torch

from ttpu import _dynamo


def train(model, batch, loss_fn, steps, compiled):
    model = copy.deepcopy(model).train()
    forward = torch.compile(model, backend="ttpu") if compiled else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    losses = []
    for step in range(steps):
        args, target = batch(step)
        kwargs = target if isinstance(target, dict) else {}
        loss = loss_fn(forward(*args, **kwargs), None if isinstance(target, dict) else target)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, model


@pytest.mark.parametrize("name", models.NAMES)
def test_adamw_steps_match_eager(name, no_fallback):
    model, batch, loss_fn = models.build(name)
    before = dict(_dynamo.calls)
    got_losses, got = train(model, batch, loss_fn, 5, compiled=True)
    want_losses, want = train(model, batch, loss_fn, 5, compiled=False)
    assert _dynamo.calls["eager"] == before["eager"], "no graph fell back"
    assert _dynamo.calls["ttpu"] >= before["ttpu"] + 10, "forward and backward of every step ran on ttpu"
    scale = 10.0 if name == "resnet18" else 1.0
    torch.testing.assert_close(torch.tensor(got_losses), torch.tensor(want_losses), rtol=1e-4 * scale, atol=1e-5 * scale)
    for (param, a), b in zip(want.named_parameters(), got.parameters()):
        # Within Adam's step size: see test_device.assert_trained_alike.
        torch.testing.assert_close(b, a, rtol=0, atol=2 * 1e-3 * 5, msg=lambda m: f"{param}: {m}")
    for (buffer, a), b in zip(want.named_buffers(), got.buffers()):
        torch.testing.assert_close(b, a, rtol=2e-2, atol=1e-2, msg=lambda m: f"{buffer}: {m}")


def test_the_fallback_counter_catches_a_graph_that_fell_back():
    class WithEigh(torch.nn.Module):
        def forward(self, x):
            return torch.linalg.eigvalsh(x @ x.transpose(-1, -2)).sum()

    before = _dynamo.calls["eager"]
    compiled = torch.compile(WithEigh(), backend="ttpu")
    x = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    with pytest.warns(_dynamo.TtpuFallbackWarning, match="eigh"):
        compiled(x).backward()
    assert _dynamo.calls["eager"] > before


def to(value, device):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {key: to(item, device) for key, item in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(to(item, device) for item in value)
    return value


@pytest.mark.parametrize("name", ["mlp", "cnn", "gpt2", "llama"])
def test_compiled_training_on_the_device_keeps_everything_there(name, no_fallback):
    model, batch, loss_fn = models.build(name)
    want_losses, want = train(model, batch, loss_fn, 3, compiled=False)
    on_device = copy.deepcopy(model).to("ttpu").train()
    if hasattr(on_device, "config"):
        # A key-value cache (made inside the compiled forward) is no part of training; see
        # docs/ARCHITECTURE.md on tensors made on the device while tracing.
        on_device.config.use_cache = False
    compiled = torch.compile(on_device, backend="ttpu")
    opt = torch.optim.AdamW(on_device.parameters(), lr=1e-3, weight_decay=0.01)
    losses = []
    for step in range(3):
        args, target = batch(step)
        kwargs = target if isinstance(target, dict) else {}
        before = torch.ttpu.stats()
        loss = loss_fn(compiled(*to(args, "ttpu"), **to(kwargs, "ttpu")), to(None if kwargs else target, "ttpu"))
        loss.backward()
        opt.step()
        opt.zero_grad()
        after = torch.ttpu.stats()
        assert after["to_host"] == before["to_host"], "nothing crosses to the host inside a step"
        assert sum(after["flushes"].values()) - sum(before["flushes"].values()) == 1, "one program per step"
        losses.append(loss.item())
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(want_losses), rtol=1e-4, atol=1e-5)
    for (param, a), b in zip(want.named_parameters(), on_device.parameters()):
        torch.testing.assert_close(b.cpu(), a, rtol=0, atol=2 * 1e-3 * 3, msg=lambda m: f"{param}: {m}")
