# SPDX-License-Identifier: Apache-2.0
"""The gradsync backend under torchrun (`python -m torch.distributed.run --standalone`), the
launcher docs/torch.md names first: env:// from torchrun's variables, shm on one host, a
few collectives with exact results and DDP steps whose replicas end bit-identical.

Debian 12's torchrun (torch 1.13 on Python 3.11) fails before starting any worker with
"AttributeError: 'NoneType' object has no attribute 'get'" unless --redirects and --tee
name a stream (Python 3.11 no longer lists the zero flag Std.NONE): this test passes
`--redirects 1 --tee 1`, as docs/torch.md tells users to.

    test_torchrun.py --ranks 2      # starts torchrun, which starts the ranks
"""
import argparse
import datetime
import os
import subprocess
import sys
import time

WORKER = "--worker"


def worker():
    import torch
    import torch.distributed as dist

    import common
    import gradsync_torch

    torch.set_num_threads(1)
    dist.init_process_group("gradsync", timeout=datetime.timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()
    assert rank == int(os.environ["RANK"]) and n == int(os.environ["WORLD_SIZE"])
    pg = dist.distributed_c10d._get_default_group()
    assert isinstance(pg, gradsync_torch.ProcessGroupGradsync), type(pg)
    assert pg.transport() == "shm", pg.describe()
    t = torch.full((7,), float(rank + 1))
    dist.all_reduce(t)
    common.same(t, torch.full((7,), float(n * (n + 1) // 2)), "all_reduce")
    x = torch.full((3,), float(rank))
    dist.reduce(x, dst=n - 1)
    want = float(n * (n - 1) // 2) if rank == n - 1 else float(rank)
    common.same(x, torch.full((3,), want), "reduce")
    # DDP: the ranks start from rank 0's weights and take the same averaged steps.
    torch.manual_seed(rank)  # different initial weights: DDP's broadcast must fix them
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for step in range(3):
        g = torch.Generator().manual_seed(100 * step + rank)
        loss = ddp(torch.randn(5, 8, generator=g)).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    hashes = [None] * n
    dist.all_gather_object(hashes, common.weights_hash(model))
    assert len(set(hashes)) == 1, f"replicas differ after 3 DDP steps: {hashes}"
    dist.destroy_process_group()
    print(f"ok rank {rank} of {n}: weights {hashes[0][:16]}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args()
    start = time.monotonic()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={a.ranks}", "--redirects", "1", "--tee", "1", __file__, WORKER]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout,
                           env=dict(os.environ, OMP_NUM_THREADS="1"))
    except subprocess.TimeoutExpired as e:
        sys.exit(f"FAIL: torchrun still running after {a.timeout} s\n{e.stdout}\n{e.stderr}")
    out = r.stdout + r.stderr
    missing = [k for k in range(a.ranks) if f"ok rank {k} of {a.ranks}:" not in out]
    if r.returncode != 0 or missing:
        sys.exit(f"FAIL: torchrun exited {r.returncode}; ranks {missing} did not finish\n"
                 f"{' '.join(cmd)}\n{out[-4000:]}")
    print("\n".join(line for line in out.splitlines() if "ok rank" in line))
    print(f"PASS ({time.monotonic() - start:.1f} s)", flush=True)


if __name__ == "__main__":
    if WORKER in sys.argv:
        worker()
    else:
        main()
