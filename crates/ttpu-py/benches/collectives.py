#!/usr/bin/env python3
"""Collectives inside programs against the host path, in one process on the CPU plugin.

    python crates/ttpu-py/benches/collectives.py

1. A steady DDP step with world size 1 (a 4-layer 256x256 MLP, one bucket, batch 64, SGD) with
   `TTPU_COLLECTIVES=host`, with `program`, and with `program` inside
   `ttpu.distributed.fused_collectives()`: the median of steps 6-25, flushes per step and what
   went through the host (`torch.ttpu.stats()["collectives"]`).
2. `ttpu.distributed.all_reduce` of 4 MiB on each of 4 CPU devices (one 4-replica program)
   against the same sum through the host (read 4, add, upload 4), result read back; median of 10.

Each measurement runs in a process of its own (the device's collective mode and device count
are fixed when it starts).
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

import torch
import torch.multiprocessing as mp


def _ddp_step(rank, folder, mode):
    os.environ["TTPU_COLLECTIVES"] = "host" if mode == "host" else "program"
    import contextlib

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    import ttpu.distributed

    dist.init_process_group("ttpu", store=dist.FileStore(os.path.join(folder, "store"), 1), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(0)
    layers = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(4)])
    model = DistributedDataParallel(layers.to("ttpu"), bucket_cap_mb=1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 256, device="ttpu")
    times = []
    with ttpu.distributed.fused_collectives() if mode == "fused" else contextlib.nullcontext():
        for step in range(25):
            if step == 24:
                before = sum(torch.ttpu.stats()["flushes"].values())
            start = time.perf_counter()
            optimizer.zero_grad()
            model(x).square().mean().backward()
            optimizer.step()
            torch.ttpu.synchronize()
            times.append(time.perf_counter() - start)
    flushes = sum(torch.ttpu.stats()["flushes"].values()) - before
    steady = sorted(times[5:])[len(times[5:]) // 2]
    with open(os.path.join(folder, "out.json"), "w") as file:
        json.dump({"ms": steady * 1e3, "flushes": flushes, "collectives": torch.ttpu.stats()["collectives"]}, file)
    dist.destroy_process_group()


_ALL_REDUCE = r'''
import time, torch, ttpu, ttpu.distributed as td
xs = [torch.randn(1 << 20, device=f"ttpu:{i}") for i in range(4)]
def in_program():
    return td.all_reduce(xs)
def on_host():
    total = sum(x.cpu() for x in xs)
    return [total.to(f"ttpu:{i}") for i in range(4)]
for name, run in (("inside a program", in_program), ("through the host", on_host)):
    for _ in range(3):
        run()[3].cpu()
    times = []
    for _ in range(10):
        start = time.perf_counter()
        run()[3].cpu()
        times.append(time.perf_counter() - start)
    print(f"all_reduce 4 MiB x 4 devices, {name}: {sorted(times)[5] * 1e3:.2f} ms")
'''


def main() -> None:
    for mode in ("host", "program", "fused"):
        folder = tempfile.mkdtemp(prefix="ttpu-bench-collectives-")
        mp.spawn(_ddp_step, args=(folder, mode), nprocs=1, join=True)
        with open(os.path.join(folder, "out.json")) as file:
            out = json.load(file)
        stats = out["collectives"]
        print(f"DDP step, {mode}: {out['ms']:.2f} ms, {out['flushes']} flushes a step; collectives {stats['recorded']}, "
              f"{stats['on_host']} on the host, {stats['host_bytes']} bytes through it")
    env = dict(os.environ, TTPU_DEVICES="4")
    subprocess.run([sys.executable, "-c", _ALL_REDUCE], env=env, check=True)


if __name__ == "__main__":
    main()
