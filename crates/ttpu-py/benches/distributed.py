#!/usr/bin/env python3
"""Distributed training on the ttpu device: a steady FSDP2 step over two processes against one
process, and single-controller training over 8 CPU devices against one device.

Run by hand with the package installed, from the repository root:

    python crates/ttpu-py/benches/distributed.py fsdp        # FSDP2, 2 processes, vs 1 process
    python crates/ttpu-py/benches/distributed.py spmd        # 8 CPU devices (ddp, fsdp, tp) vs 1

`fsdp`: a GPT-2-style model (d128, 4 blocks, 4 heads, vocabulary 512, context 64, batch 8,
AdamW), `fully_shard` on each block and the root over `init_device_mesh("ttpu", (2,))`, each rank
on half the batch, against one process on the whole batch. Each row is the median of steps 4-8:
the step's time (to `torch.ttpu.synchronize()`), its flushes and programs run, and the programs
compiled in all. On the CPU plugin each collective runs on the host (one flush each).

`spmd`: `crates/ttpu-py/tests/single_controller.py` per plan (a GPT-2 of d32, 2 blocks, batch 8,
context 16, SGD with momentum), the last of its 3 steps.
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

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 8


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=512, n_positions=64, n_embd=128, n_layer=4, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    return GPT2LMHeadModel(config)


def batch():
    return torch.randint(0, 512, (8, 64), generator=torch.Generator().manual_seed(3))


def steps(model, data):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rows = []
    for _ in range(STEPS):
        before = torch.ttpu.stats()
        start = time.perf_counter()
        optimizer.zero_grad()
        model(input_ids=data, labels=data).loss.backward()
        optimizer.step()
        torch.ttpu.synchronize()
        elapsed = time.perf_counter() - start
        after = torch.ttpu.stats()
        rows.append((elapsed, sum(after["flushes"].values()) - sum(before["flushes"].values()),
                     after["executions"] - before["executions"]))
    steady = sorted(rows[3:])[len(rows[3:]) // 2]
    return {"ms": round(steady[0] * 1000, 1), "flushes": steady[1], "programs": steady[2],
            "compiles": torch.ttpu.stats()["compiles"]}


def _rank(rank, world, path):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import ttpu  # noqa: F401

    dist.init_process_group("ttpu", store=dist.FileStore(path, world), rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    mesh = init_device_mesh("ttpu", (world,))
    model = gpt2().to("ttpu")
    for block in model.transformer.h:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    result = steps(model, batch().chunk(world)[rank].to("ttpu"))
    if rank == 0:
        print(f"| FSDP2, 2 processes (half the batch each) | {result['ms']} | {result['flushes']} | "
              f"{result['programs']} | {result['compiles']} |", flush=True)
    dist.destroy_process_group()


def fsdp():
    print("| run | step (ms) | flushes per step | programs per step | programs compiled (not found on disk) |")
    print("|---|---|---|---|---|")
    script = f"import sys; sys.path.insert(0, {HERE!r}); import distributed as d, ttpu, json; " \
             "r = d.steps(d.gpt2().to('ttpu'), d.batch().to('ttpu')); " \
             "print(f\"| one process (whole batch) | {r['ms']} | {r['flushes']} | {r['programs']} | {r['compiles']} |\")"
    print(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True).stdout.strip())
    mp.spawn(_rank, args=(2, tempfile.mktemp()), nprocs=2)


def spmd():
    tests = os.path.join(HERE, "..", "tests", "single_controller.py")
    print("| plan | devices | last step (ms) | resident bytes per device |")
    print("|---|---|---|---|")
    for plan in ("one", "ddp", "fsdp", "tp"):
        out = os.path.join(tempfile.mkdtemp(), "out.json")
        subprocess.run([sys.executable, tests, plan, out], check=True, capture_output=True,
                       env=dict(os.environ, TTPU_DEVICES="8"))
        with open(out) as file:
            result = json.load(file)
        devices = 1 if plan == "one" else 8
        resident = result.get("resident", [None])[0]
        print(f"| {plan} | {devices} | {result['times'][-1] * 1000:.1f} | {resident} |")


if __name__ == "__main__":
    {"fsdp": fsdp, "spmd": spmd}[sys.argv[1]]()
