# SPDX-License-Identifier: Apache-2.0
"""DDP with backend="gradsync" across simulated hosts (cluster_ddp.sh runs it under
Open MPI's mpirun in scripts/vcluster): the exact model's final weights equal a
one-process run's, a float model trains (plain and with gradsync's int8 hook), and every
replica ends identical.

    MASTER_ADDR=<rank 0's host> MASTER_PORT=... mpirun ... python ddp_cluster.py --expect two_level
"""
import argparse
import datetime

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import common
import gradsync_torch
import test_ddp


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--expect", required=True, help="the transport auto must pick")
    a = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gradsync", timeout=datetime.timedelta(seconds=90))
    rank, n = dist.get_rank(), dist.get_world_size()
    pg = dist.distributed_c10d._get_default_group()
    assert pg.transport() == a.expect, f"rank {rank}: {pg.describe()}, expected {a.expect}"

    steps = 3
    exact = test_ddp.train_exact(DDP(test_ddp.exact_model()), rank, steps).module
    ref = test_ddp.exact_model()
    opt = torch.optim.SGD(ref.parameters(), lr=1 / 8)
    for step in range(steps):
        opt.zero_grad()
        sum((ref(test_ddp.exact_batch(r, step)) * test_ddp.coeff(r, step)).sum()
            for r in range(n)).div(n).backward()
        opt.step()
    for (name, p), q in zip(exact.named_parameters(), ref.parameters()):
        common.same(p.detach(), q.detach(), f"rank {rank}: exact DDP {name} against one process")

    lines = []
    for hook in (None, gradsync_torch.hooks.int8):
        ddp = DDP(test_ddp.float_model(7), bucket_cap_mb=0.01)
        if hook:
            ddp.register_comm_hook(None, hook)
        losses = test_ddp.train_float(ddp, rank, 40)
        first, last = test_ddp.mean_loss(losses, None)  # the same verdict on every rank
        assert last < 0.5 * first, f"rank {rank}: loss {first:.4f} -> {last:.4f}"
        h = common.replicas_identical(ddp.module, None, f"DDP {hook.__name__ if hook else 'plain'}")
        lines.append(f"{hook.__name__ if hook else 'plain'}: loss {first:.4f} -> {last:.4f}, "
                     f"weights {h}")
    if rank == 0:
        print(f"ok: {n} ranks over {pg.describe()}: exact DDP == one process; "
              + "; ".join(lines) + "; replicas identical", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
