#!/usr/bin/env python3
"""One training step of fixtures/train_gpt side by side: PyTorch eager, torch.compile, and `ttpu train`.

Run by hand, from the repository root, after `cargo build --release -p ttpu`:

    python crates/ttpu/benches/train_step.py [--steps 200]

Needs torch and safetensors (keep the virtual environment outside the repository). Each contender
runs the same AdamW step (forward, backward, optimizer) on the fixture's data; the script prints
the median step time of each, the FLOPs of one step (PyTorch's FlopCounterMode over forward and
backward), and each one's achieved FLOP/s as a fraction of this machine's measured float32 matmul
peak (a 1024x1024 matmul in PyTorch): an MFU figure.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

import torch
from safetensors.torch import load_file
from torch.utils.flop_counter import FlopCounterMode

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "fixtures"))
sys.dont_write_bytecode = True
import export_train  # noqa: E402

FIXTURE = os.path.join(ROOT, "fixtures", "train_gpt")
ADAMW = dict(lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)


def model_and_data():
    model = export_train.TinyGPT()
    model.load_state_dict(load_file(os.path.join(FIXTURE, "weights.safetensors")), strict=False)
    data = load_file(os.path.join(FIXTURE, "data.safetensors"))
    batches = [(data["tokens"][i], data["labels"][i]) for i in range(data["tokens"].shape[0])]
    return model.train(), batches


def time_steps(step, batches, steps: int, warmup: int = 10) -> float:
    for i in range(warmup):
        step(*batches[i % len(batches)])
    times = []
    for i in range(steps):
        start = time.perf_counter()
        step(*batches[i % len(batches)])
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def pytorch(compiled: bool, steps: int) -> float:
    model, batches = model_and_data()
    optimizer = torch.optim.AdamW(model.parameters(), **ADAMW)
    forward = torch.compile(model) if compiled else model

    def step(tokens, labels):
        optimizer.zero_grad()
        forward(tokens, labels).backward()
        optimizer.step()

    return time_steps(step, batches, steps)


def ttpu(steps: int) -> float:
    binary = os.path.join(ROOT, "target", "release", "ttpu")
    out = subprocess.run(
        [binary, "train", os.path.join(FIXTURE, "model.fx"), "--weights", os.path.join(FIXTURE, "weights.safetensors"),
         "--data", os.path.join(FIXTURE, "data.safetensors"), "--optimizer", "adamw", "--lr", "0.01",
         "--steps", str(steps + 1), "-o", os.devnull, "--no-cache"],
        check=True, capture_output=True, text=True,
    ).stdout
    return float(re.search(r"then ([0-9.]+) ms/step", out).group(1)) / 1e3


def step_flops() -> int:
    model, batches = model_and_data()
    with FlopCounterMode(display=False) as counter:
        model(*batches[0]).backward()
    return counter.get_total_flops()


def matmul_peak() -> float:
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    for _ in range(5):
        a @ b
    runs = 20
    start = time.perf_counter()
    for _ in range(runs):
        a @ b
    return 2 * 1024**3 * runs / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    torch.manual_seed(0)
    flops, peak = step_flops(), matmul_peak()
    print(f"one step: {flops / 1e6:.2f} MFLOP (forward + backward); matmul peak {peak / 1e9:.1f} GFLOP/s, {torch.get_num_threads()} threads")
    for name, seconds in [
        ("PyTorch eager", pytorch(False, args.steps)),
        ("torch.compile", pytorch(True, args.steps)),
        ("ttpu train", ttpu(args.steps)),
    ]:
        print(f"{name:14} {seconds * 1e3:8.3f} ms/step  {flops / seconds / 1e9:7.2f} GFLOP/s  MFU {flops / seconds / peak:6.2%}")


if __name__ == "__main__":
    main()
