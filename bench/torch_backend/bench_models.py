# SPDX-License-Identifier: Apache-2.0
"""The models and data of the Python training benchmarks, shared by
bench/torch_backend/ddp_bench.py (DDP over gradsync and gloo) and
bench/framework_compare/horovod_train.py (Horovod), so that every system trains the same
thing: examples/torch_trainer's CNN on Fashion-MNIST and its GPT-style byte language model
on a plain-text corpus (their shapes are in ddp_bench.py's docstring). Only torch is
imported here; no process group is touched.
"""
import gzip
import math
import os
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F

from trainer_data import TrainerOrder, normalised

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


def fashion_mnist(directory, limit, split="train"):
    """The first `limit` images and labels of a split: "train", or "t10k" (the test set)."""
    x = read_idx(os.path.join(directory, f"{split}-images-idx3-ubyte.gz"))[:limit]
    y = read_idx(os.path.join(directory, f"{split}-labels-idx1-ubyte.gz"))[:limit]
    return normalised(x.float()), y.long()


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
        # GPT-style embeddings, drawn after every layer as torch_trainer's gpt_impl does.
        with torch.no_grad():
            nn.init.normal_(self.tok.weight, 0.0, 0.02)
            nn.init.normal_(self.pos.weight, 0.0, 0.02)
        # Not a buffer: DDP would broadcast it, and Gloo broadcasts no bool tensors.
        self.mask = torch.ones(context, context, dtype=torch.bool).triu(1)

    def forward(self, x):
        h = self.tok(x) + self.pos(torch.arange(x.shape[1]))
        for blk in self.blocks:
            h = blk(h, self.mask)
        return self.head(self.ln(h))


# ---- the task: one model, its data, this rank's shard ------------------------------------


class Task:
    """`a` carries the flags of add_task_args: data, corpus, limit, batch (per rank, 0 for
    the model's default)."""

    def __init__(self, name, a, rank, n):
        self.name = name
        if name == "cnn":
            self.x, self.y = fashion_mnist(a.data, a.limit)
            self.test = fashion_mnist(a.data, a.limit, "t10k")  # as torch_trainer's
            self.batch = a.batch or 64
        else:
            windows = corpus(a.corpus, 64)
            self.seqs = windows[: a.limit]
            # torch_trainer's test text: windows from the last tenth on, at most limit / 8
            # and 256 of them.
            tenth = max(1, (len(windows) + 1) // 10)
            self.test = windows[len(windows) + 1 - tenth:][: min(max(1, a.limit // 8), 256)]
            self.batch = a.batch or 16
        self.rank, self.n = rank, n
        self.order, self.perms = TrainerOrder(a.seed), []

    def model(self, seed):
        torch.manual_seed(seed)
        return CNN() if self.name == "cnn" else GPT()

    def optimizer(self, params):
        """The trainers' optimizer: SGD 0.02 with momentum 0.9 (CNN), AdamW 1e-3 without
        weight decay (transformer)."""
        if self.name == "cnn":
            return torch.optim.SGD(params, lr=0.02, momentum=0.9)
        return torch.optim.AdamW(params, lr=1e-3, weight_decay=0)

    def step_batch(self, step):
        """This rank's shard of the step's global batch, as the trainers take it: epoch e
        visits the samples in the e-th permutation, rank r takes its slice of each global
        batch, and an epoch drops the last partial batch."""
        total = len(self.x) if self.name == "cnn" else len(self.seqs)
        global_batch = self.batch * self.n
        per_epoch = total // global_batch
        if per_epoch == 0:
            raise SystemExit(f"a global batch of {global_batch} is larger than the "
                             f"{total} training samples")
        epoch, s = divmod(step, per_epoch)
        while len(self.perms) <= epoch:
            self.perms.append(self.order.permutation(total))
        start = s * global_batch + self.rank * self.batch
        idx = torch.tensor(self.perms[epoch][start:start + self.batch])
        if self.name == "cnn":
            return self.x[idx].unsqueeze(1), self.y[idx]
        s = self.seqs[idx]
        return s[:, :-1], s[:, 1:]

    def loss(self, model, x, y):
        out = model(x)
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))

    @torch.no_grad()
    def evaluate(self, model):
        """The metric torch_trainer prints, on this process's copy of the weights:
        "test_acc=0.8123" (CNN) or "perplexity=5.432" (transformer)."""
        was_training = model.training
        model.eval()
        correct, loss_sum, positions = 0, 0.0, 0
        if self.name == "cnn":
            xt, yt = self.test
            for i in range(0, len(xt), 256):
                out = model(xt[i:i + 256].unsqueeze(1))
                correct += int(out.argmax(-1).eq(yt[i:i + 256]).sum())
            metric = f"test_acc={correct / len(xt):.4f}"
        else:
            for i in range(0, len(self.test), 64):
                s = self.test[i:i + 64]
                out = model(s[:, :-1])
                loss_sum += float(F.cross_entropy(out.reshape(-1, 256), s[:, 1:].reshape(-1),
                                                  reduction="sum"))
                positions += s[:, 1:].numel()
            metric = f"perplexity={math.exp(loss_sum / positions):.3f}"
        model.train(was_training)
        return metric


def add_task_args(ap):
    """The flags every script that builds a Task takes, with the same defaults."""
    ap.add_argument("--batch", type=int, default=0, help="per rank (0: cnn 64, transformer 16)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--limit", type=int, default=60000, help="samples (or windows) loaded")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--corpus", default="/usr/share/games/fortunes")
