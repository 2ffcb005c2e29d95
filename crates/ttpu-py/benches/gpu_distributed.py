#!/usr/bin/env python3
"""DDP and FSDP2 on the ttpu device over two processes with the CUDA PJRT plugin, against one
process on the whole batch.

Prepared for a machine with two NVIDIA GPUs or more, run by hand from the repository root with
the package installed (`pip install ./crates/ttpu-py`) and the plugin:

    pip install jax-cuda12-pjrt                          # jax_plugins/xla_cuda12/xla_cuda_plugin.so
    python crates/ttpu-py/benches/gpu_distributed.py --plugin PATH [--steps 3] [--collectives program|host] [--fused]

Each rank sets `TTPU_DEVICE_PLUGIN` to the CUDA plugin and `CUDA_VISIBLE_DEVICES` to its own GPU
(as torchrun's `LOCAL_RANK` places it), joins `init_process_group("ttpu")` through a file store
and trains the MLP of `crates/ttpu-py/tests/test_distributed.py` for `--steps` steps: DDP with
SGD, then FSDP2 with AdamW. Rank 0 compares the parameters with one process training on the whole
batch on GPU 0 and fails past 1e-5; it prints where each collective ran
(`torch.ttpu.stats()["collectives"]`). With `--collectives program` (the default) each rank's
runtime joins the job through a file store (`TTPU_COLLECTIVES=program`, `TTPU_PROCESS_ID`,
`TTPU_NUM_PROCESSES`, `TTPU_COORDINATOR`) and every collective runs as a program over both GPUs
(NCCL inside the plugin): the script fails unless `on_host` is 0; `--fused` records them into the
step's program (`ttpu.distributed.fused_collectives()`), one program per step. With
`--collectives host` they run through gloo on host copies, one flush each, with the same numbers.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile

import torch
import torch.multiprocessing as mp

TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests")


def _train(case, rank, world, steps):
    sys.path.insert(0, TESTS)
    import test_distributed as cases

    cases.STEPS = steps
    if case == "ddp":
        return cases._case_ddp(rank)["params"]
    return cases._case_fsdp(rank, True)["params"]


def _rank(rank, world, folder, plugin, steps, collectives, fused):
    os.environ["TTPU_DEVICE_PLUGIN"] = plugin
    os.environ["CUDA_VISIBLE_DEVICES"] = str(rank)
    os.environ["TTPU_COLLECTIVES"] = collectives
    if collectives == "program":
        os.environ.update(TTPU_PROCESS_ID=str(rank), TTPU_NUM_PROCESSES=str(world),
                          TTPU_COORDINATOR=f"file://{folder}/ttpu-store")
    import torch.distributed as dist

    import ttpu  # noqa: F401

    dist.init_process_group("ttpu", store=dist.FileStore(os.path.join(folder, "store"), world), rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=120))
    import contextlib

    import ttpu.distributed

    with ttpu.distributed.fused_collectives() if fused else contextlib.nullcontext():
        results = {case: _train(case, rank, world, steps) for case in ("ddp", "fsdp")}
    results["collectives"] = torch.ttpu.stats()["collectives"]
    with open(os.path.join(folder, f"rank{rank}.json"), "w") as file:
        json.dump(results, file)
    dist.destroy_process_group()


def _reference(case, steps):
    sys.path.insert(0, TESTS)
    import test_distributed as cases

    cases.STEPS = steps
    torch.manual_seed(0)
    model = cases.MLP()
    if case == "ddp":
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return cases._reference(model, optimizer, cases._data(8, 8, 4), cases._mse)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--plugin", required=True, help="the CUDA PJRT plugin (.so)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--collectives", choices=("program", "host"), default="program")
    parser.add_argument("--fused", action="store_true", help="collectives recorded into the step's program")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="ttpu-gpu-dist-")
    mp.spawn(_rank, args=(2, folder, args.plugin, args.steps, args.collectives, args.fused), nprocs=2, join=True)
    with open(os.path.join(folder, "rank0.json")) as file:
        got = json.load(file)
    worst = 0.0
    for case in ("ddp", "fsdp"):
        want = _reference(case, args.steps)
        for name, value in want.items():
            difference = (torch.tensor(got[case][name]) - value).abs().max().item()
            worst = max(worst, difference)
            print(f"{case} {name}: max |difference| {difference:.3g}")
    print("collectives:", got["collectives"])
    if worst > 1e-5:
        sys.exit(f"parameters differ from one process by {worst:.3g}")
    if args.collectives == "program" and got["collectives"]["on_host"]:
        sys.exit(f"{got['collectives']['on_host']} collectives ran on the host, not inside programs")
    print("DDP and FSDP2 over two GPUs match one process")


if __name__ == "__main__":
    main()
