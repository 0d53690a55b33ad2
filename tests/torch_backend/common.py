# SPDX-License-Identifier: Apache-2.0
"""What the torch_backend tests share: starting the ranks (mp.spawn with a deadline, or
as the ranks of an mpirun job), exactly representable inputs, and comparisons that say
what differed."""
import argparse
import datetime
import hashlib
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import gradsync_torch  # registers "gradsync"; under mpirun also sets RANK and WORLD_SIZE

TIMEOUT = datetime.timedelta(seconds=60)  # every group's deadline: a hang fails, CI goes on


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def under_mpirun():
    return "OMPI_COMM_WORLD_SIZE" in os.environ


def _entry(rank, fn, nranks, port, args):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ["RANK"] = str(rank)
    os.environ["WORLD_SIZE"] = str(nranks)
    torch.set_num_threads(1)  # ranks share 2 cores
    fn(rank, nranks, *args)


def spawn(fn, nranks, args=(), timeout=150):
    """Runs fn(rank, nranks, *args) in nranks processes (env:// on a free port); a rank
    that raises fails the run, and so do ranks still running after `timeout` s."""
    ctx = mp.start_processes(_entry, args=(fn, nranks, free_port(), args), nprocs=nranks,
                             join=False, start_method="spawn")
    deadline = time.monotonic() + timeout
    while not ctx.join(timeout=1.0):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
            sys.exit(f"FAIL: ranks still running after {timeout} s")


def run(fn, description):
    """The test's main: `--ranks N` spawns N ranks; under mpirun this process is a rank."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=150)
    a = ap.parse_args()
    start = time.monotonic()
    if under_mpirun():
        torch.set_num_threads(1)
        rank = int(os.environ["RANK"])
        fn(rank, int(os.environ["WORLD_SIZE"]))
        if rank:
            return
    else:
        spawn(fn, a.ranks, timeout=a.timeout)
    print(f"PASS ({time.monotonic() - start:.1f} s)", flush=True)


def init_default(backend, rank, nranks):
    dist.init_process_group(backend, rank=rank, world_size=nranks, timeout=TIMEOUT)


def gradsync_group(transport=None, node_ranks=None):
    """A gradsync group of every rank; under mpirun `transport` forces shm, mpi or
    two_level (nodes of `node_ranks` consecutive ranks)."""
    for var, value in (("GRADSYNC_TORCH_TRANSPORT", transport),
                       ("GRADSYNC_TORCH_NODE_RANKS", node_ranks)):
        if value is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = str(value)
    g = dist.new_group(backend="gradsync", timeout=TIMEOUT)
    os.environ.pop("GRADSYNC_TORCH_TRANSPORT", None)
    os.environ.pop("GRADSYNC_TORCH_NODE_RANKS", None)
    return g


def same(got, want, what):
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        bad = (got != want).nonzero()[:3].flatten().tolist() if got.shape == want.shape else "-"
        raise AssertionError(f"{what}: got {got.flatten()[:8].tolist()} ({got.dtype}, "
                             f"{tuple(got.shape)}), want {want.flatten()[:8].tolist()} "
                             f"({want.dtype}, {tuple(want.shape)}); first differing: {bad}")


def weights_hash(module, buffers=True):
    """A hash of every parameter (and buffer), bit for bit."""
    h = hashlib.sha256()
    tensors = list(module.named_parameters()) + (list(module.named_buffers()) if buffers else [])
    for name, t in tensors:
        h.update(name.encode())
        h.update(t.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def replicas_identical(module, group, what, buffers=True):
    """Every rank's weights hash is rank 0's (compared over `group`)."""
    mine = weights_hash(module, buffers)
    all_hashes = [None] * dist.get_world_size()
    dist.all_gather_object(all_hashes, mine, group=group)
    if len(set(all_hashes)) != 1:
        raise AssertionError(f"{what}: the replicas differ: {all_hashes}")
    return mine
