// SPDX-License-Identifier: Apache-2.0
// --transport two_level: the training loop instantiated for two_level<shm, mpi>.
#include <string>

#include <gradsync/transport/two_level/from_mpi.hpp>

#include "dispatch.hpp"
#include "launch.hpp"

namespace torch_trainer {

std::string train_two_level(two_level_shm_mpi& t, const run_context& ctx) {
  return dispatch(t, ctx);
}

}  // namespace torch_trainer
