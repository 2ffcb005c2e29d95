#!/usr/bin/env python3
"""Workloads W1-W4 side by side: PyTorch eager, torch.compile, and `ttpu bench`, in one run.

Run by hand, from the repository root, after `cargo build --release -p ttpu`:

    python crates/ttpu/benches/side_by_side.py [--rounds 3] [--only W1,W3a] [--cores 0,1]

Needs torch, torchvision, transformers and safetensors (keep the virtual environment outside the
repository). Every workload is built here, seeded, exported with `torch.export` +
`run_decompositions()` into a temporary folder (model.fx, weights.safetensors keyed by target,
inputs.safetensors keyed by placeholder name), and then timed by four contenders:

- `eager`: the PyTorch module, `torch.no_grad()`;
- `compile`: `torch.compile(module)` (inductor), compiled once per process before timing;
- `ttpu`: `ttpu bench` (weights resident, exact rewrites, weight-only work prepared at load);
- `straight`: `ttpu bench --no-fuse --no-weight-prep`, the plain lowering, so the gain of ttpu's
  own optimizations is visible.

Rounds interleave the contenders (round 1: every contender on every workload, then round 2, ...),
every process is pinned to the same cores (`taskset`), PyTorch uses as many threads as cores, and
each figure is the median of a round's warm runs; the table shows the median of the rounds'
medians and their spread (min-max), and each ratio is ttpu's median over the other's. Output is a
Markdown table, ready for docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import torch
import torch.nn as nn
from safetensors.torch import save_file

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "fixtures"))
sys.dont_write_bytecode = True
import export as fixtures  # noqa: E402  (fixtures/export.py: the GPT-2 block)

TTPU = os.environ.get("TTPU_BIN") or os.path.join(ROOT, "target", "release", "ttpu")


class MLP(nn.Module):
    """W1: 512 -> 2048 -> 2048 -> 512 with GELU."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 2048), nn.GELU(), nn.Linear(2048, 512)
        )

    def forward(self, x):
        return self.net(x)


