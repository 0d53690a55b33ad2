// SPDX-License-Identifier: Apache-2.0
// --transport local: ranks are threads of this process (gradsync::transport::run_local),
// each with its own model; torch's autograd runs each thread's backward on that thread.
#include <string>
#include <vector>

#include <gradsync/gradsync.hpp>

#include "dispatch.hpp"
#include "launch.hpp"

namespace torch_trainer {

std::vector<std::string> launch_local(const run_context& ctx) {
  std::vector<std::string> finals(ctx.cfg.ranks);
  gradsync::transport::run_local(
      ctx.cfg.ranks, [&](gradsync::transport::local& t) { finals[t.rank()] = dispatch(t, ctx); });
  return finals;
}

}  // namespace torch_trainer
