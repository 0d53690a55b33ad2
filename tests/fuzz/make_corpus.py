#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the seed corpus of every harness (tests/fuzz/corpus/NAME/): a few well-formed
inputs each, laid out as the harness reads its input (see each fuzz_NAME.cpp), and one or
two that take an error path. Deterministic: running it again rewrites the same files.

    tests/fuzz/make_corpus.py          (from anywhere)
"""
import gzip
import os
import random
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")
rnd = random.Random(54)


def u8(v):
    return struct.pack("<B", v)


def u16(v):
    return struct.pack("<H", v)


def u32(v):
    return struct.pack("<I", v)


def u64(v):
    return struct.pack("<Q", v)


def f32(*vs):
    return struct.pack("<%df" % len(vs), *vs)


def cstr(s):
    return s.encode() + b"\0"


def gradient(bad=0, at=()):
    """make_gradient's input: a seed, then how many NaN / Inf and where."""
    return u32(rnd.getrandbits(32)) + u8(bad) + b"".join(u16(a) for a in at)


def write(name, seeds):
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for i, (label, data) in enumerate(seeds):
        with open(os.path.join(d, "%02d-%s" % (i, label)), "wb") as f:
            f.write(data)


def topk_block(count, k):
    idx = sorted(rnd.sample(range(count), k))
    return f32(*(rnd.uniform(-50, 50) for _ in range(k))) + b"".join(u32(i) for i in idx)


def topk():
    seeds = []
    for label, mode, n, me, count, steps in [("sum", 0, 2, 0, 2000, 1), ("avg", 1, 4, 3, 1000, 2),
                                             ("ef_sum", 2, 3, 1, 4096, 2), ("ef_avg", 3, 8, 5, 700, 1)]:
        k = (count * 10 + 999) // 1000
        body = u8(mode) + u8(n - 2) + u8(me) + u16(count - 1) + u8(steps - 1)
        for _ in range(steps):
            body += gradient(bad=5, at=[7]) if mode == 2 else gradient()
            body += b"".join(topk_block(count, k) for _ in range(n - 1))
        seeds.append((label, body))
    # A peer's index past the bucket (errc::mismatch), and a bucket small enough to go dense.
    bad = bytearray(topk_block(2000, 20))
    bad[20 * 4 + 7 * 4:20 * 4 + 8 * 4] = u32(0xFFFFFFF0)
    seeds.append(("bad_index", u8(0) + u8(0) + u8(1) + u16(1999) + u8(0) + gradient() + bytes(bad)))
    seeds.append(("dense", u8(0) + u8(6) + u8(0) + u16(4) + u8(0) + gradient() +
                  f32(*(rnd.uniform(-9, 9) for _ in range(5)))))
    write("topk", seeds)


def int8():
    seeds = []
    for label, mode, n, me, count in [("sum", 0, 2, 1, 300), ("avg", 1, 4, 0, 1000),
                                      ("ef_sum", 2, 8, 3, 2048), ("ef_avg", 3, 127, 126, 64)]:
        blocks = (count + 255) // 256
        levels = 127 // n
        body = u8(mode) + u8(n - 1) + u8(me) + u16(count - 1) + u8(0) + gradient()
        body += f32(*([64.0] * blocks))  # the agreed scales: at least every |x|
        body += bytes((rnd.randint(-levels * n, levels * n)) & 0xFF for _ in range(count))
        seeds.append((label, body))
    seeds.append(("too_many_ranks", u8(0) + u8(129) + u8(0) + u16(99) + u8(0) + gradient()))
    write("int8", seeds)


def powersgd_worth(rows, cols):
    return rows > 2 and cols > 2 and 4 * (rows + cols) < rows * cols


def powersgd():
    seeds = []
    cases = [("matrix", 0, 2, 0, [(16, 12)], 1), ("mixed", 1, 4, 2, [(20, 30), (0, 9), (3, 3)], 2),
             ("ef_mixed", 2, 3, 1, [(40, 8), (0, 17), (12, 40), (1, 5)], 3),
             ("ef_avg", 3, 8, 7, [(10, 10), (10, 10)], 2)]
    for label, mode, n, me, shapes, steps in cases:
        body = u8(mode) + u8(n - 1) + u8(me) + u8(len(shapes))
        parts = []
        for rows, cols in shapes:
            if rows == 0:
                count = cols
                body += u8(0) + u8(0) + u8(count - 1)
                parts.append((0, 0, count))
            else:
                body += u8(rows) + u8(cols)
                parts.append((rows, cols, rows * cols))
        body += u8(steps - 1)
        dense = sum(c for r, k, c in parts if not powersgd_worth(r, k))
        ps = sum(2 * r for r, k, c in parts if powersgd_worth(r, k))
        qs = sum(2 * k for r, k, c in parts if powersgd_worth(r, k))
        for _ in range(steps):
            body += gradient()
            body += f32(*(rnd.uniform(-100, 100) for _ in range(dense)))
            body += f32(*(rnd.gauss(0, 30) for _ in range(ps)))
            body += f32(*(rnd.gauss(0, 30) for _ in range(qs)))
        seeds.append((label, body))
    # No shapes given: the whole bucket is one tensor, sent dense.
    seeds.append(("no_shapes", u8(0) + u8(1) + u8(0) + u8(0) + u16(199) + u8(0) + gradient() +
                  f32(*(rnd.uniform(-9, 9) for _ in range(200)))))
    write("powersgd", seeds)


