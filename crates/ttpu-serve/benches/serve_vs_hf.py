#!/usr/bin/env python3
"""`ttpu serve` next to Hugging Face `generate()`: output tokens per second and time to first token
at concurrency 1, 8 and 32, side by side in one run.

Run by hand from the repository root with the package installed and release binaries:

    cargo build --release -p ttpu -p ttpu-serve
    python crates/ttpu-serve/benches/serve_vs_hf.py [--rounds 3] [--prompt 64] [--tokens 128]

The model is a Llama-style decoder (hidden 512, 8 layers, 8 heads, MLP 1408, vocabulary 32000,
random weights, seeded) exported with `ttpu.export_llm(max_batch=32, max_seq_len=512)`; float32 on
the CPU. Every request has a prompt of `--prompt` random token ids and generates exactly
`--tokens` tokens (`ignore_eos`; greedy).

- ttpu: `ttpu serve --warm-up` (every greedy program compiled before timing), and `c` client
  threads each sending `--requests-per-client` streamed requests back to back. Throughput is all
  generated tokens over the wall time from the first request sent to the last token received;
  time to first token is from sending a request to its first streamed token.
- Hugging Face: `model.generate()` in this process on PyTorch (all cores), batched: the `c`
  prompts of one round of requests go as one batch (equal lengths, so no padding), with
  `min_new_tokens = max_new_tokens = --tokens`. Throughput is `c * tokens` over the call; time to
  first token is a call with `max_new_tokens=1` on the same batch (prefill and the first token).

Rounds interleave the contenders; each figure is the median over rounds (min-max in brackets).

`--gpu` runs the same benchmark on a CUDA GPU in bf16 (prepared, see docs/performance.md): the
model in bfloat16, Hugging Face on `cuda:0`, and `ttpu serve --plugin` with the CUDA PJRT plugin
(`pip install jax-cuda12-pjrt`; or pass `--plugin PATH`).
"""

from __future__ import annotations

import argparse
import glob
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "crates", "ttpu-py", "python"))
sys.path.insert(0, os.path.join(ROOT, "crates", "ttpu-py", "tests"))


def build_model(dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=32000, hidden_size=512, intermediate_size=1408, num_hidden_layers=8, num_attention_heads=8,
        num_key_value_heads=8, max_position_embeddings=512, bos_token_id=0, eos_token_id=1, pad_token_id=2,
    )
    return LlamaForCausalLM(config).to(dtype).eval()


def find_cuda_plugin() -> str:
    import site

    for folder in site.getsitepackages():
        found = glob.glob(os.path.join(folder, "jax_plugins", "xla_cuda*", "xla_cuda_plugin.so"))
        if found:
            return found[0]
    raise SystemExit("no CUDA PJRT plugin found: pip install jax-cuda12-pjrt, or pass --plugin")


class Server:
    def __init__(self, binary, folder, extra, env):
        self.process = subprocess.Popen(
            [binary, "serve", folder, "--port", "0", "--warm-up", *extra],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env,
        )
        self.log = []
        for line in self.process.stderr:
            self.log.append(line)
            sys.stderr.write("  ttpu serve: " + line)
            found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if found:
                self.port = int(found.group(1))
                break
        else:
            raise SystemExit("ttpu serve did not start:\n" + "".join(self.log))
        threading.Thread(target=lambda: self.log.extend(self.process.stderr), daemon=True).start()

    def stream(self, prompt, tokens):
        """`(time to first token, tokens received)` of one streamed request."""
        body = {"model": self.model, "prompt": prompt, "max_tokens": tokens, "temperature": 0, "ignore_eos": True,
                "stream": True, "return_token_ids": True}
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        sent = time.perf_counter()
        connection.request("POST", "/v1/completions", body=json.dumps(body))
        response = connection.getresponse()
        assert response.status == 200, response.read()
        first, received = None, 0
        for line in response:
            if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            ids = chunk["choices"][0].get("token_ids") if chunk["choices"] else None
            if ids:
                first = first or time.perf_counter() - sent
                received += len(ids)
        connection.close()
        return first, received

    @property
    def model(self):
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        connection.request("GET", "/v1/models")
        name = json.loads(connection.getresponse().read())["data"][0]["id"]
        connection.close()
        return name

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=60)


def ttpu_round(server, prompts, concurrency, tokens, per_client):
    """`(tokens/s, [times to first token])` for `concurrency` clients."""
    ttfts, counts, errors = [], [], []

    def client(index):
        try:
            for k in range(per_client):
                first, received = server.stream(prompts[(index * per_client + k) % len(prompts)], tokens)
                ttfts.append(first)
                counts.append(received)
        except Exception as error:
            errors.append(error)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(concurrency)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise errors[0]
    assert all(count == tokens for count in counts), counts
    return sum(counts) / elapsed, ttfts


