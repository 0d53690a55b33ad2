# SPDX-License-Identifier: Apache-2.0
"""torch.distributed.all_reduce of float32, backend "gradsync" against "gloo", in the same
processes and the same run (nccl-tests style: median time, algbw, busbw = algbw * 2(n-1)/n,
and a correctness column from exactly representable inputs).

One host, mp.spawn:
    python allreduce_bench.py --ranks 4 [--min-bytes 1K --max-bytes 64M]
Under Open MPI's mpirun (across simulated hosts: scripts/vcluster run ... -- env VENV/bin/python
allreduce_bench.py; forward MASTER_ADDR, MASTER_PORT and GLOO_SOCKET_IFNAME=eth0 with --env):
    mpirun -n 4 -x MASTER_ADDR -x MASTER_PORT python allreduce_bench.py

The sizes run from --min-bytes to --max-bytes in steps of x4 (x2 with --steps 2). Each
size runs --warmup untimed and then a number of timed calls (--iters, or enough for about
--seconds per backend); a call's time is the slowest rank's, and the table gives the median.
"""
import argparse
import datetime
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import gradsync_torch

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_bytes(s):
    s = s.strip().upper().rstrip("B").rstrip("I")
    return int(float(s[:-1]) * UNITS[s[-1]]) if s and s[-1] in UNITS else int(s)


def human(b):
    for unit in ("G", "M", "K"):
        if b >= UNITS[unit] and b % UNITS[unit] == 0:
            return f"{b // UNITS[unit]}{unit}"
    return str(b)


def sizes(a):
    b, out = a.min_bytes, []
    while b <= a.max_bytes:
        out.append(b)
        b *= a.step
    return out


def time_calls(t, group, gloo, iters, warmup):
    """Per call, the slowest rank's seconds (a barrier on the gloo group before each)."""
    for _ in range(warmup):
        dist.all_reduce(t, group=group)
    times = torch.zeros(iters, dtype=torch.float64)
    for i in range(iters):
        dist.barrier(group=gloo)
        start = time.perf_counter()
        dist.all_reduce(t, group=group)
        times[i] = time.perf_counter() - start
    dist.all_reduce(times, op=dist.ReduceOp.MAX, group=gloo)
    return times.tolist()


def bench(rank, n, a):
    torch.set_num_threads(1)
    timeout = datetime.timedelta(seconds=a.timeout)
    dist.init_process_group("gloo", rank=rank, world_size=n, timeout=timeout)
    gloo = dist.group.WORLD
    gs = dist.new_group(backend="gradsync", timeout=timeout)
    groups = {"gloo": gloo, "gradsync": gs}
    if rank == 0:
        print(f"# all_reduce float32 sum, {n} ranks; gradsync: {gs.describe()}; "
              f"torch {torch.__version__}", flush=True)
        print(f"# {'bytes':>8} {'count':>10} | " + " | ".join(
            f"{name:>8} ms  algbw  busbw ok" for name in groups) + " | speedup", flush=True)
    failed = False
    for nbytes in sizes(a):
        count = max(1, nbytes // 4)
        iters = a.iters or max(3, min(200, int(a.seconds * 1e9 / nbytes)))  # ~1 GB/s
        row = {}
        for name, g in groups.items():
            t = torch.full((count,), float(rank + 1))
            times = time_calls(t, g, gloo, iters, a.warmup)
            # The tensor has been summed warmup + iters times: n(n+1)/2 * n^(k-1) unless that
            # overflows float32's exact integers; check one fresh call instead.
            t.fill_(float(rank + 1))
            dist.all_reduce(t, group=g)
            wrong = torch.tensor([0 if bool((t == n * (n + 1) / 2).all()) else 1])
            dist.all_reduce(wrong, op=dist.ReduceOp.MAX, group=gloo)  # any rank's
            ok = not wrong.item()
            failed = failed or not ok
            med = statistics.median(times)
            algbw = count * 4 / med / 1e9
            row[name] = (med, algbw, algbw * 2 * (n - 1) / n, ok)
        if rank == 0:
            cells = " | ".join(f"{m * 1e3:11.3f} {al:6.2f} {bu:6.2f} {'ok' if ok else 'NO'}"
                               for m, al, bu, ok in row.values())
            speed = row["gloo"][0] / row["gradsync"][0]
            print(f"  {human(count * 4):>8} {count:>10} | {cells} | {speed:6.2f}x", flush=True)
    dist.destroy_process_group()
    if failed:
        raise SystemExit(f"rank {rank}: a result was wrong (the 'ok' column)")


def entry(rank, n, port, a):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    bench(rank, n, a)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2, help="ranks to spawn (without mpirun)")
    ap.add_argument("--min-bytes", type=parse_bytes, default=1 << 10)
    ap.add_argument("--max-bytes", type=parse_bytes, default=64 << 20)
    ap.add_argument("--step", type=int, default=4, help="size multiplier between rows")
    ap.add_argument("--iters", type=int, default=0, help="timed calls per size (0: by --seconds)")
    ap.add_argument("--seconds", type=float, default=1.0,
                    help="about how long each size runs per backend when --iters is 0")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300, help="the groups' timeout, s")
    a = ap.parse_args()
    if a.step < 2 or a.min_bytes < 4 or a.max_bytes < a.min_bytes:
        ap.error("need --step >= 2 and 4 <= --min-bytes <= --max-bytes")
    if "OMPI_COMM_WORLD_SIZE" in os.environ:  # this process is a rank of an MPI job
        bench(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), a)
        return
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(entry, args=(a.ranks, port, a), nprocs=a.ranks)


if __name__ == "__main__":
    sys.exit(main())
