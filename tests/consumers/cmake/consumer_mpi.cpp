// SPDX-License-Identifier: Apache-2.0
// gradsync::mpi from the CMake package: one exact allreduce over MPI_COMM_WORLD.
#include <mpi.h>

#include <cstdio>
#include <vector>

#include <gradsync/gradsync.hpp>
#include <gradsync/transport/mpi.hpp>

int main(int argc, char** argv) {
  namespace gs = gradsync;
  MPI_Init(&argc, &argv);
  int bad = 0, size = 1;
  {
    gs::transport::mpi t{MPI_COMM_WORLD};
    size = static_cast<int>(t.size());
    std::vector<double> v(100, double(t.rank() + 1));
    gs::allreduce<gs::algo::ring>(t, std::span<double>(v), gs::op::sum);
    const double want = size * (size + 1) / 2.0;
    for (double x : v) bad += x != want;
    if (t.rank() == 0)
      std::printf("consumer_mpi: allreduce over %d MPI ranks %s\n", size, bad ? "WRONG" : "ok");
  }
  MPI_Finalize();
  return bad ? 1 : 0;
}
