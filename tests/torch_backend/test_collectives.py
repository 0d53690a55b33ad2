# SPDX-License-Identifier: Apache-2.0
"""Every collective of the gradsync backend, every op and dtype, on exactly representable
inputs: equal to Gloo's result (in the same processes) where Gloo has the operation, and
always to the exact result computed from every rank's input.

    test_collectives.py --ranks 4                  # mp.spawn: gradsync over shm
    mpirun -n 2 python test_collectives.py         # also over mpi and two_level
"""
import warnings

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

import common
import gradsync_torch

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64]
OPS = {"sum": ReduceOp.SUM, "avg": ReduceOp.AVG, "prod": ReduceOp.PRODUCT,
       "min": ReduceOp.MIN, "max": ReduceOp.MAX}


def rank_input(rank, count, dtype, op):
    """Small integers (products: +-1 and +-2) whose sums, products and averages over 2 or 4
    ranks every dtype holds exactly."""
    i = torch.arange(count, dtype=torch.int64)
    if op == "prod":
        v = torch.where((i + rank) % 3 == 0, -1, 1) * (1 + (i * 5 + rank) % 2)
    else:
        v = (i * 7 + rank * 3) % 9 - 4
    return v.to(dtype)


def exact(n, count, dtype, op):
    """The reduction over every rank's input, computed here in int64 / float64."""
    xs = torch.stack([rank_input(r, count, torch.int64, op) for r in range(n)])
    if op in ("sum", "avg"):
        v = xs.sum(0)
    elif op == "prod":
        v = xs.prod(0)
    elif op == "min":
        v = xs.min(0).values
    else:
        v = xs.max(0).values
    if op == "avg":  # integers: truncated toward zero (the backend documents it)
        if dtype.is_floating_point:
            return (v.double() / n).to(dtype)
        return torch.div(v, n, rounding_mode="trunc").to(dtype)
    return v.to(dtype)


def gloo_or_none(fn):
    """Runs fn (a Gloo call): True, or None where Gloo lacks the operation for the dtype."""
    try:
        fn()
        return True
    except RuntimeError as e:
        if any(s in str(e) for s in ("not supported", "nsupported", "Invalid scalar type")):
            return None
        raise


def check_allreduce(rank, n, gs, gloo, skipped):
    for dtype in DTYPES:
        for op, rop in OPS.items():
            counts = [1000]
            if op == "sum" and dtype in (torch.float32, torch.bfloat16):
                counts = [0, 1, 3, 1000, 300_007]  # the sizes where auto_select changes course
            for count in counts:
                what = f"all_reduce {op} {dtype} x{count}"
                t = rank_input(rank, count, dtype, op)
                dist.all_reduce(t, op=rop, group=gs)
                common.same(t, exact(n, count, dtype, op), what)
                if op != "avg" and count:
                    g = rank_input(rank, count, dtype, op)
                    if gloo_or_none(lambda: dist.all_reduce(g, op=rop, group=gloo)) is None:
                        skipped.add(f"gloo: all_reduce {op} {dtype}")
                    else:
                        common.same(t, g, what + " against Gloo")


def check_coalesced(rank, n, gs, gloo):
    for dtype in (torch.float32, torch.int64):
        ts = [rank_input(rank, c, dtype, "sum") for c in (5, 0, 17)]
        gl = [t.clone() for t in ts]
        dist.all_reduce_coalesced(ts, group=gs)
        dist.all_reduce_coalesced(gl, group=gloo)
        for k, (t, g) in enumerate(zip(ts, gl)):
            common.same(t, exact(n, t.numel(), dtype, "sum"), f"all_reduce_coalesced[{k}] {dtype}")
            common.same(t, g, f"all_reduce_coalesced[{k}] {dtype} against Gloo")
        # Views of one buffer, back to back: reduced in place as one.
        flat = rank_input(rank, 12, dtype, "max")
        dist.all_reduce_coalesced([flat[:5], flat[5:]], op=ReduceOp.MAX, group=gs)
        common.same(flat, exact(n, 12, dtype, "max"), f"all_reduce_coalesced of views {dtype}")


def byte_input(rank, count, dtype):
    v = torch.arange(count) * 3 + rank * 5
    if dtype == torch.bool:
        return v % 2 == 0
    return (v % 100).to(dtype)


