# SPDX-License-Identifier: Apache-2.0
"""What the gradsync backend refuses and how it fails, with "gradsync" as the default group:
  - BAND, BOR, BXOR, PREMUL_SUM, sparse, non-contiguous and non-CPU tensors, dtypes it
    cannot reduce, several tensors per call, a root out of range: refused on the caller's
    thread with a message that says what to do instead, and the group carries on;
  - the calls it does not implement (all_to_all, all_to_all_single, send, recv): refused,
    naming a Gloo group as the way out;
  - tensors whose shapes (or dtypes) differ across ranks: every rank raises GradsyncError
    (code 'mismatch') at once, naming the ranks, synchronous or through the future, and
    the group carries on;
  - a rank that never calls: the others raise 'timeout' at the group's deadline, naming it.
(A killed rank: test_kill.py.)

    test_errors.py --ranks 2
"""
import datetime
import time

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

import common
import gradsync_torch


def expect_refused(fn, *needles):
    try:
        fn()
    except RuntimeError as e:
        msg = str(e)
        missing = [s for s in needles if s not in msg]
        if missing:
            raise AssertionError(f"the message lacks {missing}: {msg}")
        return msg
    raise AssertionError(f"not refused (expected a message with {needles})")


def check_refusals(rank, n, pg):
    t = torch.ones(4, dtype=torch.int32)
    for op, name in ((ReduceOp.BAND, "BAND"), (ReduceOp.BOR, "BOR"), (ReduceOp.BXOR, "BXOR")):
        expect_refused(lambda: dist.all_reduce(t, op=op), "bitwise", "MIN", "MAX", "all_gather")
    expect_refused(lambda: dist.all_reduce(torch.ones(4), op=dist._make_nccl_premul_sum(2.0)),
                   "PREMUL_SUM", "multiply", "SUM")
    sparse = torch.sparse_coo_tensor(torch.tensor([[0, 2]]), torch.tensor([1.0, 2.0]), (4,))
    expect_refused(lambda: dist.all_reduce(sparse), "dense", ".to_dense()")
    expect_refused(lambda: dist.all_reduce(torch.ones(4, 4).t()), "contiguous", ".contiguous()")
    expect_refused(lambda: dist.broadcast(torch.ones(4, 4)[:, 1], src=0), ".contiguous()")
    # torch's dispatcher sends no non-CPU tensor to a CPU build's collectives; the comm
    # hook's entry takes tensors directly, through the same check.
    expect_refused(lambda: pg._compressed_average(torch.ones(4, device="meta"), "int8", 0),
                   "CPU", ".cpu()")
    expect_refused(lambda: dist.all_reduce(torch.ones(4, dtype=torch.uint8)), "uint8", "convert")
    expect_refused(lambda: pg.allreduce([torch.ones(2), torch.ones(2)]), "one tensor",
                   "allreduce_coalesced")
    expect_refused(lambda: dist.all_gather([torch.ones(2)], torch.ones(2)) if n > 1 else None,
                   "output tensors")
    expect_refused(lambda: dist.all_gather_into_tensor(torch.ones(3), torch.ones(2)), "times")
    expect_refused(lambda: dist.reduce(torch.ones(2), dst=n), "root", "not a rank")
    if n > 1:  # torch checks its gather_list itself; the group's own call gets ours
        opts = dist.GatherOptions()
        opts.rootRank = 0
        expect_refused(lambda: pg.gather([[torch.ones(2)]], [torch.ones(2)], opts),
                       f"one list of {n} output tensors on the root" if rank == 0 else
                       "this rank is not the root")
    # What it does not implement: torch's own message names no way out; this one does.
    expect_refused(lambda: dist.all_to_all_single(torch.ones(n), torch.ones(n)), "all_to_all_single",
                   "Gloo group")
    expect_refused(lambda: dist.all_to_all([torch.ones(1)] * n, [torch.ones(1)] * n), "all_to_all",
                   "Gloo group")
    expect_refused(lambda: dist.send(torch.ones(1), dst=(rank + 1) % n), "send",
                   "point-to-point", "Gloo group")
    expect_refused(lambda: dist.recv(torch.ones(1), src=(rank + 1) % n), "recv", "Gloo group")
    # Nothing above reached the other ranks: the group is in step.
    x = torch.full((3,), float(rank))
    dist.all_reduce(x)
    common.same(x, torch.full((3,), float(n * (n - 1) // 2)), "all_reduce after the refusals")


def expect_mismatch(fn, what):
    start = time.monotonic()
    try:
        fn()
    except gradsync_torch.GradsyncError as e:
        took = time.monotonic() - start
        msg = str(e)
        assert e.code == "mismatch", (e.code, msg)
        assert isinstance(e, RuntimeError)
        # The message names the ranks that differ and what differed.
        assert "rank 0" in msg and "rank 1" in msg, msg
        assert took < 5, f"{what}: raised after {took:.1f} s"
        return msg
    raise AssertionError(f"{what}: no error")


def check_mismatch(rank, n):
    count = 10 + 2 * rank  # every rank a different shape
    msg = expect_mismatch(lambda: dist.all_reduce(torch.ones(count)), "shapes")
    if rank == 0:
        print(f"ok: different shapes: {msg[:300]}", flush=True)
    dtype = torch.float32 if rank == 0 else torch.float64
    expect_mismatch(lambda: dist.all_reduce(torch.ones(8, dtype=dtype)), "dtypes")
    # The same through a Work and its future.
    expect_mismatch(lambda: dist.all_reduce(torch.ones(count), async_op=True).wait(), "Work.wait")
    expect_mismatch(
        lambda: dist.all_reduce(torch.ones(count), async_op=True).get_future().wait(), "future")
    expect_mismatch(lambda: dist.broadcast(torch.ones(count), src=0), "broadcast shapes")
    # A mismatch stops the call before any data moves: the group carries on.
    x = torch.ones(5)
    dist.all_reduce(x)
    common.same(x, torch.full((5,), float(n)), "all_reduce after the mismatches")


def check_timeout(rank, n):
    late = dist.new_group(backend="gradsync", timeout=datetime.timedelta(seconds=3))
    if rank == 0:
        start = time.monotonic()
        try:
            dist.all_reduce(torch.ones(4), group=late)
        except gradsync_torch.GradsyncError as e:
            took = time.monotonic() - start
            assert e.code == "timeout", (e.code, str(e))
            assert "peer 1" in str(e) or "rank 1" in str(e), str(e)
            assert 2.5 < took < 8, f"the deadline was 3 s; raised after {took:.1f} s"
            print(f"ok: a rank that never calls: {took:.1f} s: {str(e)[:200]}", flush=True)
        else:
            raise AssertionError("no timeout")
    dist.barrier()  # the others never called; the default group is fine


def ranks(rank, n):
    common.init_default("gradsync", rank, n)
    assert dist.get_backend() == "gradsync"
    pg = dist.distributed_c10d._get_default_group()
    check_refusals(rank, n, pg)
    check_mismatch(rank, n)
    check_timeout(rank, n)
    dist.destroy_process_group()


if __name__ == "__main__":
    common.run(ranks, __doc__)
