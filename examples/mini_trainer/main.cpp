// mini_trainer: data-parallel training of an MLP on Fashion-MNIST with gradsync.
//   build/examples/mini_trainer/mini_trainer --ranks 4 --epochs 2
//   mpirun -n 2 build/examples/mini_trainer/mini_trainer_openmpi --transport mpi
// See docs/tutorial.md for a walk through the code.
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
#include "dispatch.hpp"
#include "model.hpp"
#include "train.hpp"

#ifdef MINI_TRAINER_MPI
#include "mpi_main.hpp"
#endif

namespace mt = mini_trainer;

namespace {

/// Loads data and the starting state once per process, then trains on `ranks` ranks.
template <class Launch>
int run(const mt::config& cfg, std::size_t ranks, bool print_here, Launch&& launch) {
  mt::mlp_shape shape;
  shape.dims.push_back(784);
  for (auto h : cfg.hidden) shape.dims.push_back(h);
  shape.dims.push_back(10);
  if (!cfg.checkpoint_dir.empty()) mt::check_checkpoint_dir(cfg.checkpoint_dir);
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
  if (print_here) {
    if (!cfg.quiet && finals.size() > 1) {
      std::printf("all %zu ranks hold identical weights\n", finals.size());
    }
    std::printf("%s\n", finals[0].c_str());
  }
  return 0;
}

int run_local(const mt::config& cfg) {
  return run(cfg, cfg.ranks, true, [&](const mt::run_context& ctx) {
    std::vector<std::string> finals(cfg.ranks);
    gradsync::transport::run_local(
        cfg.ranks, [&](gradsync::transport::local& t) { finals[t.rank()] = mt::dispatch(t, ctx); });
    return finals;
  });
}

}  // namespace

int main(int argc, char** argv) {
  // One BLAS thread per rank: the ranks are the parallelism.
  openblas_set_num_threads(1);
  try {
    const mt::config cfg = mt::parse_args(argc, argv);
    if (cfg.transport == "local") return run_local(cfg);
#ifdef MINI_TRAINER_MPI
    if (cfg.transport == "mpi") return run_mpi(cfg, argc, argv);
#endif
    throw mt::usage_error("--transport " + cfg.transport +
                          " is not available in this executable (this one has: local"
#ifdef MINI_TRAINER_MPI
                          ", mpi"
#endif
                          ")");
  } catch (const mt::usage_error& e) {
    std::fprintf(stderr, "mini_trainer: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mini_trainer: error: %s\n", e.what());
    return 1;
  }
}
