// SPDX-License-Identifier: Apache-2.0
// The engine over transport::mpi (one rank per host, or GRADSYNC_TORCH_TRANSPORT=mpi).
#include <string>

#include "engine_impl.hpp"
#include "engines.hpp"

namespace gradsync_torch {

std::unique_ptr<engine> make_engine(gradsync::transport::mpi t) {
  std::string shape = std::to_string(t.size()) + " ranks" +
                      (t.crosses_network() ? " across hosts" : " on one host");
  return std::make_unique<engine_impl<gradsync::transport::mpi, gradsync::algo::auto_select>>(
      std::move(t), "mpi", std::move(shape));
}

}  // namespace gradsync_torch
