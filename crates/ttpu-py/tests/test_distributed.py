"""torch.distributed on the ttpu device: two processes on this machine (a file store), each with
one CPU device, training with DDP, FSDP2 and tensor parallelism as on CUDA, against one process
training on the whole batch; a checkpoint round trip; the collectives' statistics; the debug
error of ranks that diverge and the timeout of a collective a peer never joins.

One job of two processes runs every training case (a process costs seconds to start), writing
what each rank saw to a JSON file the tests read.
"""

from __future__ import annotations

import datetime
import json
import os
import tempfile
import traceback

import pytest
import torch
import torch.multiprocessing as mp

WORLD = 2
STEPS = 3


class MLP(torch.nn.Module):
    def __init__(self, sizes=(8, 16, 16, 4)):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))

    def forward(self, x):
        for index, layer in enumerate(self.layers):
            x = layer(x)
            if index < len(self.layers) - 1:
                x = torch.relu(x)
        return x


class UpDown(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(8, 16)
        self.down = torch.nn.Linear(16, 8)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=32, attn_implementation="eager",
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def _data(rows, features, outputs):
    generator = torch.Generator().manual_seed(1)
    return torch.randn(rows, features, generator=generator), torch.randn(rows, outputs, generator=generator)


def _tokens():
    generator = torch.Generator().manual_seed(2)
    return torch.randint(0, 64, (2, 12), generator=generator)


def _train(model, optimizer, batches, loss_of, device):
    """`STEPS` steps; the flushes of each step by reason."""
    flushes = []
    for step in range(STEPS):
        before = dict(torch.ttpu.stats()["flushes"]) if device != "cpu" else {}
        optimizer.zero_grad()
        loss_of(model, batches).backward()
        optimizer.step()
        if device != "cpu":
            after = torch.ttpu.stats()["flushes"]
            flushes.append({k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)})
    return flushes


def _mse(model, batch):
    x, y = batch
    return torch.nn.functional.mse_loss(model(x), y)


def _lm(model, tokens):
    return model(input_ids=tokens, labels=tokens).loss


def _full(tensor):
    from torch.distributed.tensor import DTensor

    tensor = tensor.detach()
    if isinstance(tensor, DTensor):
        tensor = tensor.full_tensor()
    return tensor.cpu()


def _params(model):
    return {name: _full(p).tolist() for name, p in model.named_parameters()}


# ---- the job ----


def _case_ddp(rank):
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    model = DistributedDataParallel(MLP().to("ttpu"))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = _data(8, 8, 4)
    batch = (x.chunk(WORLD)[rank].to("ttpu"), y.chunk(WORLD)[rank].to("ttpu"))
    flushes = _train(model, optimizer, batch, _mse, "ttpu")
    return {"params": _params(model.module), "flushes": flushes}


def _fully_sharded(reshard):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("ttpu", (WORLD,))
    torch.manual_seed(0)
    model = MLP().to("ttpu")
    for layer in model.layers:
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
    return model


def _case_fsdp(rank, reshard):
    model = _fully_sharded(reshard)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = _data(8, 8, 4)
    batch = (x.chunk(WORLD)[rank].to("ttpu"), y.chunk(WORLD)[rank].to("ttpu"))
    collectives = dict(torch.ttpu.stats()["collectives"]["recorded"])
    flushes = _train(model, optimizer, batch, _mse, "ttpu")
    after = torch.ttpu.stats()["collectives"]["recorded"]
    per_step = {k: (v - collectives.get(k, 0)) / STEPS for k, v in after.items() if v != collectives.get(k, 0)}
    local = {name: list(p.to_local().shape) for name, p in model.named_parameters()}
    return {"params": _params(model), "flushes": flushes, "collectives": per_step, "local": local}


