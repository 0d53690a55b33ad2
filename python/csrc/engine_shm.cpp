// SPDX-License-Identifier: Apache-2.0
// The engine over transport::shm (one host; torchrun, mp.spawn, or mpirun on one host).
#include <string>

#include "engine_impl.hpp"
#include "engines.hpp"

namespace gradsync_torch {

std::unique_ptr<engine> make_engine(gradsync::transport::shm t) {
  std::string shape = std::to_string(t.size()) + " ranks on one host";
  return std::make_unique<engine_impl<gradsync::transport::shm, gradsync::algo::auto_select>>(
      std::move(t), "shm", std::move(shape));
}

}  // namespace gradsync_torch
