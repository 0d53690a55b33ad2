// SPDX-License-Identifier: Apache-2.0
// torch_trainer's launchers, one translation unit each so that the training loop's
// instantiations for different transports compile in parallel. Each returns the final
// line of every rank it ran.
#pragma once

#include <string>
#include <vector>

#include "train.hpp"

namespace torch_trainer {

/// --transport local: cfg.ranks threads of this process.
std::vector<std::string> launch_local(const run_context& ctx);
/// --transport shm: cfg.ranks processes of this host (this one and forked ones).
std::vector<std::string> launch_shm(const config& cfg, const task& job);

}  // namespace torch_trainer

#ifdef TORCH_TRAINER_MPI
#include <gradsync/transport/mpi.hpp>
#include <gradsync/transport/two_level/from_mpi.hpp>

namespace torch_trainer {
/// --transport mpi: this process is rank t.rank() of MPI_COMM_WORLD.
std::string train_mpi(gradsync::transport::mpi& t, const run_context& ctx);
/// --transport two_level: shm inside a node, mpi across nodes (algo::hierarchical).
using two_level_shm_mpi =
    gradsync::transport::two_level<gradsync::transport::shm, gradsync::transport::mpi>;
std::string train_two_level(two_level_shm_mpi& t, const run_context& ctx);
}  // namespace torch_trainer
#endif
