# SPDX-License-Identifier: Apache-2.0
"""A rank SIGKILLed while the others wait in a collective: the survivors raise
GradsyncError (peer_lost, or timeout at the latest) within the group's deadline, and exit.
The ranks are started here with subprocess (mp.spawn would kill the survivors itself).

    test_kill.py [--ranks 3]
"""
import argparse
import datetime
import os
import signal
import subprocess
import sys
import time

DEADLINE = 20.0  # the group's timeout, seconds


def rank_main(rank, n):
    import torch
    import torch.distributed as dist

    import gradsync_torch

    dist.init_process_group("gradsync", rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=DEADLINE))
    x = torch.ones(1 << 16)
    for _ in range(3):
        dist.all_reduce(x)
    dist.barrier()
    if rank == n - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        for _ in range(100):  # the victim dies before or during the first of these
            dist.all_reduce(x)
    except gradsync_torch.GradsyncError as e:
        print(f"RAISED rank {rank} after {time.monotonic() - start:.2f} s code={e.code}: {e}",
              flush=True)
        sys.exit(0)
    print(f"rank {rank}: no error", flush=True)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ranks", type=int, default=3)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.rank is not None:
        return rank_main(a.rank, a.ranks)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import common

    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(common.free_port()),
               OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, __file__, "--ranks", str(a.ranks), "--rank", str(r)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(a.ranks)]
    start = time.monotonic()
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(1.0, 90 - (time.monotonic() - start)))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            sys.exit(f"FAIL: a rank was still running after 90 s")
        outs.append(out)
    ok = procs[-1].returncode == -signal.SIGKILL
    for r, (p, out) in enumerate(zip(procs[:-1], outs[:-1])):
        line = next((l for l in out.splitlines() if l.startswith("RAISED")), None)
        if p.returncode != 0 or line is None:
            print(f"rank {r}: exit status {p.returncode}, output:\n{out}")
            ok = False
            continue
        took = float(line.split(" after ")[1].split(" s ")[0])
        code = line.split("code=")[1].split(":")[0]
        print(line[:400])
        if took > DEADLINE + 2 or code not in ("peer_lost", "timeout"):
            print(f"rank {r}: raised {code} after {took:.1f} s (deadline {DEADLINE} s)")
            ok = False
    if not ok:
        sys.exit(f"FAIL (the victim's status: {procs[-1].returncode})")
    print(f"PASS ({time.monotonic() - start:.1f} s)")


if __name__ == "__main__":
    main()
