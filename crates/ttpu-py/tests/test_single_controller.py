"""Single controller: one process drives 8 CPU devices through ``ttpu.distributed`` (a mesh,
the driver's plans): a small GPT-2 trains under ``"ddp"``, ``"fsdp"`` and a tensor-parallel
plan file and matches the same training on one device, and under fsdp each device keeps about
an eighth of the parameters and optimizer state.

Each plan runs in a process of its own (``single_controller.py``): the CPU plugin's device
count is fixed when the device starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def _run(plan):
    out = os.path.join(tempfile.mkdtemp(prefix="ttpu-spmd-"), f"{plan}.json")
    env = dict(os.environ, TTPU_DEVICES="8")
    done = subprocess.run(
        [sys.executable, os.path.join(HERE, "single_controller.py"), plan, out],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    with open(out) as file:
        return json.load(file)


@pytest.fixture(scope="module")
def one_device():
    return _run("one")


def _assert_same(got, want, plan):
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(
            torch.tensor(got[name]), torch.tensor(want[name]), rtol=1e-4, atol=2e-6, msg=lambda m: f"{plan} {name}: {m}"
        )


@pytest.mark.parametrize("plan", ["ddp", "fsdp", "tp"])
def test_gpt2_on_8_devices_matches_one_device(one_device, plan):
    result = _run(plan)
    _assert_same(result["params"], one_device["params"], plan)
    resident, state = result["resident"], result["state_bytes"]
    assert len(resident) == 8 and len(set(resident)) == 1, resident
    if plan == "fsdp":
        # Every weight split 8 ways (each one's first dim divides), and its optimizer state too.
        assert all(dims[0] == ["devices"] for dims in result["shardings"].values()), result["shardings"]
        assert all(dims[0] == ["devices"] for dims in result["state_shardings"])
        assert state / 8 <= resident[0] <= state / 8 * 1.1, (resident[0], state / 8)
    elif plan == "ddp":
        assert all(not any(dims) for dims in result["shardings"].values())
        assert resident[0] >= state, (resident[0], state)
    else:
        assert result["shardings"]["transformer.h.0.attn.c_attn.weight"] == [[], ["tp"]]
        assert result["shardings"]["transformer.h.0.mlp.c_proj.weight"] == [["tp"], []]
        assert state / 4 < resident[0] < state, (resident[0], state)


_COLLECTIVES = r'''
import torch, ttpu
import ttpu.distributed as td

assert torch.ttpu.device_count() == 4
torch.manual_seed(0)
cpu = [torch.randn(4, 8) for _ in range(4)]
# Pending work on each device: the collective runs it first, on the device.
dev = [(x.to(f"ttpu:{i}") * 2) for i, x in enumerate(cpu)]
want = [x * 2 for x in cpu]
before = dict(torch.ttpu.stats()["to_host"])

def same(got, expected, exact=False):
    assert len(got) == len(expected)
    for index, (g, e) in enumerate(zip(got, expected)):
        assert g.device == torch.device("ttpu", index), g.device
        if exact:
            assert torch.equal(g.cpu(), e), (g.cpu(), e)
        else:
            torch.testing.assert_close(g.cpu(), e, rtol=1e-6, atol=1e-6)

total = want[0] + want[1] + want[2] + want[3]
same(td.all_reduce(dev), [total] * 4)
same(td.all_reduce(dev, op="avg"), [total / 4] * 4)
same(td.all_reduce(dev, op="max"), [torch.stack(want).amax(0)] * 4, exact=True)
same(td.all_reduce(dev, op="min", groups=[[0, 2], [1, 3]]),
     [torch.minimum(want[0], want[2]), torch.minimum(want[1], want[3])] * 2, exact=True)
same(td.all_reduce(dev, op="product", groups=[[0, 1], [2, 3]]),
     [want[0] * want[1]] * 2 + [want[2] * want[3]] * 2)
ints = [(torch.tensor([7, -7, 3]) * (i + 1)).to(f"ttpu:{i}") for i in range(4)]
same(td.all_reduce(ints, op="max"), [torch.tensor([28, -7, 12])] * 4, exact=True)
same(td.all_gather(dev, dim=-1), [torch.cat(want, 1)] * 4, exact=True)
same(td.all_gather(dev, groups=[[1, 0], [3, 2]]),
     [torch.cat([want[1], want[0]])] * 2 + [torch.cat([want[3], want[2]])] * 2, exact=True)
same(td.reduce_scatter(dev, dim=1, groups=[[0, 1, 2, 3]]), list(total.chunk(4, 1)))
same(td.all_to_all(dev, split_dim=0, concat_dim=1),
     [torch.cat([w.chunk(4, 0)[i] for w in want], 1) for i in range(4)], exact=True)
zeros = torch.zeros(4, 8)
same(td.permute(dev, [(0, 1), (1, 2), (2, 3)]), [zeros, want[0], want[1], want[2]], exact=True)
stats = torch.ttpu.stats()
assert stats["collectives"]["on_host"] == 0 and stats["collectives"]["host_bytes"] == 0, stats["collectives"]
assert stats["collectives"]["recorded"]["all_reduce"] == 6, stats["collectives"]
# Results read back above are the only host transfers: no collective went through the host.
moved = {reason: count - before.get(reason, 0) for reason, count in stats["to_host"].items()}
assert not any(reason.startswith("collective") for reason in moved), moved

errors = [
    (lambda: td.all_reduce([dev[0], dev[0]]), ValueError, "one tensor per device, found devices [0, 0]"),
    (lambda: td.all_reduce([dev[0], dev[1][:2]]), ValueError, "tensors of one dtype and shape"),
    (lambda: td.all_reduce([cpu[0]]), TypeError, "takes ttpu tensors, not one on cpu"),
    (lambda: td.all_reduce(dev, op="mean"), ValueError, "op must be one of sum, avg, product, max, min"),
    (lambda: td.all_reduce(dev, groups=[[0, 1, 2], [3]]), ValueError, "groups of one size"),
    (lambda: td.reduce_scatter(dev, dim=0, groups=[[0, 1, 2], [3]]), ValueError, "groups of one size"),
    (lambda: td.reduce_scatter(dev[:3], dim=0), ValueError, "dim 0 of size 4 does not split into 3 blocks"),
    (lambda: td.all_gather(dev, dim=2), IndexError, "dim 2 is out of range for tensors of 2 dims"),
    (lambda: td.permute(dev, [(0, 1), (2, 1)]), ValueError, "distinct targets"),
    (lambda: td.all_reduce([]), ValueError, "needs at least one tensor"),
    (lambda: td.all_reduce(ints, op="avg"), RuntimeError, "ReduceOp.AVG of torch.int64 tensors; averages need a floating dtype"),
]
for call, kind, message in errors:
    try:
        call()
    except kind as error:
        assert message in str(error), (message, str(error))
    else:
        raise AssertionError(f"no error for {message}")
print("ok")
'''


def test_collectives_across_this_process_devices_match_the_cpu():
    # One program per collective over 4 CPU devices: sums, averages (refused for integers), max,
    # min and products over groups, gathers, reduce-scatter, all-to-all and permutes, computed
    # on the device and checked against the CPU; none moves data through the host.
    env = dict(os.environ, TTPU_DEVICES="4")
    done = subprocess.run([sys.executable, "-c", _COLLECTIVES], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-4000:]
