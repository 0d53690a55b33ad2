# SPDX-License-Identifier: Apache-2.0
"""The same DDP training script over backend "gradsync" and "gloo", in the same processes,
reporting samples/s (global samples per second of the slowest rank) for two models:
  cnn          conv(1->16, 5x5) - pool - conv(16->32, 5x5) - pool - fc(1568->128) - fc(128->10)
               on Fashion-MNIST (Debian's gzip IDX files, /usr/share/datasets/fashion-mnist);
  transformer  a GPT-style byte language model (d 256, 4 heads, 3 layers, context 64:
               2.5M parameters in 41 tensors) on a plain-text corpus (Debian's fortunes,
               /usr/share/games/fortunes; else the licences in /usr/share/common-licenses).
The shapes are examples/torch_trainer's, so the figures compare with the C++ trainer's.

One host, mp.spawn:
    python ddp_bench.py --ranks 4 [--model cnn|transformer|both] [--steps 50]
Under Open MPI's mpirun (across simulated hosts: scripts/vcluster run ... -- env VENV/bin/python
ddp_bench.py; forward MASTER_ADDR, MASTER_PORT and GLOO_SOCKET_IFNAME=eth0 with --env):
    mpirun -n 4 -x MASTER_ADDR -x MASTER_PORT python ddp_bench.py

Each repeat trains --warmup untimed steps, then --steps timed ones, per backend, from the
same initial weights; the backends alternate and the table gives each one's median over
--repeats. --hook int8|topk|exact runs gradsync's comm hook on the gradsync side (Gloo
uncompressed); --hook fp16|powersgd runs torch's hook on both.
"""
import argparse
import datetime
import gc
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

import gradsync_torch
# The models, data and per-rank shards, shared with bench/framework_compare/horovod_train.py
# so that every system trains the same thing (this file's folder is on sys.path when it runs).
from bench_models import Task, add_task_args

# ---- the benchmark ------------------------------------------------------------------------


def train(task, ddp, opt, steps, first_step, gloo):
    dist.barrier(group=gloo)
    start = time.perf_counter()
    loss = torch.zeros(())
    for step in range(first_step, first_step + steps):
        x, y = task.step_batch(step)
        opt.zero_grad(set_to_none=True)
        loss = task.loss(ddp, x, y)
        loss.backward()
        opt.step()
    took = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
    dist.all_reduce(took, op=dist.ReduceOp.MAX, group=gloo)
    return took.item(), loss.item()


def attach_hook(ddp, hook, group, backend):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

    if hook in ("int8", "topk", "exact") and backend == "gradsync":
        ddp.register_comm_hook(group, getattr(gradsync_torch.hooks, hook))
    elif hook == "fp16":
        ddp.register_comm_hook(group, default_hooks.fp16_compress_hook)
    elif hook == "powersgd":
        state = psgd.PowerSGDState(process_group=group, matrix_approximation_rank=1,
                                   start_powerSGD_iter=2, random_seed=0)
        ddp.register_comm_hook(state, psgd.powerSGD_hook)


def bench(rank, n, a):
    torch.set_num_threads(a.threads)
    timeout = datetime.timedelta(seconds=a.timeout)
    dist.init_process_group("gloo", rank=rank, world_size=n, timeout=timeout)
    gloo = dist.group.WORLD
    groups = {"gradsync": dist.new_group(backend="gradsync", timeout=timeout), "gloo": gloo}
    if rank == 0:
        print(f"# DDP, {n} ranks, {a.threads} thread(s) each; gradsync: "
              f"{groups['gradsync'].describe()}; hook {a.hook}; bucket_cap_mb {a.bucket_mb}",
              flush=True)
    for name in (["cnn", "transformer"] if a.model == "both" else [a.model]):
        task = Task(name, a, rank, n)
        params = sum(p.numel() for p in task.model(0).parameters())
        rates = {b: [] for b in groups}
        losses, metrics = {}, {}
        for rep in range(a.repeats):
            order = list(groups) if rep % 2 == 0 else list(reversed(groups))
            for backend in order:
                g = groups[backend]
                ddp = DDP(task.model(a.seed), process_group=g, bucket_cap_mb=a.bucket_mb)
                attach_hook(ddp, a.hook, g, backend)
                # One optimizer for the warm-up and the timed steps (its momentum carries
                # over), as horovod_train.py and the trainers have.
                opt = task.optimizer(ddp.parameters())
                train(task, ddp, opt, a.warmup, 0, gloo)
                took, loss = train(task, ddp, opt, a.steps, a.warmup, gloo)
                rates[backend].append(a.steps * task.batch * n / took)
                losses[backend] = loss
                if rank == 0:  # every replica holds the same weights; untimed
                    metrics[backend] = task.evaluate(ddp.module)
                # Free the DDP (its Reducer) while the group map still holds the group:
                # a Reducer left for bench()'s return would drop the Gloo group's last
                # reference, and ~ProcessGroupGloo joins its workers holding the GIL, which a
                # worker freeing a tensor may wait for (torch 1.13; pytorch/pytorch#56297):
                # the job hung at its end in 1 of 5-14 runs.
                del ddp, opt
                gc.collect()
        if rank == 0:
            med = {b: statistics.median(r) for b, r in rates.items()}
            print(f"{name:12s} {params / 1e6:.2f}M params, batch {task.batch}/rank: "
                  f"gradsync {med['gradsync']:9.1f} samples/s (loss {losses['gradsync']:.4f}, "
                  f"{metrics['gradsync']}), gloo {med['gloo']:9.1f} samples/s "
                  f"(loss {losses['gloo']:.4f}, {metrics['gloo']}): "
                  f"{med['gradsync'] / med['gloo']:.2f}x", flush=True)
    dist.destroy_process_group()


def entry(rank, n, port, a):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    bench(rank, n, a)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2, help="ranks to spawn (without mpirun)")
    ap.add_argument("--model", choices=["cnn", "transformer", "both"], default="both")
    ap.add_argument("--steps", type=int, default=40, help="timed steps per backend and repeat")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--bucket-mb", type=float, default=25, help="DDP's bucket_cap_mb")
    ap.add_argument("--hook", choices=["none", "int8", "topk", "exact", "fp16", "powersgd"],
                    default="none")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    add_task_args(ap)
    ap.add_argument("--timeout", type=float, default=300, help="the groups' timeout, s")
    a = ap.parse_args()
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