def check_broadcast(rank, n, gs, gloo, skipped):
    for dtype in DTYPES + [torch.bool, torch.uint8, torch.int8, torch.int16]:
        for root in range(n):
            for count in (1, 1000) if dtype != torch.float32 else (0, 1, 1000, 300_007):
                t = byte_input(rank, count, dtype)
                dist.broadcast(t, src=root, group=gs)
                common.same(t, byte_input(root, count, dtype), f"broadcast {dtype} x{count} root {root}")
                g = byte_input(rank, count, dtype)
                if gloo_or_none(lambda: dist.broadcast(g, src=root, group=gloo)) is None:
                    skipped.add(f"gloo: broadcast {dtype}")
                else:
                    common.same(t, g, f"broadcast {dtype} x{count} root {root} against Gloo")


def check_allgather(rank, n, gs, gloo, skipped):
    for dtype in DTYPES + [torch.bool, torch.uint8]:
        for count in (1, 333):
            mine = byte_input(rank, count, dtype).reshape(-1, 1) if count > 1 else byte_input(rank, 1, dtype)
            want = [byte_input(r, count, dtype).reshape(mine.shape) for r in range(n)]
            out = [torch.zeros_like(mine) for _ in range(n)]
            dist.all_gather(out, mine, group=gs)
            ref = [torch.zeros_like(mine) for _ in range(n)]
            if gloo_or_none(lambda: dist.all_gather(ref, mine, group=gloo)) is None:
                skipped.add(f"gloo: all_gather {dtype}")
                ref = None
            for r in range(n):
                common.same(out[r], want[r], f"all_gather {dtype} x{count} from rank {r}")
                if ref is not None:
                    common.same(out[r], ref[r],
                                f"all_gather {dtype} x{count} from rank {r} against Gloo")
            # The outputs as views of one buffer: gathered into it directly.
            flat = torch.zeros(n * mine.numel(), dtype=dtype)
            dist.all_gather(list(flat.view(n, -1)), mine.reshape(-1), group=gs)
            common.same(flat, torch.cat([w.reshape(-1) for w in want]), f"all_gather into views {dtype}")
            base = torch.zeros(n * mine.numel(), dtype=dtype)
            dist.all_gather_into_tensor(base, mine.reshape(-1), group=gs)
            common.same(base, flat, f"all_gather_into_tensor {dtype} x{count}")
            # The input inside the output: in place (this rank's block, as FSDP calls it),
            # and in another rank's block (copied first: gradsync alone refuses it).
            for slot in (rank, (rank + 1) % n):
                c = mine.numel()
                buf = torch.zeros(n * c, dtype=dtype)
                buf[slot * c:(slot + 1) * c] = mine.reshape(-1)
                dist.all_gather_into_tensor(buf, buf[slot * c:(slot + 1) * c], group=gs)
                common.same(buf, flat, f"all_gather_into_tensor from block {slot} {dtype} x{count}")
                buf = torch.zeros(n * c, dtype=dtype)
                buf[slot * c:(slot + 1) * c] = mine.reshape(-1)
                dist.all_gather(list(buf.view(n, -1)), buf[slot * c:(slot + 1) * c], group=gs)
                common.same(buf, flat, f"all_gather into views from block {slot} {dtype} x{count}")


def check_reduce_scatter(rank, n, gs):
    # Gloo has no reduce_scatter in torch 1.13: the exact result is the reference.
    for dtype in DTYPES:
        for op, rop in OPS.items():
            count = 37
            full = rank_input(rank, n * count, dtype, op)
            want = exact(n, n * count, dtype, op)[rank * count:(rank + 1) * count]
            out = torch.zeros(count, dtype=dtype)
            dist.reduce_scatter(out, list(full.clone().chunk(n)), op=rop, group=gs)
            common.same(out, want, f"reduce_scatter {op} {dtype}")
            # Separate tensors, not views of one buffer: packed first.
            pieces = [p.clone() for p in full.chunk(n)]
            out2 = torch.zeros(count, dtype=dtype)
            dist.reduce_scatter(out2, pieces, op=rop, group=gs)
            common.same(out2, want, f"reduce_scatter of separate tensors {op} {dtype}")
            out3 = torch.zeros(count, dtype=dtype)
            dist.reduce_scatter_tensor(out3, full, op=rop, group=gs)
            common.same(out3, want, f"reduce_scatter_tensor {op} {dtype}")
            # The output inside the input: this rank's block (in place, as NCCL allows).
            buf = full.clone()
            dist.reduce_scatter_tensor(buf[rank * count:(rank + 1) * count], buf, op=rop, group=gs)
            common.same(buf[rank * count:(rank + 1) * count], want,
                        f"reduce_scatter_tensor in place {op} {dtype}")
            chunks = [p.clone() for p in full.chunk(n)]
            dist.reduce_scatter(chunks[rank], chunks, op=rop, group=gs)
            common.same(chunks[rank], want, f"reduce_scatter into its own input {op} {dtype}")


