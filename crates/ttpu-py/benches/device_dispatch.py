"""What recording one ATen call on the ttpu device costs, side by side in one run: PyTorch's CPU
eager op, the floor of any Python device (a wrapper subclass whose ``__torch_dispatch__`` only
makes the result's wrapper, recording nothing), and ttpu's recording (DeferAndFuse: the call is
recorded, not run; the work runs once at the end, outside the timing).

    python crates/ttpu-py/benches/device_dispatch.py [--ops N] [--rounds R]

Prints one row per path: microseconds per op (median and best of R rounds of N ops), and the
ratio to the floor. The ops are ``y * 1.0001`` then ``y + 0.5`` on a 64-element float32 tensor,
alternating, as a chain (each reads the previous result)."""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import ttpu  # noqa: F401


class Floor(torch.Tensor):
    """A wrapper subclass that records nothing: the Python dispatch floor."""

    @staticmethod
    def __new__(cls, like):
        return torch.Tensor._make_wrapper_subclass(cls, like.shape, dtype=like.dtype, device="meta")

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return Floor(args[0])


def chain(y, ops):
    for index in range(ops // 2):
        y = y * 1.0001
        y = y + 0.5
    return y


def time_path(make, ops, rounds, finish=lambda y: None):
    times = []
    for _ in range(rounds):
        y = make()
        start = time.perf_counter()
        y = chain(y, ops)
        times.append((time.perf_counter() - start) / ops * 1e6)
        finish(y)
    return statistics.median(times), min(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    torch.set_num_threads(1)
    x = torch.randn(64)
    rows = {
        "cpu eager": time_path(lambda: x.clone(), args.ops, args.rounds),
        "wrapper floor": time_path(lambda: Floor(x), args.ops, args.rounds),
        "ttpu record": time_path(
            lambda: x.to("ttpu"), args.ops, args.rounds, finish=lambda y: torch.ttpu.synchronize()
        ),
    }
    floor = rows["wrapper floor"][0]
    print(f"{'path':<16}{'median us/op':>14}{'best us/op':>12}{'x floor':>10}")
    for name, (median, best) in rows.items():
        print(f"{name:<16}{median:>14.1f}{best:>12.1f}{median / floor:>10.2f}")


if __name__ == "__main__":
    main()
