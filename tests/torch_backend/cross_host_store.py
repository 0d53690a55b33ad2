# SPDX-License-Identifier: Apache-2.0
"""Started by mpirun across simulated hosts but told it was not (Open MPI's variables
removed), the backend takes the store path (torchrun's): every rank must refuse the
group with a message that says to launch with mpirun or srun (cluster_ddp.sh runs it)."""
import datetime
import os

rank, size = os.environ["OMPI_COMM_WORLD_RANK"], os.environ["OMPI_COMM_WORLD_SIZE"]
del os.environ["OMPI_COMM_WORLD_SIZE"]  # as under torchrun: no MPI launcher in sight
os.environ.update(RANK=rank, WORLD_SIZE=size)

import torch.distributed as dist  # noqa: E402

import gradsync_torch  # noqa: E402

# Rank 0 hosts the group's store: leaving as soon as it has refused would cut the other
# ranks off mid-read ("Broken pipe" instead of their own refusal). A second store keeps
# rank 0 until every rank has refused.
timeout = datetime.timedelta(seconds=60)
done = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]) + 1, int(size),
                     rank == "0", timeout)
try:
    dist.init_process_group("gradsync", timeout=timeout)
except gradsync_torch.GradsyncError as e:
    assert e.code == "invalid_argument", e.code
    assert "mpirun" in str(e) and "one host" in str(e), str(e)
    print(f"ok: rank {rank} refused: {e}", flush=True)
else:
    raise SystemExit(f"rank {rank}: a store-launched group across hosts was not refused")
if rank == "0":
    done.wait([f"refused {r}" for r in range(1, int(size))])
else:
    done.set(f"refused {rank}", "1")
