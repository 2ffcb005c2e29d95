#!/usr/bin/env python3
"""W2 and W4 in bf16 on a CUDA GPU: PyTorch CUDA eager, torch.compile, and `ttpu bench` on the
CUDA PJRT plugin, in one run.

Prepared for a machine with an NVIDIA GPU, run by hand from the repository root after
`cargo build --release -p ttpu`:

    pip install torch==2.15.0 transformers safetensors jax-cuda12-pjrt   # the plugin: jax_plugins/xla_cuda12
    python crates/ttpu/benches/gpu_side_by_side.py [--rounds 3] [--plugin PATH]

The workloads are those of side_by_side.py (the GPT-2 block d256 T128 batch 4, and the Hugging
Face Llama with hidden 256, 4 layers, T128), seeded and cast to bfloat16, exported with
`torch.export` + `run_decompositions()` on the CPU, and timed: PyTorch on `cuda:0` (eager and
`torch.compile`, each call synchronized, medians of about two seconds of runs) and `ttpu bench
--plugin` (weights resident on the GPU). Rounds interleave the contenders. The last column is the
largest difference between `ttpu run` on the GPU and PyTorch CUDA eager on the first output.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import side_by_side as sbs  # noqa: E402  (the workloads and the export)


def find_plugin() -> str:
    import site

    for folder in site.getsitepackages():
        found = glob.glob(os.path.join(folder, "jax_plugins", "xla_cuda*", "xla_cuda_plugin.so"))
        if found:
            return found[0]
    raise SystemExit("no CUDA PJRT plugin found: pip install jax-cuda12-pjrt, or pass --plugin")


def time_cuda(call, inputs: dict) -> float:
    with torch.no_grad():
        for _ in range(5):
            call(**inputs)
        torch.cuda.synchronize()
        start = time.perf_counter()
        call(**inputs)
        torch.cuda.synchronize()
        runs = sbs.runs_for(time.perf_counter() - start)
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            call(**inputs)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def time_ttpu(folder: str, plugin: str) -> float:
    out = subprocess.run(
        [sbs.TTPU, "bench", os.path.join(folder, "model.fx"), "--weights", os.path.join(folder, "weights.safetensors"),
         "--inputs", os.path.join(folder, "inputs.safetensors"), "--runs", "50", "--warmup", "5", "--plugin", plugin],
        capture_output=True, text=True, check=True,
    ).stdout
    match = sbs.re.search(r"warm run\s+median ([0-9.]+) ms", out)
    if not match:
        raise RuntimeError(f"no warm-run median in:\n{out}")
    return float(match.group(1))


def max_error(folder: str, plugin: str, module, inputs: dict) -> float:
    from safetensors.torch import load_file

    out = os.path.join(folder, "outputs.safetensors")
    subprocess.run([sbs.TTPU, "run", os.path.join(folder, "model.fx"), "--weights", os.path.join(folder, "weights.safetensors"),
                    "--inputs", os.path.join(folder, "inputs.safetensors"), "-o", out, "--plugin", plugin],
                   check=True, capture_output=True)
    with torch.no_grad():
        want = module(**{k: v.cuda() for k, v in inputs.items()})
    want = want[0] if isinstance(want, (tuple, list)) else want
    return float((load_file(out)["output_0"].float() - want.float().cpu()).abs().max())


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--plugin", default=None)
    opts = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device")
    plugin = opts.plugin or find_plugin()
    folder = tempfile.mkdtemp(prefix="ttpu-gpu-side-by-side-")
    chosen = [w for w in sbs.workloads() if w[0] in ("W2", "W4")]
    built, errors = {}, {}
    for name, _, make, make_inputs in chosen:
        torch.manual_seed(0)
        module = make().eval().to(torch.bfloat16)
        inputs = {k: (v.to(torch.bfloat16) if v.is_floating_point() else v) for k, v in make_inputs().items()}
        sbs.export(name, module, inputs, os.path.join(folder, name))
        gpu = module.cuda()
        gpu_inputs = {k: v.cuda() for k, v in inputs.items()}
        built[name] = (gpu, torch.compile(gpu), gpu_inputs)
        errors[name] = max_error(os.path.join(folder, name), plugin, gpu, inputs)
        print(f"{name}: ttpu's max abs error against PyTorch CUDA {errors[name]:.2e}", file=sys.stderr)
    contenders = ["eager", "compile", "ttpu"]
    results = {name: {c: [] for c in contenders} for name, *_ in chosen}
    for round_index in range(opts.rounds):
        for name, *_ in chosen:
            module, compiled, inputs = built[name]
            results[name]["eager"].append(time_cuda(module, inputs))
            results[name]["compile"].append(time_cuda(compiled, inputs))
            results[name]["ttpu"].append(time_ttpu(os.path.join(folder, name), plugin))
            print(f"round {round_index + 1} {name}: " + ", ".join(
                f"{c} {results[name][c][-1]:.3f} ms" for c in contenders), file=sys.stderr)
    print(f"| workload (bf16, eval; {torch.cuda.get_device_name()}) | torch eager | torch.compile | ttpu | "
          "ttpu / best torch | max abs error |")
    print("|---|---|---|---|---|---|")
    for name, description, *_ in chosen:
        med = {c: statistics.median(results[name][c]) for c in contenders}
        best = min(med["eager"], med["compile"])
        print(f"| {name} {description} | {med['eager']:.3f} | {med['compile']:.3f} | {med['ttpu']:.3f} | "
              f"{med['ttpu'] / best:.2f} | {errors[name]:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