def check_reduce(rank, n, gs, gloo, skipped):
    """Only the root's tensor changes (the other ranks' are left as they were)."""
    for dtype in DTYPES:
        for op, rop in OPS.items():
            for root in range(n):
                count = 37 if root else 1000
                what = f"reduce {op} {dtype} x{count} to {root}"
                t = rank_input(rank, count, dtype, op)
                dist.reduce(t, dst=root, op=rop, group=gs)
                want = exact(n, count, dtype, op) if rank == root else rank_input(rank, count, dtype, op)
                common.same(t, want, what)
                if op != "avg":  # Gloo's non-root tensors end as its scratch: not compared
                    g = rank_input(rank, count, dtype, op)
                    if gloo_or_none(lambda: dist.reduce(g, dst=root, op=rop, group=gloo)) is None:
                        skipped.add(f"gloo: reduce {op} {dtype}")
                    elif rank == root:
                        common.same(t, g, what + " against Gloo")


def check_gather_scatter(rank, n, gs, gloo, skipped):
    for dtype in DTYPES + [torch.bool, torch.uint8]:
        for root in range(n):
            for count in (1, 333):
                mine = byte_input(rank, count, dtype)
                want = [byte_input(r, count, dtype) for r in range(n)]
                out = [torch.zeros_like(mine) for _ in range(n)] if rank == root else None
                dist.gather(mine, out, dst=root, group=gs)
                ref = [torch.zeros_like(mine) for _ in range(n)] if rank == root else None
                if gloo_or_none(lambda: dist.gather(mine, ref, dst=root, group=gloo)) is None:
                    skipped.add(f"gloo: gather {dtype}")
                    ref = None
                if rank == root:
                    for r in range(n):
                        common.same(out[r], want[r], f"gather {dtype} x{count} to {root} from rank {r}")
                        if ref is not None:
                            common.same(out[r], ref[r], f"gather {dtype} x{count} to {root} against Gloo")
                    # Views of one buffer: gathered into it directly.
                    flat = torch.zeros(n * count, dtype=dtype)
                    dist.gather(mine, list(flat.view(n, -1)), dst=root, group=gs)
                    common.same(flat, torch.cat(want), f"gather into views {dtype}")
                    # The input in another rank's block of the views.
                    slot = (rank + 1) % n
                    flat = torch.zeros(n * count, dtype=dtype)
                    flat[slot * count:(slot + 1) * count] = mine
                    dist.gather(flat[slot * count:(slot + 1) * count], list(flat.view(n, -1)),
                                dst=root, group=gs)
                    common.same(flat, torch.cat(want), f"gather into views from block {slot} {dtype}")
                else:  # the root's two calls into views
                    dist.gather(mine, None, dst=root, group=gs)
                    dist.gather(mine, None, dst=root, group=gs)
                # scatter: rank r receives piece r of the root's list.
                pieces = [byte_input(root * n + r, count, dtype) for r in range(n)]
                got = torch.zeros_like(mine)
                dist.scatter(got, pieces if rank == root else None, src=root, group=gs)
                common.same(got, pieces[rank], f"scatter {dtype} x{count} from {root}")
                g = torch.zeros_like(mine)
                if gloo_or_none(lambda: dist.scatter(g, pieces if rank == root else None, src=root,
                                                     group=gloo)) is None:
                    skipped.add(f"gloo: scatter {dtype}")
                else:
                    common.same(got, g, f"scatter {dtype} x{count} from {root} against Gloo")
    objs = [None] * n if rank == n - 1 else None
    dist.gather_object({"rank": rank}, objs, dst=n - 1, group=gs)
    if rank == n - 1:
        assert objs == [{"rank": r} for r in range(n)], objs
    got = [None]
    dist.scatter_object_list(got, [f"to {r}" * (r + 1) for r in range(n)] if rank == 0 else None,
                             src=0, group=gs)
    assert got == [f"to {rank}" * (rank + 1)], got