def hf_round(model, prompts, concurrency, tokens, device, per_client):
    """`(tokens/s, time to first token)` of batched `generate()` calls."""
    batch = torch.tensor(prompts[:concurrency], device=device)
    generated, elapsed = 0, 0.0
    with torch.no_grad():
        for _ in range(per_client):
            sync(device)
            started = time.perf_counter()
            out = model.generate(batch, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=2)
            sync(device)
            elapsed += time.perf_counter() - started
            generated += (out.shape[1] - batch.shape[1]) * batch.shape[0]
        sync(device)
        started = time.perf_counter()
        model.generate(batch, max_new_tokens=1, do_sample=False, pad_token_id=2)
        sync(device)
        ttft = time.perf_counter() - started
    return generated / elapsed, ttft


def sync(device):
    if device != "cpu":
        torch.cuda.synchronize()


def summary(values, unit_scale=1.0, digits=1):
    values = [v * unit_scale for v in values]
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prompt", type=int, default=64, help="prompt tokens per request")
    parser.add_argument("--tokens", type=int, default=128, help="generated tokens per request")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--requests-per-client", type=int, default=2)
    parser.add_argument("--gpu", action="store_true", help="bf16 on a CUDA GPU (HF on cuda:0, ttpu on the CUDA plugin)")
    parser.add_argument("--plugin", help="the PJRT plugin for ttpu (default: CPU, or the CUDA plugin with --gpu)")
    parser.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "ttpu"))
    args = parser.parse_args()
    levels = [int(level) for level in args.concurrency.split(",")]
    device, dtype = ("cuda", torch.bfloat16) if args.gpu else ("cpu", torch.float32)
    plugin = args.plugin or (find_cuda_plugin() if args.gpu else None)
    if device == "cpu":
        torch.set_num_threads(len(os.sched_getaffinity(0)))

    import ttpu
    from test_serve import _tokenizer

    model = build_model(dtype)
    folder = tempfile.mkdtemp(prefix="ttpu-serve-bench-")
    started = time.perf_counter()
    ttpu.export_llm(model, folder, max_batch=max(levels), max_seq_len=512, tokenizer=_tokenizer())
    export_s = time.perf_counter() - started
    manifest = json.load(open(os.path.join(folder, "serve.json")))
    hf_model = model.to(device)

    generator = torch.Generator().manual_seed(1)
    prompts = torch.randint(3, 32000, (max(levels) * args.requests_per_client, args.prompt), generator=generator).tolist()
    env = dict(os.environ, TTPU_CACHE_DIR=os.path.join(folder, "compiled"))
    extra = ["--plugin", plugin] if plugin else []
    started = time.perf_counter()
    server = Server(args.binary, folder, extra, env)
    start_s = time.perf_counter() - started
    results = {level: {"ttpu": [], "ttpu_ttft": [], "hf": [], "hf_ttft": []} for level in levels}
    try:
        for round_index in range(args.rounds):
            for level in levels:
                rate, ttfts = ttpu_round(server, prompts, level, args.tokens, args.requests_per_client)
                results[level]["ttpu"].append(rate)
                results[level]["ttpu_ttft"].append(statistics.median(ttfts))
                rate, ttft = hf_round(hf_model, prompts, level, args.tokens, device, args.requests_per_client)
                results[level]["hf"].append(rate)
                results[level]["hf_ttft"].append(ttft)
                print(f"round {round_index + 1} concurrency {level}: ttpu {results[level]['ttpu'][-1]:.0f} tok/s, "
                      f"HF {results[level]['hf'][-1]:.0f} tok/s", file=sys.stderr)
        compiled = [line for line in server.log if "warmed up" in line]
    finally:
        server.stop()

    print(f"\nexport {export_s:.1f} s; server start with warm-up {start_s:.1f} s ({''.join(compiled).strip()}); "
          f"buckets: batch {manifest['batch_buckets']}, prompt {manifest['prompt_buckets']}, "
          f"window {manifest['window_buckets']}; {'bf16 on ' + torch.cuda.get_device_name() if args.gpu else 'f32 on the CPU'}, "
          f"torch threads {torch.get_num_threads()}; prompt {args.prompt} tokens, {args.tokens} generated per request\n")
    print("| concurrency | ttpu serve tokens/s | HF generate tokens/s | ratio | ttpu TTFT (ms) | HF TTFT (ms) |")
    print("|---|---|---|---|---|---|")
    for level in levels:
        r = results[level]
        ratio = statistics.median(t / h for t, h in zip(r["ttpu"], r["hf"]))
        print(f"| {level} | {summary(r['ttpu'])} | {summary(r['hf'])} | {ratio:.2f}x | "
              f"{summary(r['ttpu_ttft'], 1000, 0)} | {summary(r['hf_ttft'], 1000, 0)} |")


if __name__ == "__main__":
    main()
