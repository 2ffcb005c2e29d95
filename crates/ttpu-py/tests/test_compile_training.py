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
    class WithEig(torch.nn.Module):
        # `linalg_eig` is refused on purpose (docs/ops.md says why), so it stays unsupported.
        def forward(self, x):
            return torch.linalg.eig(x @ x.transpose(-1, -2)).eigenvalues.real.sum()

    before = _dynamo.calls["eager"]
    compiled = torch.compile(WithEig(), backend="ttpu")
    x = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    with pytest.warns(_dynamo.TtpuFallbackWarning, match="linalg_eig"):
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


@pytest.mark.parametrize("name", ["mlp", "cnn", "gpt2", "llama", "gemma3", "mixtral"])
def test_compiled_training_on_the_device_keeps_everything_there(name, no_fallback):
    # The loop as a user writes it: the decoders keep their default `use_cache`, so their compiled
    # forward makes a key-value cache's empty first state on the device while tracing.
    model, batch, loss_fn = models.build(name)
    want_losses, want = train(model, batch, loss_fn, 3, compiled=False)
    on_device = copy.deepcopy(model).to("ttpu").train()
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


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.GELU(), torch.nn.Linear(16, 4))


OPTIMIZERS = {
    "adamw": lambda params: torch.optim.AdamW(params, lr=1e-2, weight_decay=0.01),
    "adam-amsgrad": lambda params: torch.optim.Adam(params, lr=1e-2, amsgrad=True),
    "sgd-momentum": lambda params: torch.optim.SGD(params, lr=1e-2, momentum=0.9, nesterov=True),
}


def run_steps(device, optimizer, compiled):
    model = mlp().to(device)
    opt = OPTIMIZERS[optimizer](model.parameters())
    step = torch.compile(opt.step, backend="ttpu") if compiled else opt.step
    counts, flushes = [], []
    donated = torch.ttpu.stats()["donated"]
    for index in range(3):
        x = torch.randn(5, 8, generator=torch.Generator().manual_seed(index)).to(device)
        model(x).square().mean().backward()
        before, stats = dict(_dynamo.calls), torch.ttpu.stats()
        step()
        counts.append({key: _dynamo.calls[key] - before[key] for key in before})
        flushes.append(sum(torch.ttpu.stats()["flushes"].values()) - sum(stats["flushes"].values()))
        opt.zero_grad()
        torch.ttpu.synchronize()
    counts.append(torch.ttpu.stats()["donated"] - donated)
    return [param.detach().cpu() for param in model.parameters()], opt, counts, flushes


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("device", ["cpu", "ttpu"])
def test_a_compiled_optimizer_step_is_one_program(device, optimizer, no_fallback):
    torch._dynamo.reset()
    want, _, _, _ = run_steps("cpu", optimizer, compiled=False)
    got, opt, counts, flushes = run_steps(device, optimizer, compiled=True)
    donated = counts.pop()
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    # One program per graph, run once per step. SGD's first step makes its momentum buffers, so
    # Dynamo traces the second step anew; after that no step compiles anything.
    graphs = [count["graphs"] for count in counts]
    assert graphs == ([1, 1, 0] if optimizer == "sgd-momentum" else [1, 0, 0]), counts
    assert all(count == {"ttpu": 1, "eager": 0, "graphs": count["graphs"], "programs": count["graphs"]} for count in counts), counts
    if device == "ttpu":
        # The step is deferred with the rest of the training step: nothing runs or reads inside it,
        # and its counters live on the device (a CPU counter would be read back every step).
        assert flushes == [0, 0, 0], flushes
        assert all(state["step"].device.type == "ttpu" for state in opt.state.values() if "step" in state)
        # Every step writes the new parameters and state into the buffers of the old ones.
        updated = sum(1 + sum(isinstance(value, torch.Tensor) for value in state.values()) for state in opt.state.values())
        assert donated >= 3 * updated - updated, (donated, updated)


@pytest.mark.parametrize("device", ["cpu", "ttpu"])
def test_dynamic_training_over_three_batch_sizes_is_one_graph_pair(device, no_fallback):
    torch._dynamo.reset()
    model = mlp()
    compiled_model = copy.deepcopy(model).to(device)
    compiled = torch.compile(compiled_model, backend="ttpu", dynamic=True)
    before = dict(_dynamo.calls)
    for batch in (3, 5, 7, 5):
        x = torch.randn(batch, 8, generator=torch.Generator().manual_seed(batch))
        target = torch.arange(batch).remainder(4)
        want = torch.nn.functional.cross_entropy(model(x), target)
        want.backward()
        got = torch.nn.functional.cross_entropy(compiled(x.to(device)), target.to(device))
        got.backward()
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-6)
    for a, b in zip(compiled_model.parameters(), model.parameters()):
        torch.testing.assert_close(a.grad.cpu(), b.grad, rtol=1e-5, atol=1e-6)
    counts = {key: _dynamo.calls[key] - before[key] for key in before}
    # One Dynamo graph, so one forward and backward pair for every batch size; XLA programs have
    # static shapes, so each pair records a program per size seen (3 sizes: 6), none for a repeat.
    assert counts == {"ttpu": 8, "eager": 0, "graphs": 1, "programs": 6}, counts


def test_a_graph_traced_with_a_number_refuses_another_size():
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(lambda x: (x.view(3, 2) * 2,))(torch.ones(6))
    graph = _dynamo._AtenGraph(gm, "#test")
    torch.testing.assert_close(graph(torch.ones(6))[0], torch.full((3, 2), 2.0))
    with pytest.raises(RuntimeError, match=r"traced with size 6 at dim 0 of input `x_1` and received 8"):
        graph(torch.ones(8))
