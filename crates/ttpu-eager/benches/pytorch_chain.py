"""PyTorch eager on the chain of `modes.rs`: 1,000 elementwise ops on an f32[64] tensor, read back.

Run by hand with PyTorch installed (never by the tests), next to `cargo bench -p ttpu-eager`,
to compare ttpu's per-op cost with PyTorch's own eager dispatch on the same machine:

    python crates/ttpu-eager/benches/pytorch_chain.py

Prints the median time per chain over 25 rounds of 40 chains, with one intra-op thread (as
the chain is far too small to split) and without autograd.
"""

import statistics
import time

import torch

OPS = 1000


def chain(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    value = x
    for index in range(OPS):
        kind = index % 4
        if kind == 0:
            value = value.add(y)
        elif kind == 1:
            value = value.mul(y)
        elif kind == 2:
            value = value.tanh()
        else:
            value = value.neg()
    return value


def main() -> None:
    torch.set_num_threads(1)
    x = torch.full((64,), 0.5)
    y = torch.full((64,), 0.25)
    rounds, per_round = 25, 40
    with torch.inference_mode():
        for _ in range(per_round):
            chain(x, y).tolist()
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            for _ in range(per_round):
                chain(x, y).tolist()
            times.append((time.perf_counter() - start) / per_round)
    median = statistics.median(times)
    print(f"torch {torch.__version__}: {median * 1e3:.3f} ms per chain, {median * 1e6 / OPS:.2f} us per op")


if __name__ == "__main__":
    main()
