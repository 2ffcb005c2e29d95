#!/usr/bin/env python3
"""`torch.compile(backend="ttpu")` next to `backend="inductor"`: first-call and warm-call latency.

Run by hand with the package installed (`pip install ./crates/ttpu-py`, a release build), from the
repository root:

    python crates/ttpu-py/benches/compile_vs_inductor.py [--rounds 3] [--cores 0,1]

Workloads (float32, eval, `torch.no_grad()`), as in crates/ttpu/benches/side_by_side.py:
- W2: the GPT-2 block of fixtures/export.py, d256, 4 heads, T128, batch 4;
- W3a: torchvision ResNet-18 (full width), batch 1, 64x64.

Each (backend, workload) runs in a fresh process pinned to the same cores (`taskset`), so the first
call pays everything a user's first call pays: Dynamo's trace, the backend's compile (ttpu: export,
import, optimizer, XLA; inductor: its code generation and C++ compile), and the first run. Both
backends' caches on disk point into an empty temporary folder for that process, so nothing is
reused across processes. Then warm calls: the median of about two seconds of runs. Rounds
interleave the backends; the table shows the median over rounds and the spread (min-max), plus the
largest absolute difference from eager PyTorch. Output is a Markdown table for docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

WORKLOADS = {
    "W2": "GPT-2 block d256, 4 heads, T128, batch 4",
    "W3a": "torchvision ResNet-18, batch 1, 64x64",
}


def build(workload: str):
    import torch

    torch.manual_seed(0)
    if workload == "W2":
        sys.path.insert(0, os.path.join(ROOT, "fixtures"))
        import export as fixtures

        return fixtures.GPT2Block(d_model=256, n_head=4, n_positions=128).eval(), torch.randn(4, 128, 256)
    import torchvision

    return torchvision.models.resnet18().eval(), torch.randn(1, 3, 64, 64)


def child(backend: str, workload: str) -> None:
    """Times one backend on one workload in this (fresh) process; prints one JSON line."""
    import torch

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    module, x = build(workload)
    with torch.no_grad():
        want = module(x)
        compiled = torch.compile(module, backend=backend)
        start = time.perf_counter()
        got = compiled(x)
        first = time.perf_counter() - start
        for _ in range(3):
            compiled(x)
        start = time.perf_counter()
        compiled(x)
        one = time.perf_counter() - start
        runs = max(10, min(50, int(2.0 / max(one, 1e-4))))
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            compiled(x)
            times.append(time.perf_counter() - start)
    error = float((got - want).abs().max())
    print(json.dumps({"first_s": first, "warm_ms": statistics.median(times) * 1e3, "max_abs_error": error}))


def run_child(backend: str, workload: str, cores: str) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(
            os.environ,
            TTPU_CACHE_DIR=os.path.join(cache, "ttpu"),
            TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"),
            TRITON_CACHE_DIR=os.path.join(cache, "triton"),
        )
        out = subprocess.run(
            ["taskset", "-c", cores, sys.executable, __file__, "--child", backend, workload],
            env=env, capture_output=True, text=True, check=True,
        ).stdout
    return json.loads(out.strip().splitlines()[-1])


def spread(values: list[float], fmt: str) -> str:
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cores", default="0,1")
    parser.add_argument("--child", nargs=2, metavar=("BACKEND", "WORKLOAD"))
    args = parser.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    results: dict[tuple[str, str], list[dict]] = {}
    for round_ in range(args.rounds):
        for workload in WORKLOADS:
            for backend in ("inductor", "ttpu"):
                result = run_child(backend, workload, args.cores)
                results.setdefault((workload, backend), []).append(result)
                print(f"round {round_ + 1}: {workload} {backend}: {result}", file=sys.stderr)
    print("| workload | backend | first call (s) | warm call (ms) | max abs error vs eager |")
    print("|---|---|---|---|---|")
    for workload, description in WORKLOADS.items():
        for backend in ("inductor", "ttpu"):
            rows = results[(workload, backend)]
            first = spread([r["first_s"] for r in rows], "{:.2f}")
            warm = spread([r["warm_ms"] for r in rows], "{:.2f}")
            error = max(r["max_abs_error"] for r in rows)
            print(f"| {workload} {description} | {backend} | {first} | {warm} | {error:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
