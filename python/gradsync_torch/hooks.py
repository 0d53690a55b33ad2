# SPDX-License-Identifier: Apache-2.0
"""DDP communication hooks that send each bucket through gradsync's compression.

    ddp.register_comm_hook(None, gradsync_torch.hooks.int8)   # or hooks.topk, hooks.exact

int8: compress::error_feedback<compress::int8<>>: one byte per gradient plus a scale per
256, on scales agreed across ranks so the codes add exactly (docs/compression.md).
topk: compress::error_feedback<compress::topk<10>>: the 1 % largest values and their
indices, allgathered. Both keep what they drop in a residual per DDP bucket, added to the
bucket's next step (a bucket whose size changes, as after DDP's first-iteration rebuild,
starts afresh). Float32 buckets are compressed; other dtypes are averaged uncompressed.
exact: compress::exact<> (reproducible sums, not lossy beyond the average's rounding):
each gradient becomes a 64-bit integer code on a power of two agreed per block of 256,
the blocks starting at each parameter, so the average has the same bits whatever DDP's
bucket_cap_mb, the order buckets fill in, gradsync's algorithm, transport or placement
(docs/reproducibility.md). Twice the bytes of float32 on the wire. Float32 buckets only.

The state argument is the gradsync process group to use, or None for the default group.
The future holds the bucket averaged over the ranks, as DDP's default hook does.
"""
import torch.distributed as dist

from ._C import ProcessGroupGradsync


def _group(state):
    pg = state
    if pg is None:
        pg = dist.distributed_c10d._get_default_group()
    elif not isinstance(pg, ProcessGroupGradsync) and hasattr(pg, "process_group"):
        pg = pg.process_group
    if not isinstance(pg, ProcessGroupGradsync):
        raise TypeError(
            "gradsync_torch.hooks need a process group of backend 'gradsync': pass it as the "
            "hook's state (ddp.register_comm_hook(group, hooks.int8)), or None when the "
            f"default group is gradsync's; got {type(pg).__name__}")
    return pg


def _compressed(codec, state, bucket, tensors=()):
    work = _group(state)._compressed_average(bucket.buffer(), codec, bucket.index(), list(tensors))
    return work.get_future().then(lambda fut: fut.value()[0])


def int8(state, bucket):
    """Averages the bucket through gradsync's error_feedback<int8<>>."""
    return _compressed("int8", state, bucket)


def topk(state, bucket):
    """Averages the bucket through gradsync's error_feedback<topk<10>> (1 % of the values)."""
    return _compressed("topk", state, bucket)


def exact(state, bucket):
    """Averages the bucket through gradsync's exact<> codes, blocks aligned to each
    parameter: the same bits for any bucket size and algorithm."""
    return _compressed("exact", state, bucket, [g.numel() for g in bucket.gradients()])
