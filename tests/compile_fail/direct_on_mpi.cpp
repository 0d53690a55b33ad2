// SPDX-License-Identifier: Apache-2.0
// The direct (peer-memory) algorithms cannot run over MPI point-to-point.
#include <vector>
#include <gradsync/gradsync.hpp>
#include <gradsync/algo/direct.hpp>
#include <gradsync/transport/mpi.hpp>
namespace gs = gradsync;
void f(gs::transport::mpi& t) {
  std::vector<float> v(4);
  gs::allreduce<gs::algo::direct_two_shot>(t, std::span<float>(v), gs::op::sum);
}
