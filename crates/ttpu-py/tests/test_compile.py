"""`torch.compile(model, backend="ttpu")` against eager PyTorch."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn as nn
from conftest import assert_matches

import ttpu
from ttpu import _dynamo


def compiled_and_eager(model: nn.Module, *args, **compile_kwargs):
    model = model.eval()
    compiled = torch.compile(copy.deepcopy(model), backend="ttpu", **compile_kwargs)
    with torch.no_grad():
        want = model(*args)
        got = compiled(*args)
    return got, want


def test_backend_is_found_by_name():
    assert "ttpu" in torch._dynamo.list_backends(exclude_tags=())


def test_mlp(no_fallback):
    import export as models

    torch.manual_seed(0)
    got, want = compiled_and_eager(models.MLP(), torch.randn(4, 16))
    assert_matches(got, want)


def test_gpt2_block(no_fallback):
    import export as models

    torch.manual_seed(0)
    got, want = compiled_and_eager(models.GPT2Block(), torch.randn(2, 16, 32))
    assert_matches(got, want)


def test_torchvision_resnet18(no_fallback):
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    # Batch norm statistics that are not the identity, so the folding is exercised.
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 1.5)
    got, want = compiled_and_eager(model, torch.randn(1, 3, 64, 64))
    assert_matches(got, want)


def _hf_model(arch: str):
    import transformers

    torch.manual_seed(0)
    if arch == "gpt2":
        config = transformers.GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=4)
        model = transformers.GPT2LMHeadModel(config)
    else:
        config = transformers.BertConfig(
            vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=32,
        )
        model = transformers.BertModel(config)
    model.config._attn_implementation = "eager"
    return model.eval()


@pytest.mark.parametrize("arch", ["gpt2", "bert"])
def test_hugging_face(arch, no_fallback):
    model = _hf_model(arch)
    input_ids = torch.randint(0, 128, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.int64)
    mask[1, 6:] = 0
    compiled = torch.compile(copy.deepcopy(model), backend="ttpu")
    with torch.no_grad():
        want = model(input_ids=input_ids, attention_mask=mask)
        got = compiled(input_ids=input_ids, attention_mask=mask)
    key = "logits" if arch == "gpt2" else "last_hidden_state"
    assert_matches(got[key], want[key])


def test_dynamic_batch_compiles_one_graph(no_fallback):
    import export as models

    torch.manual_seed(0)
    model = models.MLP().eval()
    compiled = torch.compile(copy.deepcopy(model), backend="ttpu", dynamic=True)
    graphs_before = _dynamo.calls["graphs"]
    with torch.no_grad():
        for batch in (3, 5, 9):
            x = torch.randn(batch, 16)
            assert_matches(compiled(x), model(x), f"batch {batch}")
    # One Dynamo graph, symbolic in the batch, serves every size.
    assert _dynamo.calls["graphs"] == graphs_before + 1


class WithEig(nn.Module):
    # `linalg_eig` is refused on purpose (docs/ops.md says why), so it stays unsupported.
    def forward(self, x):
        sym = x @ x.transpose(-1, -2)
        return torch.linalg.eig(sym).eigenvalues.real + 1


def test_unsupported_op_falls_back_with_a_warning():
    torch.manual_seed(0)
    model = WithEig()
    compiled = torch.compile(model, backend="ttpu")
    x = torch.randn(4, 4, dtype=torch.float64)
    eager_before = _dynamo.calls["eager"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad():
            got = compiled(x)
    messages = [str(w.message) for w in caught if issubclass(w.category, _dynamo.TtpuFallbackWarning)]
    assert len(messages) == 1, messages
    assert "runs in eager PyTorch" in messages[0] and "linalg_eig" in messages[0], messages[0]
    assert _dynamo.calls["eager"] == eager_before + 1
    assert_matches(got, model(x))


def test_weights_changed_by_pytorch_are_uploaded_again(no_fallback):
    import export as models

    torch.manual_seed(0)
    model = models.MLP().eval()
    compiled = torch.compile(model, backend="ttpu")
    x = torch.randn(4, 16)
    with torch.no_grad():
        first = compiled(x)
        model.fc3.bias.add_(1.0)  # in place: same storage, a new version
        second = compiled(x)
        want = model(x)
    assert_matches(second, want)
    assert_matches(second, first + 1.0)


def test_a_call_that_needs_autograd_trains_on_ttpu(no_fallback):
    import export as models

    torch.manual_seed(0)
    model = models.MLP().train()
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="ttpu")
    x = torch.randn(4, 16)
    compiled(x).square().sum().backward()
    reference(x).square().sum().backward()
    for (name, got), want in zip(model.named_parameters(), reference.parameters()):
        assert_matches(got.grad, want.grad, f"grad {name}")


def test_errors_are_python_exceptions_with_the_location():
    with pytest.raises(ttpu.TtpuError, match=r"^bad\.fx:1:1: "):
        ttpu._ttpu.lower("this is not an exported program\n", "bad.fx")


def test_buffers_the_graph_updates_follow_pytorch(no_fallback):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).train()
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="ttpu")
    with torch.no_grad():
        for step in range(3):
            x = torch.randn(2, 3, 8, 8)
            assert_matches(compiled(x), reference(x), f"step {step}")
    for (name, got), (_, want) in zip(model.named_buffers(), reference.named_buffers()):
        assert_matches(got, want, name)


def test_an_index_out_of_range_in_a_compiled_graph_raises_as_pytorch_does(no_fallback):
    torch.manual_seed(0)
    embedding = nn.Embedding(5, 3)
    compiled = torch.compile(embedding, backend="ttpu")
    ok = torch.tensor([0, 4])
    with torch.no_grad():
        assert_matches(compiled(ok), embedding(ok))
        with pytest.raises(IndexError):
            embedding(torch.tensor([1, 5]))
        # The graph's results are read back to the CPU: the read raises instead of a clamped row.
        with pytest.raises(ttpu.TtpuIndexError, match="`aten.embedding.default`: an index is out of bounds"):
            compiled(torch.tensor([1, 5]))
        assert_matches(compiled(ok), embedding(ok))
