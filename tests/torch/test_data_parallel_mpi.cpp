// SPDX-License-Identifier: Apache-2.0
// gradsync::torch::data_parallel over the process transports, under mpirun: mpi, shm
// (bootstrapped from MPI) and two_level (shm in a node, mpi across; nodes of two ranks).
// Ranks start from different weights and train on the same batches: rank 0's start is
// broadcast, and every rank ends with the weights of a one-process run, bitwise (2 ranks:
// x + x is exact; 2 x 2 over two levels: (x + x) + (x + x) is too).
#include <mpi.h>

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include <gradsync/gradsync.hpp>
#include <gradsync/torch/data_parallel.hpp>
#include <gradsync/transport/mpi.hpp>
#include <gradsync/transport/shm/from_mpi.hpp>
#include <gradsync/transport/two_level/from_mpi.hpp>

#include "mpi_harness.hpp"
#include "torch_models.hpp"

namespace gs = gradsync;
namespace gt = gradsync::torch;
using torch_test::net;

namespace {

constexpr double lr = 0.05;

template <class Sync, class Tr>
void train_identical(Tr& t, const char* what) {
  torch::set_num_threads(1);
  const auto init = torch_test::initial_params(7);
  const auto data = torch_test::batches(4, 16, 11);
  const std::uint64_t want = torch_test::reference_hash(init, data, lr);
  net m;
  torch_test::load(m, init, 0.25f * static_cast<float>(t.rank()));
  {
    gt::data_parallel<Sync> dp(*m, t);
    torch_test::train(m, data, lr);
    GS_CHECK(dp.steps() == data.size());
  }
  const std::uint64_t got = gt::replicas::hash(m->parameters());
  GS_CHECK_MSG(got == want, std::string(what) + ": weights differ from the one-process run");
  GS_CHECK_MSG(gs::testbed::same_on_all_ranks({got}), std::string(what) + ": ranks differ");
}

}  // namespace

GS_MPI_TEST("data_parallel over mpi: a one-process run's weights (none, bucket, zero_copy)", 240) {
  if (gs::testbed::world_size() != 2) GS_SKIP("needs 2 ranks (x + x is exact)");
  gs::transport::mpi t{MPI_COMM_WORLD};
  using tr = gs::transport::mpi;
  train_identical<gs::allreducer<tr, gs::algo::ring>>(t, "mpi, none");
  train_identical<gs::allreducer<tr, gs::algo::ring, gs::fusion::bucket<1 << 10>>>(t,
                                                                                   "mpi, bucket");
  train_identical<gs::allreducer<tr, gs::algo::ring, gs::fusion::zero_copy<25 << 20>>>(
      t, "mpi, zero_copy");
}

GS_MPI_TEST("data_parallel over shm: a one-process run's weights (none, zero_copy)", 240) {
  if (gs::testbed::world_size() != 2) GS_SKIP("needs 2 ranks (x + x is exact)");
  gs::transport::shm t = gs::transport::shm_from_mpi(MPI_COMM_WORLD);
  using tr = gs::transport::shm;
  train_identical<gs::allreducer<tr, gs::algo::ring>>(t, "shm, none");
  train_identical<gs::allreducer<tr, gs::algo::auto_select, gs::fusion::zero_copy<1 << 10>>>(
      t, "shm, zero_copy");
}

GS_MPI_TEST("data_parallel over two_level (2 x 2): a one-process run's weights", 240) {
  if (gs::testbed::world_size() != 4) GS_SKIP("needs 4 ranks (2 nodes of 2)");
  const int color = static_cast<int>(gs::testbed::world_rank() / 2);
  auto t = gs::transport::two_level_from_mpi(MPI_COMM_WORLD, {}, color);
  using tr = decltype(t);
  train_identical<gs::allreducer<tr, gs::algo::hierarchical<>, gs::fusion::zero_copy<1 << 10>>>(
      t, "two_level, zero_copy");
}
