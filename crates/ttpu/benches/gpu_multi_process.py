#!/usr/bin/env python3
"""One training program over GPUs of two processes, on the CUDA PJRT plugin.

Prepared for a machine with NVIDIA GPUs, run by hand from the repository root after
`cargo build --release -p ttpu`:

    pip install jax-cuda12-pjrt safetensors numpy      # the plugin: jax_plugins/xla_cuda12
    python crates/ttpu/benches/gpu_multi_process.py [--plugin PATH] [--steps 4]

Part 1, on any machine with a GPU: the control plane of a job of two processes. `ttpu launch -n 2`
starts two `ttpu train` processes of `fixtures/train_mlp` (data parallel, mesh `dp=2`); they meet
in a `file://` store, the CUDA plugin creates a client of a two-node job in each (`node_id`,
`num_nodes`, the store behind its key-value callbacks), and every process agrees on the job's
devices. With one GPU both processes use it, and the plugin's mock NCCL (`enable_mock_nccl=true`,
through `TTPU_CLIENT_OPTIONS`) stands in for the collectives: the step compiles and runs, but its
numbers mean nothing and are not checked.

Part 2, on a machine with two GPUs or more: the same training run twice, in one process over GPUs
0 and 1 and in two processes (one GPU each, placed as torchrun places them: `LOCAL_RANK` picks the
GPU), and the losses of every step and the trained weights compared. The two runs execute one
program with one device assignment, so they should agree to the last bit or within the order of
NCCL's reductions (the script prints the largest difference and fails past 1e-6 relative).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
TTPU = os.path.join(ROOT, "target", "release", "ttpu")
FIXTURE = os.path.join(ROOT, "fixtures", "train_mlp")
LAUNCH_VARS = ["TTPU_COORDINATOR", "TTPU_NUM_PROCESSES", "TTPU_PROCESS_ID", "TTPU_RUN_ID", "TTPU_CLIENT_OPTIONS",
               "JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "JAX_LOCAL_DEVICE_IDS",
               "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "TORCHELASTIC_RUN_ID"]


def find_plugin() -> str:
    import site

    for folder in site.getsitepackages():
        found = glob.glob(os.path.join(folder, "jax_plugins", "xla_cuda*", "xla_cuda_plugin.so"))
        if found:
            return found[0]
    raise SystemExit("no CUDA PJRT plugin found: pip install jax-cuda12-pjrt, or pass --plugin")


def gpu_count() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def clean_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env["TTPU_PEER_TIMEOUT"] = "120"
    env.update(extra)
    return env


def train_args(plugin: str, steps: int, out: str, log: str) -> list[str]:
    return ["train", os.path.join(FIXTURE, "model.fx"), "--weights", os.path.join(FIXTURE, "weights.safetensors"),
            "--data", os.path.join(FIXTURE, "data.safetensors"), "--steps", str(steps), "--optimizer", "adamw",
            "--mesh", "dp=2", "--parallel", "ddp", "--plugin", plugin, "--no-cache", "-o", out, "--log", log]


def losses(log: str) -> list[float]:
    with open(log) as lines:
        return [json.loads(line)["loss"] for line in lines if line.strip()]


def control_plane(plugin: str, folder: str, steps: int, gpus: int) -> None:
    out, log = os.path.join(folder, "mock.safetensors"), os.path.join(folder, "mock.jsonl")
    # `ttpu launch` sets LOCAL_RANK, so process i takes GPU i; on one GPU both take GPU 0, share
    # its memory and use mock NCCL.
    extra = {}
    if gpus < 2:
        extra = {"JAX_LOCAL_DEVICE_IDS": "0", "TTPU_CLIENT_OPTIONS": "enable_mock_nccl=true,preallocate=false"}
    run = subprocess.run([TTPU, "launch", "-n", "2", "--", TTPU] + train_args(plugin, steps, out, log),
                         env=clean_env(**extra), capture_output=True, text=True)
    sys.stderr.write(run.stderr)
    placed = re.findall(r"^\[(\d)\] process \d of 2 \(TTPU_\*\): devices (\[.*?\]) of the job's (\[.*?\])$",
                        run.stderr, re.MULTILINE)
    if run.returncode != 0 or len(placed) != 2:
        raise SystemExit(f"part 1 failed (exit {run.returncode}); see above")
    jobs = {job for _, _, job in placed}
    if len(jobs) != 1:
        raise SystemExit(f"part 1: the processes disagree on the job's devices: {placed}")
    print(f"part 1: two processes on {'one GPU with mock NCCL' if gpus < 2 else 'a GPU each'} met; devices "
          f"{', '.join(f'process {p}: {own}' for p, own, _ in sorted(placed))} of {jobs.pop()}; "
          f"{steps} steps ran (losses {losses(log)})")


def matches_one_process(plugin: str, folder: str, steps: int) -> None:
    from safetensors.numpy import load_file
    import numpy as np

    one_out, one_log = os.path.join(folder, "one.safetensors"), os.path.join(folder, "one.jsonl")
    subprocess.run([TTPU] + train_args(plugin, steps, one_out, one_log), env=clean_env(), check=True)
    two_out, two_log = os.path.join(folder, "two.safetensors"), os.path.join(folder, "two.jsonl")
    store = "file://" + os.path.join(folder, "store")
    children = [
        subprocess.Popen([TTPU] + train_args(plugin, steps, two_out, two_log),
                         env=clean_env(TTPU_COORDINATOR=store, TTPU_NUM_PROCESSES="2",
                                       TTPU_PROCESS_ID=str(rank), LOCAL_RANK=str(rank)))
        for rank in range(2)
    ]
    codes = [child.wait() for child in children]
    if any(codes):
        raise SystemExit(f"part 2: the two-process run failed (exit codes {codes})")
    one_losses, two_losses = losses(one_log), losses(two_log)
    worst = 0.0
    one, two = load_file(one_out), load_file(two_out)
    if sorted(one) != sorted(two):
        raise SystemExit(f"part 2: the runs wrote different tensors: {sorted(one)} and {sorted(two)}")
    for key in sorted(one):
        a, b = one[key].astype(np.float64), two[key].astype(np.float64)
        worst = max(worst, float(np.max(np.abs(a - b) / np.maximum(np.abs(a), 1e-12))) if a.size else 0.0)
    loss_worst = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(one_losses, two_losses))
    print(f"part 2: {steps} AdamW steps, one process on GPUs 0-1 against two processes on one GPU each: "
          f"losses {one_losses} and {two_losses} (largest relative difference {loss_worst:.2e}); "
          f"weights' largest relative difference {worst:.2e}")
    if worst > 1e-6 or loss_worst > 1e-6:
        raise SystemExit("part 2: the two-process run does not match the one-process run")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plugin", default=None)
    ap.add_argument("--steps", type=int, default=4)
    opts = ap.parse_args(argv)
    if not os.path.exists(TTPU):
        raise SystemExit(f"{TTPU} is missing: cargo build --release -p ttpu")
    gpus = gpu_count()
    if gpus == 0:
        raise SystemExit("no NVIDIA GPU (nvidia-smi lists none)")
    plugin = opts.plugin or find_plugin()
    folder = tempfile.mkdtemp(prefix="ttpu-gpu-multi-process-")
    control_plane(plugin, folder, opts.steps, gpus)
    if gpus >= 2:
        matches_one_process(plugin, folder, opts.steps)
    else:
        print("part 2 skipped: it needs two GPUs, this machine has one")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
