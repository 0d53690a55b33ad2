// SPDX-License-Identifier: Apache-2.0
// --transport shm: ranks are processes of this host over one POSIX segment, forked after
// the data is loaded (the mini-trainer's fork_ranks). Each process draws the starting
// weights itself (the same seed), so nothing of torch runs before the fork.
#include <unistd.h>

#include <exception>
#include <string>
#include <vector>

#include <gradsync/algo/direct.hpp>
#include <gradsync/transport/shm.hpp>

#include "../mini_trainer/fork_ranks.hpp"
#include "dispatch.hpp"
#include "launch.hpp"

namespace torch_trainer {

std::vector<std::string> launch_shm(const config& cfg, const task& job) {
  const std::string id = "torch_trainer-" + std::to_string(::getpid());
  return mini_trainer::fork_ranks(cfg.ranks, [&](std::size_t rank) -> std::string {
    try {
      torch::set_num_threads(static_cast<int>(cfg.threads));
      const std::vector<torch::Tensor> init = initial_params(job, cfg.seed);
      gradsync::transport::shm_options o;
      o.rank = rank;
      o.size = cfg.ranks;
      o.job = id;
      // Room for the arena (the transformer's gradients are 10 MB): buckets placed in
      // the segment's heap are read by the peers in place.
      o.heap_bytes = 64 << 20;
      gradsync::transport::shm t(o);
      return dispatch(t, run_context{cfg, job, init});
    } catch (const usage_error& e) {
      return std::string("usage ") + e.what();
    } catch (const std::exception& e) {
      return std::string("error ") + e.what();
    }
  });
}

}  // namespace torch_trainer
