"""Training steps on the ttpu device against PyTorch on the CPU, side by side in one run.

    python crates/ttpu-py/benches/device_training.py [--steps N] [--warmup K] [--models gpt2,resnet18]

Per model, one training step is forward, backward and an AdamW step, with the loss read back
(``loss.item()``, which every training loop does to log it). Paths:

- ``ttpu defer_and_fuse``: the model on ``"ttpu"``, each step recorded and run as one program
  (the default mode);
- ``ttpu defer_never``: the same, each ATen call its own (cached) program;
- ``cpu eager``: PyTorch eager on the CPU;
- ``cpu inductor``: ``torch.compile(model)`` (inductor) on the CPU, the optimizer step eager.

Models: a GPT-2-style language model (d 256, 4 layers, 4 heads, sequence 128, batch 8) and
torchvision's ResNet-18 (batch 8, 64x64, 10 classes). Prints the median step time of ``--steps``
steps after ``--warmup`` steps (which include compiles), the first step's time, and steps/s.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
import torch.nn.functional as F

import ttpu


def gpt2():
    import transformers

    config = transformers.GPT2Config(
        vocab_size=8192, n_positions=128, n_embd=256, n_layer=4, n_head=4,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )
    model = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 8192, (8, 128))
    return model, (lambda m, device: m(input_ids=ids.to(device), labels=ids.to(device)).loss)


def resnet18():
    import torchvision

    model = torchvision.models.resnet18(num_classes=10)
    x, y = torch.randn(8, 3, 64, 64), torch.randint(0, 10, (8,))
    return model, (lambda m, device: F.cross_entropy(m(x.to(device)), y.to(device)))


MODELS = {"gpt2": gpt2, "resnet18": resnet18}


def run(model, step_loss, device, steps, warmup, compiled=False):
    model = copy.deepcopy(model).to(device).train()
    forward = torch.compile(model) if compiled else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    times = []
    for _ in range(warmup + steps):
        start = time.perf_counter()
        loss = step_loss(forward, device)
        loss.backward()
        opt.step()
        opt.zero_grad()
        loss.item()
        times.append(time.perf_counter() - start)
    return times[0], statistics.median(times[warmup:])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--models", default="gpt2,resnet18")
    args = parser.parse_args()
    print(f"{'model':<10}{'path':<22}{'first step s':>14}{'step ms':>10}{'steps/s':>10}")
    for name in args.models.split(","):
        torch.manual_seed(0)
        model, step_loss = MODELS[name]()
        paths = [
            ("ttpu defer_and_fuse", lambda: run(model, step_loss, "ttpu", args.steps, args.warmup)),
            ("ttpu defer_never", lambda: _defer_never(model, step_loss, args)),
            ("cpu eager", lambda: run(model, step_loss, "cpu", args.steps, args.warmup)),
            ("cpu inductor", lambda: run(model, step_loss, "cpu", args.steps, args.warmup, compiled=True)),
        ]
        for path, measure in paths:
            first, step = measure()
            print(f"{name:<10}{path:<22}{first:>14.2f}{step * 1e3:>10.1f}{1 / step:>10.2f}", flush=True)


def _defer_never(model, step_loss, args):
    with ttpu.execution_mode("defer_never"):
        return run(model, step_loss, "ttpu", args.steps, args.warmup)


if __name__ == "__main__":
    main()
