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
