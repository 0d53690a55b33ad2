// SPDX-License-Identifier: Apache-2.0
// --transport mpi: the training loop instantiated for gradsync::transport::mpi.
#include <string>

#include <gradsync/transport/mpi.hpp>

#include "dispatch.hpp"
#include "launch.hpp"

namespace torch_trainer {

std::string train_mpi(gradsync::transport::mpi& t, const run_context& ctx) {
  return dispatch(t, ctx);
}

}  // namespace torch_trainer