def call_header(count=1000, seq=5, algo="ring", flags=0, root=0):
    return (u32(0x67735348) + u8(1) + u8(1) + u16(flags) + u64(seq) + u64(count) +
            algo.encode().ljust(20, b"\0") + u32(root))


def call_headers():
    seeds = []
    for label, exchange, n, r in [("agree", 0, 4, 1), ("agree_exchange", 1, 5, 2),
                                  ("one_rank", 0, 1, 0)]:
        seeds.append((label, u8(exchange) + u8(n - 1) + u8(r) + call_header() * n))
    seeds.append(("count_differs", u8(0) + u8(2) + u8(0) + call_header() * 2 +
                  call_header(count=999)))
    seeds.append(("algo_differs", u8(1) + u8(3) + u8(3) + call_header() * 3 +
                  call_header(algo="tree", flags=1)))
    write("call_header", seeds)


def plan_summary(tensors, digest, magic=0x67734650):
    return u64(magic) + u64(tensors) + u64(digest)


def plan_check():
    seeds = []
    tensors = [(100, 1), (200, 1), (300, 2), (7, 5)]
    own = b"".join(u16(c) + u8(t - 1) for c, t in tensors)
    head = lambda poisoned, n, r: u8(poisoned) + u8(n - 2) + u8(r) + u8(len(tensors)) + own + u8(9)
    seeds.append(("agree", head(0, 4, 1) + plan_summary(4, 9) * 3))
    seeds.append(("poisoned", head(1, 3, 0) + plan_summary(4, 9) * 2))
    seeds.append(("bad_magic", head(0, 2, 1) + plan_summary(4, 9, magic=0x12345678)))
    # Rank 0 (the sender of the list) disagrees: the list, then every rank's diff report.
    ref = b"".join(u64(c) + u64(t) for c, t in [(100, 1), (200, 1), (301, 2), (7, 5)])
    diff = u64(2) + u64(300) + u64(2) + u64(301) + u64(2) + u64(1) + u64(1)
    same = u64(0xFFFFFFFFFFFFFFFF) + bytes(48)
    seeds.append(("list_differs", head(0, 3, 1) + plan_summary(4, 9) + plan_summary(4, 8) +
                  ref + diff + same))
    seeds.append(("claims_2_60", head(0, 2, 1) + plan_summary(1 << 60, 9) + ref[:16 * 4] + ref[:16]
                  + same))
    write("plan_check", seeds)


def finding(rank, tensor=None, index=0, value="NaN"):
    f = u64(0xFFFFFFFFFFFFFFFF if tensor is None else tensor) + u64(index) + u64(rank)
    f += u64(0 if tensor is None else 1)
    f += (value.encode() if tensor is not None else b"").ljust(8, b"\0")
    return f + ("rank %d" % rank).encode().ljust(64, b"\0")


def finite():
    seeds = []
    seeds.append(("none", u8(2) + u8(1) + u8(2) + u8(3) + b"".join(finding(q) for q in (2, 3, 0))))
    seeds.append(("peer_nan", u8(1) + u8(0) + u8(3) + u8(4) +
                  b"".join(finding(q, tensor=1 if q == 2 else None, index=17) for q in (1, 2))))
    seeds.append(("mine_inf", u8(0) + u8(1) + u8(0) + u8(0) + u16(5) + finding(0)))
    seeds.append(("no_nul", u8(0) + u8(0) + u8(0) + u8(1) + finding(1)[:40] + b"B" * 72))
    seeds.append(("far_tensor", u8(0) + u8(0) + u8(0) + u8(1) + finding(1, tensor=1 << 40)))
    write("finite", seeds)


