// SPDX-License-Identifier: Apache-2.0
// The engine over two_level<shm, mpi>: shm inside each host, mpi across hosts.
#include <string>

#include "engine_impl.hpp"
#include "engines.hpp"

namespace gradsync_torch {

std::unique_ptr<engine> make_engine(
    gradsync::transport::two_level<gradsync::transport::shm, gradsync::transport::mpi> t) {
  std::string shape =
      std::to_string(t.inter().size()) + " nodes x " + std::to_string(t.intra().size()) + " ranks";
  using two_level =
      gradsync::transport::two_level<gradsync::transport::shm, gradsync::transport::mpi>;
  return std::make_unique<engine_impl<two_level, gradsync::algo::hierarchical<>>>(
      std::move(t), "two_level", std::move(shape));
}

}  // namespace gradsync_torch
