# SPDX-License-Identifier: Apache-2.0
"""The end of an mpirun job whose default group is "gradsync": the ranks meet in
gradsync's end-of-job barrier (Python's atexit, then MPI_Finalize), and a rank still
tearing down is waited for as long as the group's timeout, not a fixed 10 s.
  - late:   rank 1 holds its teardown 3 s, the group's timeout is 8 s: rank 0 waits for
            it and the job exits 0.
  - absent: rank 1 holds its teardown 20 s, the group's timeout is 2 s: rank 0 ends the job
            after 2 s, saying that not every rank reached its end within 2000 ms.
The driver starts mpirun itself, to read rank 0's messages and the job's status.

    test_end_of_job.py -- MPIRUN_ARGS...   (Open MPI's mpirun.openmpi is run with them)
"""
import os
import socket
import subprocess
import sys
import time


def rank_main(timeout_s, hold_s):
    import atexit
    import datetime

    import torch
    import torch.distributed as dist

    import gradsync_torch  # noqa: F401  registers "gradsync"; sets RANK and WORLD_SIZE

    # The rendezvous gets a store of its own with a long timeout: env:// would connect with
    # the group's timeout (2 s in "absent"), which a loaded machine's torch import exceeds.
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), size,
                          rank == 0, timeout=datetime.timedelta(seconds=60))
    dist.init_process_group("gradsync", store=store, rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=timeout_s))
    x = torch.ones(8)
    dist.all_reduce(x)
    assert x.tolist() == [float(dist.get_world_size())] * 8, x
    dist.destroy_process_group()
    if rank == 1:
        # Registered after gradsync_torch's, so it runs first (atexit is last in, first
        # out): like a framework whose own teardown takes long.
        atexit.register(time.sleep, hold_s)
    print(f"rank {rank} done", flush=True)


def run_job(mpirun, timeout_s, hold_s):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = ["mpirun.openmpi", *mpirun, "-n", "2", "-x", "MASTER_ADDR=127.0.0.1",
           "-x", f"MASTER_PORT={port}", "-x", "PYTHONDONTWRITEBYTECODE",
           sys.executable, os.path.abspath(__file__), "--rank", str(timeout_s), str(hold_s)]
    start = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=90)
    return p.returncode, p.stdout, time.monotonic() - start


def fail(what, out):
    print(out)
    sys.exit(f"FAIL: {what}")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--rank":
        rank_main(float(sys.argv[2]), float(sys.argv[3]))
        return
    mpirun = sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else []

    rc, out, took = run_job(mpirun, timeout_s=8, hold_s=3)
    if rc != 0:
        fail(f"late: the job exited {rc}, expected 0 (rank 1 was 3 s late, the timeout 8 s)", out)
    if out.count(" done") != 2 or "not every rank" in out:
        fail("late: not both ranks done, or a rank gave up waiting", out)
    if took < 3:
        fail(f"late: the job took {took:.1f} s, less than rank 1's 3 s teardown", out)
    print(f"ok late: rank 1 was 3 s late, the job exited 0 after {took:.1f} s", flush=True)

    rc, out, took = run_job(mpirun, timeout_s=2, hold_s=20)
    want = ("[gradsync] rank 0: not every rank reached the end of the job within 2000 ms "
            "(MPI_Barrier before MPI_Finalize); exiting with status 0")
    if want not in out:
        fail(f"absent: rank 0 did not say {want!r}", out)
    if rc == 0:
        fail("absent: the job exited 0 although rank 0 ended without MPI_Finalize", out)
    if took > 15:
        fail(f"absent: the job took {took:.1f} s, so rank 0 waited for rank 1", out)
    print(f"ok absent: rank 0 gave up after the group's 2 s timeout; the job ended after "
          f"{took:.1f} s with status {rc}", flush=True)
    print("PASS", flush=True)


if __name__ == "__main__":
    main()
