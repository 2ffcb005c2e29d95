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
