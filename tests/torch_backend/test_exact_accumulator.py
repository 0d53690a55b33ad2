# SPDX-License-Identifier: Apache-2.0
"""gradsync_torch.exact.ExactAccumulator: the same 8 micro-batches a step, computed by 1, 2
and 4 ranks (mp.spawn, the gradsync group over shm), give the same averaged gradients
and the same weights after 4 SGD steps, bit for bit; the first step is added twice (its
exponents start at the smallest). The same loop averaging float sums instead is printed
beside it (its bits follow the rank count). Refusals: a float64 parameter.

    test_exact_accumulator.py
"""
import argparse
import hashlib
import json
import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import common
import gradsync_torch
from gradsync_torch.exact import ExactAccumulator

MICRO, STEPS = 8, 4


def model():
    torch.manual_seed(11)
    return nn.Sequential(nn.Linear(12, 40), nn.Tanh(), nn.Linear(40, 40), nn.Tanh(),
                         nn.Linear(40, 3))


def micro_batch(step, i):
    g = torch.Generator().manual_seed(100 * step + i)
    x = torch.randn(4, 12, generator=g)
    return x, torch.sin(x[:, :3] * 3)


def digest(tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def train(rank, n, exact):
    m = model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    acc = ExactAccumulator(m.parameters())
    grads, redos = [], 0
    for step in range(STEPS):
        mine = [micro_batch(step, i) for i in range(rank, MICRO, n)]
        if exact:
            while True:
                acc.begin()
                for x, y in mine:
                    m.zero_grad()
                    nn.functional.mse_loss(m(x), y).backward()
                    acc.add()
                if not acc.agree():
                    break
                redos += 1
            assert acc.average() == MICRO
        else:  # float sums: the rank's own, then over the ranks
            total = [torch.zeros_like(p) for p in m.parameters()]
            for x, y in mine:
                m.zero_grad()
                nn.functional.mse_loss(m(x), y).backward()
                for t, p in zip(total, m.parameters()):
                    t += p.grad
            for t, p in zip(total, m.parameters()):
                dist.all_reduce(t)
                p.grad.copy_(t / MICRO)
        grads.append(digest(p.grad for p in m.parameters()))
        opt.step()
    return {"grads": grads, "weights": digest(m.parameters()), "redos": redos}


def ranks(rank, n, out):
    dist.init_process_group("gradsync", rank=rank, world_size=n, timeout=common.TIMEOUT)
    result = {"exact": train(rank, n, True), "float": train(rank, n, False)}
    if rank == 0:
        try:
            ExactAccumulator(nn.Linear(2, 2).double().parameters())
        except TypeError as e:
            assert "float32" in str(e) and "float64" in str(e), e
        else:
            raise AssertionError("a float64 parameter was taken")
        with open(out, "w") as f:
            json.dump(result, f)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--timeout", type=float, default=150)
    a = ap.parse_args()
    start = time.monotonic()
    results = {}
    with tempfile.TemporaryDirectory() as d:
        for n in (1, 2, 4):
            path = os.path.join(d, f"{n}.json")
            common.spawn(ranks, n, args=(path,), timeout=a.timeout)
            with open(path) as f:
                results[n] = json.load(f)
    exact = {n: r["exact"] for n, r in results.items()}
    for n, r in exact.items():
        print(f"{n} rank(s): exact grads {r['grads']} weights {r['weights']} "
              f"(redos {r['redos']}); float weights {results[n]['float']['weights']}")
    if len({json.dumps([r["grads"], r["weights"]]) for r in exact.values()}) != 1:
        raise SystemExit("FAIL: the exact accumulator's bits differ between rank counts")
    if any(r["redos"] < 1 for r in exact.values()):
        raise SystemExit("FAIL: the first step was not added again")
    floats = len({results[n]["float"]["weights"] for n in results})
    print(f"float sums: {floats} distinct weights over 1, 2 and 4 ranks")
    print(f"PASS ({time.monotonic() - start:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
