// SPDX-License-Identifier: Apache-2.0
// The launchers: each trains on the ranks of one transport and returns the final line
// of every rank it ran. Each lives in its own translation unit, so that the
// instantiations of the training loop for different transports compile in parallel.
#pragma once

#include <string>
#include <vector>

#include "train.hpp"

namespace mini_trainer {

/// --transport local: ctx.cfg.ranks threads of this process.
std::vector<std::string> launch_local(const run_context& ctx);

/// --transport shm: ctx.cfg.ranks processes (this one is rank 0, the rest are forked).
std::vector<std::string> launch_shm(const run_context& ctx);

}  // namespace mini_trainer

#ifdef MINI_TRAINER_MPI
#include <gradsync/transport/mpi.hpp>
#include <gradsync/transport/two_level/from_mpi.hpp>

namespace mini_trainer {
/// --transport mpi: this process is rank t.rank() of MPI_COMM_WORLD.
std::string train_mpi(gradsync::transport::mpi& t, const run_context& ctx);
/// --transport two_level: shm inside the node, mpi across nodes (algo::hierarchical).
using two_level_shm_mpi =
    gradsync::transport::two_level<gradsync::transport::shm, gradsync::transport::mpi>;
std::string train_two_level(two_level_shm_mpi& t, const run_context& ctx);
}  // namespace mini_trainer
#endif
