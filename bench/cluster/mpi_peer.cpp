// SPDX-License-Identifier: Apache-2.0
// mpi_peer: MPI_Allreduce of the MPI this binary was built against, as bench/cluster_compare
// times it beside gradsync across simulated hosts: float sum, out of place (Open MPI
// 4.1's coll/han fails in place), every size checked on exactly representable inputs.
// One line per size: "mpi_peer BYTES median_us min_us wrong".
//   mpi_peer MIN_BYTES MAX_BYTES ITERS [WARMUP]
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "gradsync/transport/mpi/exit.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc < 4) {
    if (rank == 0) std::fprintf(stderr, "usage: mpi_peer MIN_BYTES MAX_BYTES ITERS [WARMUP]\n");
    MPI_Finalize();
    return 2;
  }
  const std::size_t lo = std::strtoull(argv[1], nullptr, 10),
                    hi = std::strtoull(argv[2], nullptr, 10);
  const int iters = std::atoi(argv[3]), warm = argc > 4 ? std::atoi(argv[4]) : 1;
  long long bad_total = 0;
  for (std::size_t bytes = lo; bytes <= hi; bytes *= 2) {
    const std::size_t n = std::max<std::size_t>(1, bytes / sizeof(float));
    std::vector<float> in(n), out(n);
    for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<float>((i % 97) + rank);
    std::vector<double> t;
    for (int it = 0; it < warm + iters; ++it) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      MPI_Allreduce(in.data(), out.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double dt = MPI_Wtime() - t0, slowest = 0;
      MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (it >= warm) t.push_back(slowest * 1e6);
    }
    long long bad = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const float want = static_cast<float>(size * static_cast<long long>(i % 97) +
                                            static_cast<long long>(size) * (size - 1) / 2);
      bad += out[i] != want;
    }
    long long all_bad = 0;
    MPI_Allreduce(&bad, &all_bad, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    bad_total += all_bad;
    std::sort(t.begin(), t.end());
    if (rank == 0) {
      std::printf("mpi_peer %zu %.2f %.2f %lld\n", n * sizeof(float), t[t.size() / 2], t[0],
                  all_bad);
      std::fflush(stdout);
    }
  }
  // Bounded: MPICH over UCX's TCP transport sometimes hangs here (transport/mpi/exit.hpp).
  return gradsync::transport::finalize_job(bad_total ? 1 : 0);
}
