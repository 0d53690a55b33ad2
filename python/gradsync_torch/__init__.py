# SPDX-License-Identifier: Apache-2.0
"""The "gradsync" backend of torch.distributed.

    import gradsync_torch                     # registers the backend
    dist.init_process_group("gradsync")       # torchrun / mp.spawn: one host, shared memory
                                              # mpirun / srun --mpi=pmix: MPI across hosts
    ddp.register_comm_hook(None, gradsync_torch.hooks.int8)   # optional compression

Every collective runs with the group's timeout as gradsync's deadline; gradsync's
errors (timeout, mismatch, peer_lost, ...) raise GradsyncError, a RuntimeError whose
`code` names the kind. See docs/torch.md.
"""
import atexit
import os

import torch.distributed as dist


def _launcher_env():
    """env:// needs RANK and WORLD_SIZE; under Open MPI's mpirun or srun --mpi=pmix they are
    taken from the launcher where unset (MASTER_ADDR and MASTER_PORT stay the user's)."""
    env = os.environ
    if "OMPI_COMM_WORLD_SIZE" in env:
        env.setdefault("RANK", env["OMPI_COMM_WORLD_RANK"])
        env.setdefault("WORLD_SIZE", env["OMPI_COMM_WORLD_SIZE"])
        env.setdefault("LOCAL_RANK", env.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"))
    elif "PMIX_RANK" in env and "SLURM_STEP_ID" in env and "SLURM_PROCID" in env:
        env.setdefault("RANK", env["SLURM_PROCID"])
        env.setdefault("WORLD_SIZE", env.get("SLURM_STEP_NUM_TASKS", env.get("SLURM_NTASKS", "1")))
        env.setdefault("LOCAL_RANK", env.get("SLURM_LOCALID", "0"))


_launcher_env()

from . import _C  # noqa: E402  (after torch.distributed: its types are our base classes)
from ._C import GradsyncError, ProcessGroupGradsync  # noqa: E402

BACKEND = "gradsync"


def _create(store, rank, size, timeout):
    """Backend.register_backend's creator: called by init_process_group and new_group."""
    return ProcessGroupGradsync(store, rank, size, timeout)


if BACKEND.upper() not in dist.Backend._plugins:
    dist.Backend.register_backend(BACKEND, _create)

# Every group is closed before the interpreter ends, and MPI after them (if started here).
atexit.register(_C._at_exit)

from . import exact, hooks  # noqa: E402

__all__ = ["BACKEND", "GradsyncError", "ProcessGroupGradsync", "exact", "hooks"]
