// SPDX-License-Identifier: Apache-2.0
// torch_trainer: data-parallel training of a libtorch model with gradsync.
//   build/examples/torch_trainer/torch_trainer --ranks 4                      (threads)
//   build/examples/torch_trainer/torch_trainer --transport shm --ranks 2 --model transformer
//   mpirun -n 2 build/examples/torch_trainer/torch_trainer_openmpi --transport mpi
//   mpirun -n 4 build/examples/torch_trainer/torch_trainer_openmpi --transport two_level
//   ... --sync per-parameter   (libtorch's distributed example: one blocking allreduce per
//                               parameter after backward; the baseline overlap is measured
//                               against)
// Built with TORCH_TRAINER_MPI (torch_trainer_openmpi) it offers --transport mpi and
// two_level; without it, local and shm. See docs/torch.md.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <gradsync/gradsync.hpp>

#include "config.hpp"
#include "launch.hpp"
#include "model.hpp"
#include "train.hpp"

#ifdef TORCH_TRAINER_MPI
#include <mpi.h>

#include <gradsync/transport/mpi/exit.hpp>
#endif

namespace tt = torch_trainer;

namespace {

/// Checks that the ranks of this process agree and prints the final line.
int report(const tt::config& cfg, const std::vector<std::string>& finals) {
  for (std::size_t i = 1; i < finals.size(); ++i) {
    if (finals[i] != finals[0]) {
      throw std::runtime_error("rank " + std::to_string(i) + " ended with '" + finals[i] +
                               "' but rank 0 with '" + finals[0] + "'");
    }
  }
  if (!cfg.quiet && finals.size() > 1) {
    std::printf("all %zu ranks hold identical weights\n", finals.size());
  }
  std::printf("%s\n", finals[0].c_str());
  std::fflush(stdout);
  return 0;
}

#ifdef TORCH_TRAINER_MPI
int run_mpi(const tt::config& cfg, const tt::task& job) {
  int world = 0, me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  if (cfg.ranks != 1 && cfg.ranks != static_cast<std::size_t>(world)) {
    throw tt::usage_error("--ranks " + std::to_string(cfg.ranks) + " but mpirun started " +
                          std::to_string(world) + " processes (omit --ranks under mpirun)");
  }
  const std::vector<torch::Tensor> init = tt::initial_params(job, cfg.seed);
  const tt::run_context ctx{cfg, job, init};
  if (cfg.transport == "mpi") {
    gradsync::transport::mpi t{MPI_COMM_WORLD};
    return report(cfg, {tt::train_mpi(t, ctx)});
  }
  if (cfg.node_ranks && world % static_cast<int>(cfg.node_ranks)) {
    throw tt::usage_error("--node-ranks " + std::to_string(cfg.node_ranks) +
                          " does not divide the " + std::to_string(world) + " processes");
  }
  const int color = cfg.node_ranks ? me / static_cast<int>(cfg.node_ranks) : -1;
  tt::two_level_shm_mpi t = gradsync::transport::two_level_from_mpi(MPI_COMM_WORLD, {}, color);
  if (!cfg.quiet && t.rank() == 0) {
    std::printf("two_level: %zu node(s) of %zu rank(s)\n", t.inter().size(), t.intra().size());
  }
  return report(cfg, {tt::train_two_level(t, ctx)});
}
#endif

int run(const tt::config& cfg) {
#ifdef TORCH_TRAINER_MPI
  const bool mine = cfg.transport == "mpi" || cfg.transport == "two_level";
  const char* have = "mpi, two_level (local and shm are in the plain torch_trainer executable)";
#else
  const bool mine = cfg.transport == "local" || cfg.transport == "shm";
  const char* have = "local, shm (mpi and two_level are in torch_trainer_openmpi)";
#endif
  if (!mine) {
    throw tt::usage_error("--transport " + cfg.transport +
                          " is not available in this executable; it has: " + have);
  }
  const auto job = tt::make_task(cfg);  // loaded once; forked ranks share it
#ifdef TORCH_TRAINER_MPI
  return run_mpi(cfg, *job);
#else
  if (cfg.transport == "shm") return report(cfg, tt::launch_shm(cfg, *job));
  const std::vector<torch::Tensor> init = tt::initial_params(*job, cfg.seed);
  return report(cfg, tt::launch_local(tt::run_context{cfg, *job, init}));
#endif
}

}  // namespace

int main(int argc, char** argv) {
#ifdef TORCH_TRAINER_MPI
  // SERIALIZED is what the allreducer's progress thread needs; ask for more.
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  auto fail = [](int code) -> int { gradsync::transport::abort_job(MPI_COMM_WORLD, code); };
#else
  auto fail = [](int code) { return code; };
#endif
  int rc = 0;
  try {
    const tt::config cfg = tt::parse_args(argc, argv);
    if (cfg.help) {
      std::fputs(tt::usage_text().c_str(), stdout);
    } else if (cfg.version) {
      std::printf("torch_trainer (gradsync %s)\n", GRADSYNC_VERSION_STRING);
    } else {
      // Ranks are the parallelism: each runs torch's kernels on --threads threads.
      if (cfg.transport != "shm") torch::set_num_threads(static_cast<int>(cfg.threads));
      rc = run(cfg);
    }
  } catch (const tt::usage_error& e) {
    std::fprintf(stderr, "torch_trainer: error: %s\n", e.what());
    return fail(2);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "torch_trainer: error: %s\n", e.what());
    return fail(1);
  }
#ifdef TORCH_TRAINER_MPI
  rc = gradsync::transport::finalize_job(rc);
#endif
  return rc;
}
