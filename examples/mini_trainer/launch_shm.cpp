// SPDX-License-Identifier: Apache-2.0
// --transport shm: ranks are processes of this host sharing one POSIX segment, forked
// after the data is loaded (fork_ranks.hpp); the parent is rank 0.
#include <unistd.h>

#include <exception>
#include <string>
#include <vector>

#include <gradsync/algo/direct.hpp>
#include <gradsync/transport/shm.hpp>

#include "config.hpp"
#include "dispatch.hpp"
#include "fork_ranks.hpp"
#include "launch.hpp"
#include "train.hpp"

namespace mini_trainer {

namespace {

/// One rank's whole run over shm; "final ..." or "error <what>".
std::string shm_rank(const run_context& ctx, std::size_t rank, const std::string& job) {
  try {
    gradsync::transport::shm_options o;
    o.rank = rank;
    o.size = ctx.cfg.ranks;
    o.job = job;
    // Room for the allreducer's arena (the MLP's gradients are under 1 MiB): fused
    // buckets placed there are read by the peers in place.
    o.heap_bytes = 16 << 20;
    gradsync::transport::shm t(o);
    return dispatch(t, ctx);
  } catch (const usage_error& e) {
    return std::string("usage ") + e.what();
  } catch (const std::exception& e) {
    return std::string("error ") + e.what();
  }
}

}  // namespace

std::vector<std::string> launch_shm(const run_context& ctx) {
  const std::string job = "mini_trainer-" + std::to_string(::getpid());
  return fork_ranks(ctx.cfg.ranks, [&](std::size_t r) { return shm_rank(ctx, r, job); });
}

}  // namespace mini_trainer
