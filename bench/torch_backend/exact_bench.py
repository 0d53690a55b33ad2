# SPDX-License-Identifier: Apache-2.0
"""What gradsync_torch.exact.ExactAccumulator costs in a training step: the transformer of
ddp_bench.py (GPT, 2.5M parameters) on random byte sequences, M micro-batches a step
spread over the ranks, each step's gradient averaged two ways in the same processes,
alternating: float sums (each rank adds its micro-batches' gradients, one all_reduce of
the sum) and the exact accumulator (codes per micro-batch, two all_reduces: the exponent
fields and the codes). Prints each way's median step time over --repeats and the ratio.

    python exact_bench.py --ranks 4 --micro 8 --steps 5 --repeats 3
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from bench_models import GPT
from gradsync_torch.exact import ExactAccumulator

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                                "torch_backend"))
import common  # noqa: E402  (tests/torch_backend: mp.spawn with a deadline)


def batch(step, i, rows, context=64):
    g = torch.Generator().manual_seed(1000 * step + i)
    return torch.randint(0, 256, (rows, context + 1), generator=g)


def step_float(model, mine, micro):
    total = [torch.zeros_like(p) for p in model.parameters()]
    for x in mine:
        model.zero_grad()
        F.cross_entropy(model(x[:, :-1]).reshape(-1, 256), x[:, 1:].reshape(-1)).backward()
        for t, p in zip(total, model.parameters()):
            t += p.grad
    flat = torch.cat([t.reshape(-1) for t in total])
    dist.all_reduce(flat)
    flat /= micro


def step_exact(model, acc, mine):
    while True:
        acc.begin()
        for x in mine:
            model.zero_grad()
            F.cross_entropy(model(x[:, :-1]).reshape(-1, 256), x[:, 1:].reshape(-1)).backward()
            acc.add()
        if not acc.agree():
            return acc.average()


def ranks(rank, n, a):
    torch.set_num_threads(1)
    dist.init_process_group("gradsync", rank=rank, world_size=n, timeout=common.TIMEOUT)
    torch.manual_seed(0)
    model = GPT()
    acc = ExactAccumulator(model.parameters())
    times = {"float": [], "exact": []}
    for rep in range(a.repeats + 1):  # the first repeat warms up (and the first exact step redoes)
        for way in ("float", "exact"):
            dist.barrier()
            t0 = time.perf_counter()
            for step in range(a.steps):
                mine = [batch(step, i, a.rows) for i in range(rank, a.micro, n)]
                if way == "float":
                    step_float(model, mine, a.micro)
                else:
                    step_exact(model, acc, mine)
            dist.barrier()
            if rep:
                times[way].append((time.perf_counter() - t0) / a.steps)
    if rank == 0:
        f, e = statistics.median(times["float"]), statistics.median(times["exact"])
        params = sum(p.numel() for p in model.parameters())
        print(f"# {n} ranks, {params / 1e6:.2f}M parameters, {a.micro} micro-batches of "
              f"{a.rows} sequences a step, median of {a.repeats}")
        print(f"float sums {f * 1000:.0f} ms/step, exact accumulator {e * 1000:.0f} ms/step: "
              f"{f / e:.2f}x the float loop's speed", flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--micro", type=int, default=8, help="micro-batches a step, all ranks")
    ap.add_argument("--rows", type=int, default=4, help="sequences in a micro-batch")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=600)
    a = ap.parse_args()
    common.spawn(ranks, a.ranks, args=(a,), timeout=a.timeout)


if __name__ == "__main__":
    main()
