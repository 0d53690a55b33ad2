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
--repeats. --hook int8|topk runs gradsync's comm hook on the gradsync side (Gloo
uncompressed); --hook fp16|powersgd runs torch's hook on both.
"""
import argparse
import datetime
import gzip
import os
import statistics
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import gradsync_torch

# ---- data ---------------------------------------------------------------------------------


def read_idx(path):
    """A gzip IDX file (the MNIST format) as a uint8 tensor; its header is checked."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] or raw[1] or raw[2] != 8 or not 1 <= raw[3] <= 4:
        raise SystemExit(f"{path}: not an IDX file of unsigned bytes")
    dims = struct.unpack(f">{raw[3]}I", raw[4:4 + 4 * raw[3]])
    count = 1
    for d in dims:
        count *= d
    body = raw[4 + 4 * raw[3]:]
    if len(body) != count:
        raise SystemExit(f"{path}: header says {dims} ({count} bytes), the file has {len(body)}")
    return torch.frombuffer(bytearray(body), dtype=torch.uint8).reshape(dims)


def fashion_mnist(directory, limit):
    x = read_idx(os.path.join(directory, "train-images-idx3-ubyte.gz"))[:limit]
    y = read_idx(os.path.join(directory, "train-labels-idx1-ubyte.gz"))[:limit]
    return (x.float() / 255 - 0.286) / 0.353, y.long()


def corpus(directory, context):
    """The bytes of every plain-text file in `directory`, as windows of context + 1."""
    if not os.path.isdir(directory):
        directory = "/usr/share/common-licenses"
    text = bytearray()
    for name in sorted(os.listdir(directory)):
        p = os.path.join(directory, name)
        if os.path.isfile(p) and not name.endswith((".dat", ".u8", ".gz")):
            with open(p, "rb") as f:
                text += f.read()
    windows = len(text) // context - 1
    if windows < 64:
        raise SystemExit(f"{directory}: {len(text)} bytes of text, too few for context {context}")
    t = torch.frombuffer(text, dtype=torch.uint8).long()
    idx = torch.arange(windows).unsqueeze(1) * context + torch.arange(context + 1)
    return t[idx]


# ---- models -------------------------------------------------------------------------------


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5, padding=2)
        self.conv2 = nn.Conv2d(16, 32, 5, padding=2)
        self.fc1 = nn.Linear(32 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.conv1(x)), 2)
        h = F.max_pool2d(F.relu(self.conv2(h)), 2)
        return self.fc2(F.relu(self.fc1(h.flatten(1))))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ff1, self.ff2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
        att = att.masked_fill(mask[:t, :t], float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.ff2(F.gelu(self.ff1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, context=64, d=256, heads=4, layers=3):
        super().__init__()
        self.tok, self.pos = nn.Embedding(256, d), nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, 256, bias=False)
        # Not a buffer: DDP would broadcast it, and Gloo broadcasts no bool tensors.
        self.mask = torch.ones(context, context, dtype=torch.bool).triu(1)

    def forward(self, x):
        h = self.tok(x) + self.pos(torch.arange(x.shape[1]))
        for blk in self.blocks:
            h = blk(h, self.mask)
        return self.head(self.ln(h))


# ---- the benchmark ------------------------------------------------------------------------


class Task:
    def __init__(self, name, a, rank, n):
        self.name = name
        if name == "cnn":
            self.x, self.y = fashion_mnist(a.data, a.limit)
            self.batch = a.batch or 64
        else:
            self.seqs = corpus(a.corpus, 64)[: a.limit]
            self.batch = a.batch or 16
        self.rank, self.n = rank, n

    def model(self, seed):
        torch.manual_seed(seed)
        return CNN() if self.name == "cnn" else GPT()

    def step_batch(self, step):
        """This rank's shard of the step's global batch (the data wraps around)."""
        total = len(self.x) if self.name == "cnn" else len(self.seqs)
        start = (step * self.n + self.rank) * self.batch
        idx = torch.arange(start, start + self.batch) % total
        if self.name == "cnn":
            return self.x[idx].unsqueeze(1), self.y[idx]
        s = self.seqs[idx]
        return s[:, :-1], s[:, 1:]

    def loss(self, model, x, y):
        out = model(x)
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def train(task, ddp, steps, first_step, gloo):
    opt = torch.optim.SGD(ddp.parameters(), lr=0.02, momentum=0.9)
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

    if hook in ("int8", "topk") and backend == "gradsync":
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
        losses = {}
        for rep in range(a.repeats):
            order = list(groups) if rep % 2 == 0 else list(reversed(groups))
            for backend in order:
                g = groups[backend]
                ddp = DDP(task.model(a.seed), process_group=g, bucket_cap_mb=a.bucket_mb)
                attach_hook(ddp, a.hook, g, backend)
                train(task, ddp, a.warmup, 0, gloo)
                took, loss = train(task, ddp, a.steps, a.warmup, gloo)
                rates[backend].append(a.steps * task.batch * n / took)
                losses[backend] = loss
        if rank == 0:
            med = {b: statistics.median(r) for b, r in rates.items()}
            print(f"{name:12s} {params / 1e6:.2f}M params, batch {task.batch}/rank: "
                  f"gradsync {med['gradsync']:9.1f} samples/s (loss {losses['gradsync']:.4f}), "
                  f"gloo {med['gloo']:9.1f} samples/s (loss {losses['gloo']:.4f}): "
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
    ap.add_argument("--batch", type=int, default=0, help="per rank (0: cnn 64, transformer 16)")
    ap.add_argument("--bucket-mb", type=float, default=25, help="DDP's bucket_cap_mb")
    ap.add_argument("--hook", choices=["none", "int8", "topk", "fp16", "powersgd"], default="none")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--limit", type=int, default=60000, help="samples (or windows) loaded")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--corpus", default="/usr/share/games/fortunes")
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
