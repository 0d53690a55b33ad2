// SPDX-License-Identifier: Apache-2.0
// mini_trainer: data-parallel training of an MLP on Fashion-MNIST with gradsync.
//   build/examples/mini_trainer/mini_trainer --ranks 4 --epochs 2            (threads)
//   build/examples/mini_trainer/mini_trainer --transport shm --ranks 2       (processes)
//   mpirun -n 2 build/examples/mini_trainer/mini_trainer_openmpi --transport mpi
//   mpirun -n 4 build/examples/mini_trainer/mini_trainer_openmpi --transport two_level
//       --algo hierarchical [--node-ranks 2]    (shm inside each node, mpi across)
// Built with MINI_TRAINER_MPI (the mini_trainer_<flavour> executables) it offers
// --transport mpi and two_level; without it, local and shm. See docs/tutorial.md.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include <cblas.h>

#include <gradsync/gradsync.hpp>

#include "checkpoint.hpp"
#include "config.hpp"
#include "data.hpp"
#include "launch.hpp"
#include "model.hpp"
#include "train.hpp"

#ifdef MINI_TRAINER_MPI
#include <mpi.h>

#include <gradsync/transport/mpi/exit.hpp>
#endif

namespace mt = mini_trainer;

namespace {

/// Loads the data and the starting state (once per process), runs `launch` (which
/// trains on every rank of this process and returns their final lines), checks that
/// they agree and prints the final line.
template <class Launch>
int run(const mt::config& cfg, std::size_t ranks, bool print_final, Launch&& launch) {
  mt::mlp_shape shape;
  shape.dims.push_back(784);
  for (auto h : cfg.hidden) shape.dims.push_back(h);
  shape.dims.push_back(10);
  if (!cfg.checkpoint_dir.empty()) mt::check_checkpoint_dir(cfg.checkpoint_dir, cfg.resume);
  const mt::dataset train = mt::load_split(cfg.data_dir, "train", cfg.limit);
  const mt::dataset test = mt::load_split(cfg.data_dir, "t10k", cfg.limit);
  std::string from;
  const mt::train_state start = mt::initial_state(cfg, shape, ranks, from);
  const mt::run_context ctx{cfg, train, test, shape, start, from};
  const std::vector<std::string> finals = launch(ctx);
  for (std::size_t i = 1; i < finals.size(); ++i) {
    if (finals[i] != finals[0]) {
      throw mt::replica_error("rank " + std::to_string(i) + " ended with '" + finals[i] +
                              "' but rank 0 with '" + finals[0] + "'");
    }
  }
  if (print_final) {
    if (!cfg.quiet && finals.size() > 1) {
      std::printf("all %zu ranks hold identical weights\n", finals.size());
    }
    std::printf("%s\n", finals[0].c_str());
    std::fflush(stdout);
  }
  return 0;
}

#ifdef MINI_TRAINER_MPI
/// One process per rank; every rank prints its own final line (they must be identical).
int run_mpi(const mt::config& cfg) {
  gradsync::transport::mpi t{MPI_COMM_WORLD};
  if (cfg.ranks != 1 && cfg.ranks != t.size()) {
    throw mt::usage_error("--ranks " + std::to_string(cfg.ranks) + " but mpirun started " +
                          std::to_string(t.size()) + " processes (omit --ranks with mpi)");
  }
  mt::config c = cfg;
  c.ranks = t.size();
  return run(c, t.size(), true, [&](const mt::run_context& ctx) {
    return std::vector<std::string>{mt::train_mpi(t, ctx)};
  });
}

/// Two levels: nodes are the hosts (shared-memory domains) or, with --node-ranks K,
/// groups of K consecutive ranks; shm inside a node, mpi across nodes.
int run_two_level(const mt::config& cfg) {
  int world = 0, me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  if (cfg.ranks != 1 && cfg.ranks != static_cast<std::size_t>(world)) {
    throw mt::usage_error("--ranks " + std::to_string(cfg.ranks) + " but mpirun started " +
                          std::to_string(world) + " processes (omit --ranks with two_level)");
  }
  if (cfg.node_ranks && world % static_cast<int>(cfg.node_ranks)) {
    throw mt::usage_error("--node-ranks " + std::to_string(cfg.node_ranks) +
                          " does not divide the " + std::to_string(world) + " processes");
  }
  const int color = cfg.node_ranks ? me / static_cast<int>(cfg.node_ranks) : -1;
  mt::two_level_shm_mpi t = gradsync::transport::two_level_from_mpi(MPI_COMM_WORLD, {}, color);
  mt::config c = cfg;
  c.ranks = t.size();
  if (!cfg.quiet && t.rank() == 0) {
    std::printf("two_level: %zu node(s) of %zu rank(s)\n", t.inter().size(), t.intra().size());
  }
  return run(c, t.size(), true, [&](const mt::run_context& ctx) {
    return std::vector<std::string>{mt::train_two_level(t, ctx)};
  });
}
#endif

int dispatch_transport(const mt::config& cfg) {
#ifdef MINI_TRAINER_MPI
  if (cfg.transport == "mpi") return run_mpi(cfg);
  if (cfg.transport == "two_level") return run_two_level(cfg);
  const char* have = "mpi, two_level (local and shm are in the plain mini_trainer executable)";
#else
  if (cfg.transport == "local") return run(cfg, cfg.ranks, true, mt::launch_local);
  if (cfg.transport == "shm") return run(cfg, cfg.ranks, true, mt::launch_shm);
  const char* have =
      "local, shm (mpi and two_level are in mini_trainer_openmpi / mini_trainer_mpich)";
#endif
  throw mt::usage_error("--transport " + cfg.transport +
                        " is not available in this executable; it has: " + have);
}

}  // namespace

int main(int argc, char** argv) {
  // One BLAS thread per rank: the ranks are the parallelism.
  openblas_set_num_threads(1);
#ifdef MINI_TRAINER_MPI
  // SERIALIZED is what --fusion bucket's progress thread needs; ask for more.
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  auto fail = [](int code) -> int {
    // One rank failing alone (a checkpoint write) must not leave the others waiting, and
    // a launcher that cannot reach a partitioned host must not keep this rank alive:
    // abort_job exits after 10 s even if MPI_Abort hangs.
    gradsync::transport::abort_job(MPI_COMM_WORLD, code);
  };
#else
  auto fail = [](int code) { return code; };
#endif
  int rc = 0;
  try {
    const mt::config cfg = mt::parse_args(argc, argv);
    if (cfg.help) {
      std::fputs(mt::usage_text().c_str(), stdout);
    } else if (cfg.version) {
      std::printf("mini_trainer (gradsync %s)\n", GRADSYNC_VERSION_STRING);
    } else {
      rc = dispatch_transport(cfg);
    }
  } catch (const mt::usage_error& e) {
    std::fprintf(stderr, "mini_trainer: error: %s\n", e.what());
    return fail(2);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mini_trainer: error: %s\n", e.what());
    return fail(1);
  }
#ifdef MINI_TRAINER_MPI
  rc = gradsync::transport::finalize_job(rc);
#endif
  return rc;
}