def _case_tp(rank):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("ttpu", (WORLD,))
    torch.manual_seed(0)
    model = parallelize_module(UpDown().to("ttpu"), mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = _data(4, 8, 8)
    flushes = _train(model, optimizer, (x.to("ttpu"), y.to("ttpu")), _mse, "ttpu")
    return {"params": _params(model), "flushes": flushes}


def _llama_plan(model):
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    return {f"model.{name}": styles[style]() for name, style in model.config.base_model_tp_plan.items()}


def _case_llama(rank):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    mesh = init_device_mesh("ttpu", (WORLD,))
    model = _llama().to("ttpu")
    model = parallelize_module(model, mesh, _llama_plan(model))
    # The plan leaves embeddings and norms plain tensors: as on CUDA, a parameter list mixing
    # them with DTensors needs the per-tensor optimizer.
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
    flushes = _train(model, optimizer, _tokens().to("ttpu"), _lm, "ttpu")
    return {"params": _params(model), "flushes": flushes}


def _case_checkpoint(rank, folder):
    """FSDP2 trains a step, saves model and optimizer with torch.distributed.checkpoint, trains
    two more; a fresh FSDP2 model loads the checkpoint and trains the same two steps."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    x, y = _data(8, 8, 4)
    batch = (x.chunk(WORLD)[rank].to("ttpu"), y.chunk(WORLD)[rank].to("ttpu"))

    def step(model, optimizer):
        optimizer.zero_grad()
        _mse(model, batch).backward()
        optimizer.step()

    model = _fully_sharded(True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    step(model, optimizer)
    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=folder)
    step(model, optimizer)
    step(model, optimizer)
    continued = _params(model)

    torch.manual_seed(123)
    resumed = _fully_sharded(True)
    resumed_optimizer = torch.optim.AdamW(resumed.parameters(), lr=1e-2)
    step(resumed, resumed_optimizer)  # other state, so the load must replace it
    model_state, optimizer_state = get_state_dict(resumed, resumed_optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, checkpoint_id=folder)
    set_state_dict(resumed, resumed_optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    step(resumed, resumed_optimizer)
    step(resumed, resumed_optimizer)
    return {"continued": continued, "resumed": _params(resumed)}


def _case_divergent(rank):
    """Rank 1 reads a value on its own before a collective, with the debug check on."""
    import torch.distributed as dist
    import ttpu.distributed

    ttpu.distributed.set_debug(True)
    x = torch.ones(4, device="ttpu") * 2
    # Ranks that flush alike pass the check.
    symmetric = x + 1
    dist.all_reduce(symmetric)
    symmetric.cpu()
    if rank == 1:
        x.sum().item()
    y = x * 3
    dist.all_reduce(y)
    return {"value": y.cpu().tolist()}


def _case_missing_peer(rank, folder):
    """Rank 0 all-reduces; rank 1 never joins, and waits for rank 0's error before leaving."""
    import torch.distributed as dist

    if rank == 1:
        done = os.path.join(folder, "rank0-done")
        for _ in range(600):
            if os.path.exists(done):
                break
            torch.ttpu.synchronize()
            import time

            time.sleep(0.1)
        return {}
    try:
        dist.all_reduce(torch.ones(2, device="ttpu"))
    finally:
        open(os.path.join(folder, "rank0-done"), "w").close()
    return {}


def _worker(rank, world, folder, cases, timeout):
    import faulthandler

    import torch.distributed as dist

    # A hung job prints where each rank waits, and ends.
    faulthandler.dump_traceback_later(300, exit=True)

    import ttpu  # noqa: F401

    store = dist.FileStore(os.path.join(folder, "store"), world)
    dist.init_process_group(
        "ttpu", store=store, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=timeout)
    )
    results = {}
    for case in cases:
        try:
            if case == "ddp":
                results[case] = _case_ddp(rank)
            elif case.startswith("fsdp"):
                results[case] = _case_fsdp(rank, case == "fsdp_reshard")
            elif case == "tp":
                results[case] = _case_tp(rank)
            elif case == "llama":
                results[case] = _case_llama(rank)
            elif case == "checkpoint":
                results[case] = _case_checkpoint(rank, os.path.join(folder, "checkpoint"))
            elif case == "divergent":
                results[case] = _case_divergent(rank)
            elif case == "missing_peer":
                results[case] = _case_missing_peer(rank, folder)
        except Exception as error:  # noqa: BLE001 (reported to the test)
            results[case] = {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}
    results["stats"] = torch.ttpu.stats()["collectives"]
    with open(os.path.join(folder, f"rank{rank}.json"), "w") as file:
        json.dump(results, file)
    if not any("error" in result for result in results.values() if isinstance(result, dict)):
        dist.destroy_process_group()