def check_async(rank, n, gs):
    """Works and futures: the future's value is the tensor list, and a callback that
    issues and waits on another collective (as torch's PowerSGD hook does) completes."""
    t = torch.full((4,), float(rank + 1))
    work = dist.all_reduce(t, group=gs, async_op=True)
    fut = work.get_future()
    value = fut.wait()
    assert isinstance(value, list) and len(value) == 1 and value[0] is not None, value
    common.same(value[0], torch.full((4,), float(n * (n + 1) // 2)), "future value")
    work.wait()
    assert work.is_completed()
    u = torch.ones(3)

    def chained(f):  # runs on the backend's completion thread, with the GIL
        dist.all_reduce(u, group=gs, async_op=True).get_future().wait()
        return f.value()[0] * 2

    x = torch.ones(2)
    out = dist.all_reduce(x, group=gs, async_op=True).get_future().then(chained).wait()
    common.same(out, torch.full((2,), 2.0 * n), "chained future")
    common.same(u, torch.full((3,), float(n)), "collective issued from a callback")
    # Many in flight at once, then waited on in reverse: issue order is kept.
    ts = [torch.full((8,), float(k + rank)) for k in range(20)]
    works = [dist.all_reduce(v, group=gs, async_op=True) for v in ts]
    for w in reversed(works):
        w.wait()
    for k, v in enumerate(ts):
        common.same(v, torch.full((8,), float(n * k + n * (n - 1) // 2)), f"in-flight call {k}")
    objs = [None] * n
    dist.all_gather_object(objs, {"rank": rank}, group=gs)
    assert objs == [{"rank": r} for r in range(n)], objs
    dist.barrier(group=gs)


def check_group(rank, n, gs, gloo, label):
    skipped = set()
    check_allreduce(rank, n, gs, gloo, skipped)
    check_coalesced(rank, n, gs, gloo)
    check_broadcast(rank, n, gs, gloo, skipped)
    check_allgather(rank, n, gs, gloo, skipped)
    check_reduce_scatter(rank, n, gs)
    check_reduce(rank, n, gs, gloo, skipped)
    check_gather_scatter(rank, n, gs, gloo, skipped)
    check_async(rank, n, gs)
    if rank == 0:
        print(f"ok: {label}: {gs.describe()}; not compared with Gloo (Gloo lacks them): "
              f"{', '.join(sorted(skipped)) or 'none'}", flush=True)


def ranks(rank, n):
    warnings.filterwarnings("ignore", message=".*all_reduce_coalesced will be deprecated")
    common.init_default("gloo", rank, n)
    gloo = dist.group.WORLD
    if common.under_mpirun():
        # One host: auto picks shm; mpi and two_level are forced to run here too.
        layouts = [("auto", None, "shm"), ("mpi", None, "mpi"), ("two_level", 1, "two_level")]
        if n % 2 == 0 and n > 2:
            layouts.append(("two_level", 2, "two_level"))
    else:
        layouts = [(None, None, "shm")]
    for transport, node_ranks, expect in layouts:
        gs = common.gradsync_group(transport, node_ranks)
        assert isinstance(gs, gradsync_torch.ProcessGroupGradsync), type(gs)
        assert gs.transport() == expect, (gs.transport(), expect)
        assert dist.get_backend(gs) == "gradsync", dist.get_backend(gs)
        check_group(rank, n, gs, gloo, f"{n} ranks, {transport or 'store'}")
    check_subgroups(rank, n)
    dist.destroy_process_group()


def check_subgroups(rank, n):
    """Groups of some ranks (new_group(ranks=...)): over shm through the store, also under
    mpirun (a sub-group is not MPI_COMM_WORLD); a group of one rank too."""
    members = [1, 2] if n >= 3 else [n - 1]
    sub = dist.new_group(ranks=members, backend="gradsync", timeout=common.TIMEOUT)
    solo = dist.new_group(ranks=[0], backend="gradsync", timeout=common.TIMEOUT)
    if rank in members:
        assert sub.transport() == "shm", sub.describe()
        t = torch.full((5,), float(rank))
        dist.all_reduce(t, group=sub)
        common.same(t, torch.full((5,), float(sum(members))), f"sub-group {members}")
        b = torch.full((3,), float(rank))
        dist.broadcast(b, src=members[-1], group=sub)  # a global rank, as torch takes it
        common.same(b, torch.full((3,), float(members[-1])), f"sub-group {members} broadcast")
    if rank == 0:
        t = torch.arange(4.0)
        dist.all_reduce(t, op=ReduceOp.AVG, group=solo)
        common.same(t, torch.arange(4.0), "a group of one rank")
        print(f"ok: sub-groups {members} and [0]", flush=True)


if __name__ == "__main__":
    common.run(ranks, __doc__)
