// SPDX-License-Identifier: Apache-2.0
// --transport local: ranks are threads of this process (gradsync::transport::run_local).
#include <string>
#include <vector>

#include <gradsync/gradsync.hpp>

#include "dispatch.hpp"
#include "launch.hpp"

namespace mini_trainer {

std::vector<std::string> launch_local(const run_context& ctx) {
  std::vector<std::string> finals(ctx.cfg.ranks);
  gradsync::transport::run_local(
      ctx.cfg.ranks, [&](gradsync::transport::local& t) { finals[t.rank()] = dispatch(t, ctx); });
  return finals;
}

}  // namespace mini_trainer