def _run_job(cases, timeout=60):
    folder = tempfile.mkdtemp(prefix="ttpu-dist-")
    failure = None
    try:
        mp.spawn(_worker, args=(WORLD, folder, cases, timeout), nprocs=WORLD, join=True)
    except mp.ProcessExitedException as error:
        failure = error
    ranks = []
    for rank in range(WORLD):
        path = os.path.join(folder, f"rank{rank}.json")
        assert os.path.exists(path), f"rank {rank} wrote no results ({failure})"
        with open(path) as file:
            ranks.append(json.load(file))
    return ranks


@pytest.fixture(scope="module")
def job():
    return _run_job(["ddp", "fsdp_reshard", "fsdp_keep", "tp", "llama", "checkpoint"])


def _reference(model, optimizer, batch, loss_of):
    _train(model, optimizer, batch, loss_of, "cpu")
    return {name: p.detach() for name, p in model.named_parameters()}


def _assert_params(got, want, what, atol=2e-6):
    assert got.keys() == want.keys(), f"{what}: parameter names differ"
    for name, value in want.items():
        torch.testing.assert_close(torch.tensor(got[name]), value, rtol=1e-5, atol=atol, msg=lambda m: f"{what} {name}: {m}")


def _result(job, case, rank):
    result = job[rank][case]
    assert "error" not in result, result.get("traceback")
    return result


def test_ddp_matches_one_process_on_the_whole_batch(job):
    torch.manual_seed(0)
    model = MLP()
    want = _reference(model, torch.optim.SGD(model.parameters(), lr=0.1), _data(8, 8, 4), _mse)
    for rank in range(WORLD):
        result = _result(job, "ddp", rank)
        _assert_params(result["params"], want, f"ddp rank {rank}")
        # A steady step: one host collective per bucket (one bucket here) and the step's flush.
        assert result["flushes"][-1] == {"collective all_reduce": 1, "optimizer step": 1}


@pytest.mark.parametrize("case", ["fsdp_reshard", "fsdp_keep"])
def test_fsdp2_matches_one_process_on_the_whole_batch(job, case):
    torch.manual_seed(0)
    model = MLP()
    want = _reference(model, torch.optim.AdamW(model.parameters(), lr=1e-2), _data(8, 8, 4), _mse)
    layers = len(model.layers)
    # Each layer's parameters are gathered before the forward and, when they were freed after
    # it, again before the backward; gradients are reduce-scattered once per layer.
    gathers = 2 * layers if case == "fsdp_reshard" else layers
    for rank in range(WORLD):
        result = _result(job, case, rank)
        _assert_params(result["params"], want, f"{case} rank {rank}")
        assert result["local"]["layers.1.weight"] == [8, 16], "each rank keeps half of a weight"
        assert result["collectives"] == {"all_gather_into_tensor": gathers, "reduce_scatter_tensor": layers}
        assert result["flushes"][-1] == {
            "collective all_gather_into_tensor": gathers,
            "collective reduce_scatter_tensor": layers,
            "optimizer step": 1,
        }


def test_tensor_parallel_mlp_matches_one_process(job):
    torch.manual_seed(0)
    model = UpDown()
    want = _reference(model, torch.optim.AdamW(model.parameters(), lr=1e-2), _data(4, 8, 8), _mse)
    for rank in range(WORLD):
        result = _result(job, "tp", rank)
        _assert_params(result["params"], want, f"tp rank {rank}")
        # RowwiseParallel sums the partial outputs: one all-reduce per step.
        assert result["flushes"][-1] == {"collective all_reduce": 1, "optimizer step": 1}


def test_tensor_parallel_llama_with_its_plan_matches_one_process(job):
    model = _llama()
    want = _reference(model, torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False), _tokens(), _lm)
    for rank in range(WORLD):
        result = _result(job, "llama", rank)
        _assert_params(result["params"], want, f"llama rank {rank}", atol=1e-5)


def test_checkpoint_round_trip_resumes_bit_for_bit(job):
    for rank in range(WORLD):
        result = _result(job, "checkpoint", rank)
        for name, value in result["continued"].items():
            assert torch.equal(torch.tensor(result["resumed"][name]), torch.tensor(value)), name


def test_collectives_are_taken_at_dispatch(job):
    for rank in range(WORLD):
        stats = job[rank]["stats"]
        assert stats["backend_calls"] == {}, "no device collective reached the backend's methods"
        assert stats["on_host"] == sum(stats["recorded"].values()), "the CPU plugin runs each on the host"
        assert stats["recorded"]["all_gather_into_tensor"] > 0 and stats["recorded"]["reduce_scatter_tensor"] > 0


