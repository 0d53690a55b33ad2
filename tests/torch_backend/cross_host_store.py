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

try:
    dist.init_process_group("gradsync", timeout=datetime.timedelta(seconds=60))
except gradsync_torch.GradsyncError as e:
    assert e.code == "invalid_argument", e.code
    assert "mpirun" in str(e) and "one host" in str(e), str(e)
    print(f"ok: rank {rank} refused: {e}", flush=True)
else:
    raise SystemExit(f"rank {rank}: a store-launched group across hosts was not refused")
