"""Hugging Face ``generate()`` with the forward compiled by ttpu, against eager, and why a
compiled graph records another program."""

from __future__ import annotations

import copy
import logging
import warnings

import pytest
import torch

from ttpu import _dynamo


def build(arch: str):
    import transformers

    torch.manual_seed(0)
    small = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=64)
    if arch == "gpt2":
        config = transformers.GPT2Config(vocab_size=128, n_positions=64, n_embd=32, n_layer=2, n_head=4)
        return transformers.GPT2LMHeadModel(config).eval()
    if arch == "llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(**small)).eval()
    if arch == "qwen3":
        return transformers.Qwen3ForCausalLM(transformers.Qwen3Config(head_dim=8, **small)).eval()
    if arch == "mistral":
        return transformers.MistralForCausalLM(transformers.MistralConfig(sliding_window=16, **small)).eval()
    raise ValueError(arch)


def generate_both(arch, **options):
    # Dynamo keeps its caches per code object, and every model of a class shares `forward`'s:
    # start each comparison from none so earlier tests do not spend its recompile limit.
    torch._dynamo.reset()
    model = build(arch)
    ids = torch.randint(0, 128, (2, 6), generator=torch.Generator().manual_seed(1))
    want = model.generate(ids, max_new_tokens=8, do_sample=False, **options)
    compiled = copy.deepcopy(model)
    compiled.forward = torch.compile(compiled.forward, backend="ttpu")
    before = dict(_dynamo.calls)
    got = compiled.generate(ids, max_new_tokens=8, do_sample=False, **options)
    return got, want, {key: _dynamo.calls[key] - before[key] for key in before}


@pytest.mark.parametrize("arch", ["gpt2", "llama", "qwen3", "mistral"])
def test_greedy_generate_is_token_identical(arch, no_fallback):
    got, want, counts = generate_both(arch)
    assert torch.equal(got, want), (got, want)
    assert counts["eager"] == 0 and counts["ttpu"] == 8, counts


def test_a_static_cache_decodes_with_two_programs(no_fallback):
    got, want, counts = generate_both("llama", cache_implementation="static")
    assert torch.equal(got, want)
    # One program for the prompt, one for every decode step.
    assert counts["programs"] == 2, counts


def test_the_token_checker_rejects_other_tokens():
    got, want, _ = generate_both("gpt2")
    got[0, -1] = (got[0, -1] + 1) % 128
    assert not torch.equal(got, want)


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_a_new_program_says_why():
    def f(x, n):
        return x * n

    torch._dynamo.reset()
    compiled = torch.compile(f, backend="ttpu")
    first = torch.ones(3)
    # A symbolic size: Dynamo keeps one graph, and ttpu records one program per concrete size.
    torch._dynamo.mark_dynamic(first, 0)
    # A handler of its own rather than pytest's caplog, which `-p no:logging` removes.
    logger = logging.getLogger("ttpu.recompiles")
    records, level = _Records(), logger.level
    logger.addHandler(records)
    logger.setLevel(logging.INFO)
    try:
        compiled(first, 2)
        compiled(torch.ones(3), 2)
        compiled(torch.ones(5), 2)
    finally:
        logger.removeHandler(records)
        logger.setLevel(level)
    messages = records.messages
    assert len(messages) == 1, messages
    assert "records program 2" in messages[0] and "shape [5] (was [3])" in messages[0], messages


def test_a_graph_that_keeps_recording_warns_once():
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: x + 1, backend="ttpu")
    first = torch.zeros(1)
    torch._dynamo.mark_dynamic(first, 0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled(first)
        for size in range(2, 20):
            torch.testing.assert_close(compiled(torch.zeros(size)), torch.ones(size))
    found = [str(w.message) for w in caught if issubclass(w.category, _dynamo.TtpuRecompileWarning)]
    assert len(found) == 1, found
    assert "has recorded 16 programs, one per input signature" in found[0], found