class CausalLM(nn.Module):
    """W4: the logits of a Hugging Face causal LM, no cache."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids, use_cache=False, return_dict=False)[0]


def resnet18():
    warnings.simplefilter("ignore")
    import torchvision

    return torchvision.models.resnet18()


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=1024,
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=256,
        attn_implementation="eager",
    )
    return CausalLM(LlamaForCausalLM(config))


def workloads():
    """(name, description, module factory, inputs factory), all float32 and in eval mode."""
    return [
        ("W1", "MLP 512-2048-2048-512, GELU, batch 32", MLP, lambda: {"x": torch.randn(32, 512)}),
        (
            "W2",
            "GPT-2 block d256, 4 heads, T128, batch 4",
            lambda: fixtures.GPT2Block(d_model=256, n_head=4, n_positions=128),
            lambda: {"hidden_states": torch.randn(4, 128, 256)},
        ),
        ("W3a", "torchvision ResNet-18, batch 1, 64x64", resnet18, lambda: {"x": torch.randn(1, 3, 64, 64)}),
        ("W3b", "torchvision ResNet-18, batch 8, 224x224", resnet18, lambda: {"x": torch.randn(8, 3, 224, 224)}),
        (
            "W4",
            "HF Llama, hidden 256, 4 layers, vocab 1024, T128, batch 1",
            llama,
            lambda: {"input_ids": torch.randint(0, 1024, (1, 128))},
        ),
    ]


def export(name: str, module: nn.Module, inputs: dict, folder: str) -> None:
    """model.fx, weights.safetensors and inputs.safetensors, keyed as the CLI expects."""
    from torch.export.graph_signature import InputKind

    ep = torch.export.export(module, tuple(inputs.values())).run_decompositions()
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "model.fx"), "w") as f:
        f.write(str(ep))
    weights = {}
    names = []
    for spec in ep.graph_signature.input_specs:
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            value = ep.state_dict.get(spec.target)
            value = ep.constants[spec.target] if value is None else value
            weights[spec.target] = value.detach().clone().contiguous()
        elif spec.kind == InputKind.USER_INPUT:
            names.append(spec.arg.name)
    save_file(weights, os.path.join(folder, "weights.safetensors"))
    save_file({key: value.contiguous() for key, value in zip(names, inputs.values())},
              os.path.join(folder, "inputs.safetensors"))
    print(f"exported {name}: {len(weights)} weights", file=sys.stderr)


def runs_for(seconds_per_run: float) -> int:
    """About two seconds of warm runs, between 10 and 50."""
    return max(10, min(50, int(2.0 / max(seconds_per_run, 1e-4))))


def time_torch(call, inputs: dict, warmup: int = 3) -> float:
    with torch.no_grad():
        for _ in range(warmup):
            call(**inputs)
        start = time.perf_counter()
        call(**inputs)
        runs = runs_for(time.perf_counter() - start)
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            call(**inputs)
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def time_ttpu(folder: str, extra: list[str], cores: str) -> float:
    command = ["taskset", "-c", cores, TTPU, "bench", os.path.join(folder, "model.fx"),
               "--weights", os.path.join(folder, "weights.safetensors"),
               "--inputs", os.path.join(folder, "inputs.safetensors"), "--runs", "30", "--warmup", "5", *extra]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    match = re.search(r"warm run\s+median ([0-9.]+) ms", out)
    if not match:
        raise RuntimeError(f"no warm-run median in:\n{out}")
    return float(match.group(1))


def max_error(folder: str, module: nn.Module, inputs: dict) -> float:
    """The largest absolute difference between `ttpu run` and PyTorch on the first output."""
    from safetensors.torch import load_file

    out = os.path.join(folder, "outputs.safetensors")
    subprocess.run([TTPU, "run", os.path.join(folder, "model.fx"), "--weights", os.path.join(folder, "weights.safetensors"),
                    "--inputs", os.path.join(folder, "inputs.safetensors"), "--output", out],
                   check=True, capture_output=True)
    with torch.no_grad():
        want = module(**inputs)
    want = want[0] if isinstance(want, (tuple, list)) else want
    return float((load_file(out)["output_0"] - want).abs().max())


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated workload names (default: all)")
    ap.add_argument("--cores", default="0,1", help="the cores every contender is pinned to")
    opts = ap.parse_args(argv)
    cores = opts.cores
    os.sched_setaffinity(0, {int(core) for core in cores.split(",")})
    torch.set_num_threads(len(cores.split(",")))
    chosen = [w for w in workloads() if not opts.only or w[0] in opts.only.split(",")]
    folder = tempfile.mkdtemp(prefix="ttpu-side-by-side-")
    built = {}
    errors = {}
    for name, _, make, make_inputs in chosen:
        torch.manual_seed(0)
        module = make().eval()
        inputs = make_inputs()
        export(name, module, inputs, os.path.join(folder, name))
        built[name] = (module, torch.compile(module), inputs)
        errors[name] = max_error(os.path.join(folder, name), module, inputs)
        print(f"{name}: ttpu's max abs error against PyTorch {errors[name]:.2e}", file=sys.stderr)
    contenders = ["eager", "compile", "ttpu", "straight"]
    results = {name: {c: [] for c in contenders} for name, *_ in chosen}
    for round_index in range(opts.rounds):
        for name, *_ in chosen:
            module, compiled, inputs = built[name]
            here = os.path.join(folder, name)
            results[name]["eager"].append(time_torch(module, inputs))
            results[name]["compile"].append(time_torch(compiled, inputs))
            results[name]["ttpu"].append(time_ttpu(here, [], cores))
            results[name]["straight"].append(time_ttpu(here, ["--no-fuse", "--no-weight-prep"], cores))
            print(f"round {round_index + 1} {name}: " + ", ".join(
                f"{c} {results[name][c][-1]:.2f} ms" for c in contenders), file=sys.stderr)
    print(f"| workload (f32, eval; {len(cores.split(','))} cores, {opts.rounds} rounds) | torch eager | "
          "torch.compile | ttpu | ttpu straight | ttpu / best torch | ttpu / straight | max abs error |")
    print("|---|---|---|---|---|---|---|---|")
    for name, description, *_ in chosen:
        cell = {}
        for contender in contenders:
            values = results[name][contender]
            cell[contender] = statistics.median(values)
            cell[contender + "_spread"] = (min(values), max(values))
        fmt = lambda c: f"{cell[c]:.2f} ({cell[c + '_spread'][0]:.2f}-{cell[c + '_spread'][1]:.2f})"  # noqa: E731
        best = min(cell["eager"], cell["compile"])
        print(f"| {name} {description} | {fmt('eager')} | {fmt('compile')} | {fmt('ttpu')} | {fmt('straight')} | "
              f"{cell['ttpu'] / best:.2f} | {cell['ttpu'] / cell['straight']:.2f} | {errors[name]:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
