"""One process driving 8 CPU devices (``TTPU_DEVICES=8``): a small GPT-2 trains 3 steps
(SGD with momentum) on ``ttpu:0`` laid over a mesh by ``ttpu.distributed`` under a plan given on the command line,
after one device trains the same steps. Writes the parameters of both, the resident bytes per
mesh device, the shardings and the times as JSON (``test_single_controller.py`` reads it).

    python single_controller.py PLAN OUT.json     # PLAN: one, ddp, fsdp or tp
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("TTPU_DEVICES", "8")

import torch  # noqa: E402

import ttpu  # noqa: E402, F401
import ttpu.distributed as td  # noqa: E402

STEPS = 3

# Megatron's layout for GPT-2's Conv1D weights ([in, out]): the attention's qkv and the MLP's
# first projection split their outputs over tp, the two output projections their inputs.
TP_PLAN = """
mesh = "dp=2,tp=4"
[weights]
"*.attn.c_attn.weight" = ["-", "tp"]
"*.attn.c_attn.bias" = ["tp"]
"*.attn.c_proj.weight" = ["tp", "-"]
"*.mlp.c_fc.weight" = ["-", "tp"]
"*.mlp.c_fc.bias" = ["tp"]
"*.mlp.c_proj.weight" = ["tp", "-"]
[inputs]
"*" = ["dp"]
"""


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    return GPT2LMHeadModel(config)


def tokens():
    generator = torch.Generator().manual_seed(3)
    return torch.randint(0, 64, (8, 16), generator=generator)


def train(model, batch):
    # SGD with momentum: state of its own (one buffer per parameter), and no normalization of
    # gradients that are rounding noise (GPT-2's key bias gets none in exact arithmetic, and
    # Adam would scale the differing noise of another reduction order up to a full step).
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    times = []
    for _ in range(STEPS):
        start = time.perf_counter()
        optimizer.zero_grad()
        model(input_ids=batch, labels=batch).loss.backward()
        optimizer.step()
        torch.ttpu.synchronize()
        times.append(time.perf_counter() - start)
    # What stays between steps: parameters and optimizer state.
    optimizer.zero_grad(set_to_none=True)
    return optimizer, times


def main(plan: str, out: str) -> None:
    model = gpt2().to("ttpu")
    batch = tokens().to("ttpu")
    result = {}
    if plan == "one":
        pass
    elif plan == "tp":
        mesh = td.Mesh(devices=8, axes={"dp": 2, "tp": 4})
        td.shard_module(model, mesh, TP_PLAN)
        td.mark_sharding(batch, mesh, td.input_spec(batch, mesh, TP_PLAN))
    else:
        mesh = td.Mesh(devices=8)
        td.shard_module(model, mesh, plan)
        td.mark_sharding(batch, mesh, ("devices", None))
    optimizer, times = train(model, batch)
    del batch
    result["times"] = times
    result["params"] = {name: p.detach().cpu().tolist() for name, p in model.named_parameters()}
    if plan != "one":
        result["resident"] = td.resident_bytes()
        result["shardings"] = {name: td.sharding_of(p) for name, p in model.named_parameters()}
        state = [v for s in optimizer.state.values() for v in s.values() if v.device.type == "ttpu"]
        result["state_shardings"] = [td.sharding_of(v) for v in state]
    result["state_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters()) * 2
    with open(out, "w") as file:
        json.dump(result, file)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