def fnv1a64(b):
    h = 0xCBF29CE484222325
    for c in b:
        h = ((h ^ c) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def checkpoint_bytes(dims, strings=("ring", "bucket", "local"), step=12):
    n = sum(dims[i + 1] * (dims[i] + 1) for i in range(len(dims) - 1))
    b = b"GSTRAIN1" + u32(1) + u64(len(dims)) + b"".join(u64(d) for d in dims)
    b += u64(128) + u64(1) + u64(0) + f32(0.02, 0.9) + u64(1) + u64(3) + u64(step)
    b += b"".join(u64(rnd.getrandbits(64)) for _ in range(4)) + u64(2)
    b += b"".join(u64(len(s)) + s.encode() for s in strings)
    b += struct.pack("<5d", 1.5, 90.0, 128.0, -1.0, 0.75)
    b += u64(n) + f32(*(rnd.uniform(-1, 1) for _ in range(n))) + f32(*([0.0] * n))
    return b + u64(fnv1a64(b))


def checkpoint():
    good = checkpoint_bytes([4, 3, 2])
    flipped = bytearray(good)
    flipped[40] ^= 1
    write("checkpoint", [("small", good), ("three_layers", checkpoint_bytes([6, 5, 4, 3], step=40)),
                         ("long_names", checkpoint_bytes([2, 2], ("a" * 200, "", "shm"))),
                         ("flipped_bit", bytes(flipped)), ("truncated", good[:100])])
    write("checkpoint_name", [("step", b"ckpt-0000000012.bin"), ("short", b"ckpt-1.bin"),
                              ("temporary", b".ckpt-0000000004.bin.tmp.4242"),
                              ("other", b"notes.txt")])


def idx_pair(n, labels=None, gz=False, limit=0):
    images = u32(0x803)[::-1] + u32(n)[::-1] + u32(28)[::-1] + u32(28)[::-1]
    images += bytes(rnd.getrandbits(8) for _ in range(784 * n))
    lab = u32(0x801)[::-1] + u32(n)[::-1] + bytes(labels or [rnd.randint(0, 9) for _ in range(n)])
    if gz:
        images, lab = gzip.compress(images, mtime=0), gzip.compress(lab, mtime=0)
    return u8(limit) + u32(len(images)) + images + lab


def idx():
    bad_magic = bytearray(idx_pair(1))
    bad_magic[8] = 0x04
    write("idx", [("plain_two", idx_pair(2)), ("gzip_one", idx_pair(1, gz=True)),
                  ("limit", idx_pair(3, limit=2)), ("label_10", idx_pair(1, labels=[10])),
                  ("bad_magic", bytes(bad_magic))])


def env():
    def case(strings, mask, timeout, shm_mask, shm):
        vals = [""] * 16
        for i, v in shm.items():
            vals[i] = v
        return (u32(mask) + b"".join(cstr(s) for s in strings) + struct.pack("<d", timeout) +
                u16(shm_mask) + b"".join(cstr(v) for v in vals))

    seeds = [
        ("manual", case(["30", "5", "1", "0"], 15, 10.0, 0b111, {0: "job", 1: "0", 2: "2"})),
        ("inf", case(["inf", "1e30", "0", "2.5"], 15, float("inf"), 0, {})),
        ("nan", case(["nan", "-5", "yes", "-0"], 15, float("nan"), 0b10, {1: "1"})),
        ("openmpi", case(["", "", "", ""], 0, 1e30, 0b111000 | 0b1000000,
                         {3: "1", 4: "4", 5: "4", 6: "prterun-node1-4242@1"})),
        ("slurm", case(["0x1p+1000", "7", "", "0"], 9, -1e30, 0b11111 << 11,
                       {11: "0", 12: "2", 13: "1", 14: "77", 15: "3"})),
        ("hydra", case(["1e-300", "", "1", ""], 1, 0.0, 0b11100000000, {8: "0", 9: "2", 10: "2"})),
    ]
    write("env", seeds)


def cli():
    argv = lambda *a: b"\0".join(x.encode() for x in a)
    write("cli", [
        ("bucket_topk", argv("--fusion", "bucket", "--compress", "topk", "--topk-permille", "1",
                             "--ranks", "4", "--batch", "256")),
        ("exact", argv("--exact-grads", "--batch", "64", "--hidden", "32,16", "--lr", "0.05",
                       "--momentum", "0.5", "--seed", "7")),
        ("checkpoint", argv("--checkpoint", "/tmp/x", "--checkpoint-every", "10", "--resume",
                            "--epochs", "3", "--limit", "1000", "--bucket-mb", "0.25")),
        ("two_level", argv("--transport", "two_level", "--algo", "hierarchical", "--node-ranks",
                           "2", "--inject-divergence", "1", "--throttle-ms", "5", "--quiet")),
        ("powersgd", argv("--fusion", "bucket", "--compress", "powersgd", "--powersgd-rank", "4",
                          "--no-error-feedback", "--shard-optimizer")),
        ("bad_hidden", argv("--hidden", "13225967449074772858")),
        ("help", argv("--help")),
    ])


if __name__ == "__main__":
    topk()
    int8()
    powersgd()
    call_headers()
    plan_check()
    finite()
    checkpoint()
    idx()
    env()
    cli()
