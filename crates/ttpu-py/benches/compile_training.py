#!/usr/bin/env python3
"""`torch.compile` training and `generate()` with ttpu, inductor and eager PyTorch, side by side in
one run.

    python crates/ttpu-py/benches/compile_training.py [--steps N] [--tokens N] [--only train,decode]

Training: one step of a GPT-2-style model (d 256, 4 layers, 4 heads, T 128, batch 8) is forward,
backward and an AdamW step, with the loss read back. Paths:

- ``ttpu (cpu tensors)``: ``torch.compile(model, backend="ttpu")``, the model on the CPU;
- ``ttpu (device)``: the same with the model on ``"ttpu"`` (the optimizer step deferred with it);
- ``inductor``: ``torch.compile(model)`` on the CPU;
- ``eager``: PyTorch on the CPU.

The first step (Dynamo's trace, the backend's compile, the run) and the median warm step.

Decode: greedy ``generate()`` of a tiny Llama (d 256, 4 layers, vocabulary 8192) from 16 prompt
tokens, ``--tokens`` new ones, batch 1, the forward compiled by each backend, with a dynamic cache
and with ``cache_implementation="static"``. Tokens/s of a warm generation and, for ttpu, the
programs the first generation recorded.

Inductor's cache points into an empty temporary folder so its first step compiles too.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import tempfile
import time

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor-"))

import torch  # noqa: E402

import ttpu  # noqa: E402,F401
from ttpu import _dynamo  # noqa: E402


def gpt2():
    import transformers

    config = transformers.GPT2Config(
        vocab_size=8192, n_positions=128, n_embd=256, n_layer=4, n_head=4,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False,
    )
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config)


def llama():
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=8192, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=512,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def train(model, backend, device, steps):
    torch._dynamo.reset()
    model = copy.deepcopy(model).to(device).train()
    forward = model if backend == "eager" else torch.compile(model, backend=backend)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 8192, (8, 128), generator=torch.Generator().manual_seed(0)).to(device)
    times, losses = [], []
    for _ in range(steps + 1):
        start = time.perf_counter()
        loss = forward(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
        times.append(time.perf_counter() - start)
    return times[0], statistics.median(times[1:]), losses


def decode(model, backend, tokens, cache):
    torch._dynamo.reset()
    model = copy.deepcopy(model)
    if backend != "eager":
        model.forward = torch.compile(model.forward, backend=backend)
    ids = torch.randint(0, 8192, (1, 16), generator=torch.Generator().manual_seed(0))
    options = dict(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)
    if cache == "static":
        options["cache_implementation"] = "static"
    before = dict(_dynamo.calls)
    start = time.perf_counter()
    first = model.generate(ids, **options)
    first_time = time.perf_counter() - start
    programs = _dynamo.calls["programs"] - before["programs"]
    fallbacks = _dynamo.calls["eager"] - before["eager"]
    start = time.perf_counter()
    out = model.generate(ids, **options)
    warm = time.perf_counter() - start
    return first_time, tokens / warm, programs, fallbacks, out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--only", default="train,decode")
    options = parser.parse_args()
    parts = options.only.split(",")
    torch.set_num_threads(os.cpu_count() or 1)
    if "train" in parts:
        model = gpt2()
        print(f"GPT-2 training step (d256, 4 layers, T128, batch 8), {options.steps} warm steps")
        print("| path | first step (s) | warm step (ms) | last loss |")
        print("|---|---|---|---|")
        for label, backend, device in [
            ("ttpu (cpu tensors)", "ttpu", "cpu"),
            ("ttpu (device)", "ttpu", "ttpu"),
            ("inductor", "inductor", "cpu"),
            ("eager", "eager", "cpu"),
        ]:
            first, warm, losses = train(model, backend, device, options.steps)
            print(f"| {label} | {first:.1f} | {warm * 1e3:.0f} | {losses[-1]:.4f} |", flush=True)
    if "decode" in parts:
        model = llama()
        print(f"\nGreedy decode, tiny Llama (d256, 4 layers), batch 1, 16 prompt + {options.tokens} new tokens")
        print("| path | cache | first generate (s) | tokens/s (warm) | ttpu programs | fallbacks | same tokens as eager |")
        print("|---|---|---|---|---|---|---|")
        reference = {}
        for cache in ("dynamic", "static"):
            for backend in ("eager", "ttpu", "inductor"):
                first, rate, programs, fallbacks, out = decode(model, backend, options.tokens, cache)
                reference.setdefault(cache, out)
                same = torch.equal(out, reference[cache])
                shown = programs if backend == "ttpu" else "-"
                print(f"| {backend} | {cache} | {first:.1f} | {rate:.1f} | {shown} | {fallbacks if backend == 'ttpu' else '-'} | {same} |", flush=True)


if __name__ == "__main__":
    main()
