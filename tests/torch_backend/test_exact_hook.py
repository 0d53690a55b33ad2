# SPDX-License-Identifier: Apache-2.0
"""gradsync's exact DDP hook alone (test_ddp.py's check_exact_hook), for a rank count
where DDP's default average differs between transports: under mpirun -n 3 the default
hook's gradients over shm (direct algorithms, ranks summed in order) and over mpi (other
algorithms) differ in their last bits, and the exact hook's must not.

    mpirun -n 3 python test_exact_hook.py
"""
import torch.distributed as dist

import common
import test_ddp


def ranks(rank, n):
    common.init_default("gloo", rank, n)
    test_ddp.check_exact_hook(rank, n, common.gradsync_group(), dist.group.WORLD)
    dist.destroy_process_group()


if __name__ == "__main__":
    common.run(ranks, __doc__)