def test_a_rank_that_flushes_alone_is_named():
    ranks = _run_job(["divergent"])
    for rank in range(WORLD):
        error = ranks[rank]["divergent"].get("error", "")
        # The first collective passed the check; the second names rank 1's lone read.
        assert "diverged before collective all_reduce #2" in error, error
        assert "flush 2 ran" in error and "`item`" in error and "`collective all_reduce`" in error, error


def test_a_collective_without_its_peer_times_out_naming_the_group():
    ranks = _run_job(["missing_peer"], timeout=3)
    error = ranks[0]["missing_peer"].get("error", "")
    assert "collective all_reduce on process group '0' (global ranks [0, 1]) did not complete within 3 s" in error, error


# ---- collectives inside programs (TTPU_COLLECTIVES=program) ----


def _program_worker(rank, world, folder):
    os.environ.update(
        TTPU_COLLECTIVES="program", TTPU_PROCESS_ID=str(rank), TTPU_NUM_PROCESSES=str(world),
        TTPU_COORDINATOR=f"file://{folder}/ttpu-store", TTPU_PEER_TIMEOUT="60",
    )
    import torch.distributed as dist

    import ttpu  # noqa: F401

    store = dist.FileStore(os.path.join(folder, "store"), world)
    dist.init_process_group("ttpu", store=store, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    results = {}
    try:
        if world == 1:
            results["ddp"] = _case_ddp_whole()
            results["fsdp"] = _case_fsdp_whole()
            results["ops"] = _case_ops_one_rank()
            results["fused"] = _case_fused()
        else:
            results["local"] = (torch.ones(3, device="ttpu") * (rank + 1)).cpu().tolist()
            dist.all_reduce(torch.ones(3, device="ttpu"))
    except Exception as error:  # noqa: BLE001 (reported to the test)
        results["error"] = f"{type(error).__name__}: {error}"
        results["traceback"] = traceback.format_exc()
    results["stats"] = torch.ttpu.stats()["collectives"]
    with open(os.path.join(folder, f"rank{rank}.json"), "w") as file:
        json.dump(results, file)


def _case_ddp_whole():
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    model = DistributedDataParallel(MLP().to("ttpu"))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = _data(8, 8, 4)
    flushes = _train(model, optimizer, (x.to("ttpu"), y.to("ttpu")), _mse, "ttpu")
    return {"params": _params(model.module), "flushes": flushes}


def _case_fsdp_whole():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("ttpu", (1,))
    torch.manual_seed(0)
    model = MLP().to("ttpu")
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = _data(8, 8, 4)
    flushes = _train(model, optimizer, (x.to("ttpu"), y.to("ttpu")), _mse, "ttpu")
    return {"params": _params(model), "flushes": flushes}


def _case_ops_one_rank():
    import torch.distributed as dist

    x = torch.arange(6.0).reshape(2, 3)
    on_device = x.to("ttpu")
    average = on_device.clone()
    dist.all_reduce(average, op=dist.ReduceOp.AVG)
    biggest = on_device.clone()
    dist.all_reduce(biggest, op=dist.ReduceOp.MAX)
    broadcast = on_device.clone()
    dist.broadcast(broadcast, src=0)
    gathered = torch.empty(2, 3, device="ttpu")
    dist.all_gather_into_tensor(gathered, on_device)
    scattered = torch.empty(2, 3, device="ttpu")
    dist.reduce_scatter_tensor(scattered, on_device)
    exchanged = torch.empty(2, 3, device="ttpu")
    dist.all_to_all_single(exchanged, on_device)
    values = {"avg": average, "max": biggest, "broadcast": broadcast, "gather": gathered, "scatter": scattered,
              "all_to_all": exchanged}
    return {name: value.cpu().tolist() for name, value in values.items()}


def _case_fused():
    import torch.distributed as dist

    import ttpu.distributed

    before = dict(torch.ttpu.stats()["collectives"]["recorded"])
    with ttpu.distributed.fused_collectives():
        ddp = _case_ddp_whole()
        x = torch.arange(6.0, device="ttpu").reshape(2, 3)
        pending = dict(torch.ttpu.stats()["flushes"])
        dist.all_reduce(x, op=dist.ReduceOp.AVG)
        y = x * 2
        recorded_without_a_flush = torch.ttpu.stats()["flushes"] == pending
        values = y.cpu().tolist()
    after = torch.ttpu.stats()["collectives"]["recorded"]
    return {"ddp": ddp, "values": values, "recorded_without_a_flush": recorded_without_a_flush,
            "collectives": {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}}


def _run_program_job(world):
    folder = tempfile.mkdtemp(prefix="ttpu-dist-program-")
    try:
        mp.spawn(_program_worker, args=(world, folder), nprocs=world, join=True)
    except mp.ProcessExitedException:
        pass
    ranks = []
    for rank in range(world):
        with open(os.path.join(folder, f"rank{rank}.json")) as file:
            ranks.append(json.load(file))
    return ranks


def test_collectives_inside_programs_train_as_on_the_host():
    # One process (the CPU plugin runs no program across processes): every collective of DDP,
    # FSDP2 and the process-group ops runs as a program on the device, none on the host, and the
    # training matches the CPU.
    (result,) = _run_program_job(1)
    assert "error" not in result, result.get("traceback")
    torch.manual_seed(0)
    model = MLP()
    want = _reference(model, torch.optim.SGD(model.parameters(), lr=0.1), _data(8, 8, 4), _mse)
    _assert_params(result["ddp"]["params"], want, "ddp in programs")
    assert result["ddp"]["flushes"][-1] == {"collective all_reduce": 1, "optimizer step": 1}
    torch.manual_seed(0)
    model = MLP()
    want = _reference(model, torch.optim.AdamW(model.parameters(), lr=1e-2), _data(8, 8, 4), _mse)
    _assert_params(result["fsdp"]["params"], want, "fsdp in programs")
    x = torch.arange(6.0).reshape(2, 3).tolist()
    assert result["ops"] == {"avg": x, "max": x, "broadcast": x, "gather": x, "scatter": x, "all_to_all": x}
    # Fused: the collectives are recorded into the step's program, so a DDP step is one flush.
    fused = result["fused"]
    torch.manual_seed(0)
    model = MLP()
    want = _reference(model, torch.optim.SGD(model.parameters(), lr=0.1), _data(8, 8, 4), _mse)
    _assert_params(fused["ddp"]["params"], want, "ddp with fused collectives")
    assert fused["ddp"]["flushes"][-1] == {"optimizer step": 1}
    assert fused["recorded_without_a_flush"] and fused["values"] == (torch.arange(6.0).reshape(2, 3) * 2).tolist()
    assert fused["collectives"]["all_reduce"] == 3 + 1, fused["collectives"]
    stats = result["stats"]
    assert stats["on_host"] == 0 and stats["host_bytes"] == 0, stats
    assert stats["backend_calls"] == {}, stats
    recorded = stats["recorded"]
    # DDP broadcasts the module state when it is made, and each step reduces one bucket.
    # (3 DDP steps and AVG and MAX, then the fused case's 3 steps and its AVG.)
    assert recorded["all_reduce"] == 3 + 2 + 4 and recorded["broadcast"] >= 2 and recorded["all_to_all_single"] == 1, stats
    assert recorded["all_gather_into_tensor"] > 0 and recorded["reduce_scatter_tensor"] > 0, stats


def test_collectives_inside_programs_across_processes_need_a_plugin_that_runs_them():
    # Two processes join one runtime job (rank 1's device is numbered after rank 0's); the CPU
    # plugin cannot compile a program over both, and the first collective says so and what to do.
    ranks = _run_program_job(WORLD)
    for rank, result in enumerate(ranks):
        assert result["local"] == [float(rank + 1)] * 3
        error = result.get("error", "")
        assert "collective all_reduce on process group '0' (global ranks [0, 1]) inside a program over devices" in error
        assert "the cpu plugin cannot run one program over devices of 2 processes" in error, error
        assert "TTPU_COLLECTIVES=host runs collectives on the host" in error, error


def test_fused_collectives_need_the_program_path():
    import ttpu.distributed

    with pytest.raises(RuntimeError, match="fused_collectives\\(\\) records collectives into programs, which needs "
                                           "TTPU_COLLECTIVES=program when the device starts"):
        with ttpu.distributed.fused_collectives():
            pass
