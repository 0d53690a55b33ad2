// SPDX-License-Identifier: Apache-2.0
// The MPI translation unit of the separately compiled test program (check_separate.sh):
// the composition of bench/build_time/user_tu.cpp, a two-level allreducer (shm inside the
// node, mpi across), and a mismatch caught by the consistency check, with the transports'
// functions in other objects.
#include <mpi.h>

#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include <gradsync/gradsync.hpp>
#include <gradsync/transport/mpi.hpp>
#include <gradsync/transport/two_level/from_mpi.hpp>

#include "parts.hpp"

namespace gs = gradsync;

int mpi_part() {
  int bad = 0;
  gs::transport::mpi t{MPI_COMM_WORLD};
  const std::size_t n = t.size();
  {
    gs::allreducer<gs::transport::mpi, gs::algo::auto_select, gs::fusion::bucket<25 << 20>,
                   gs::compress::bf16>
        sync{t};
    // Small integers: exact in bfloat16 and in their sums, so the result is exact.
    std::vector<float> grad(1 << 16);
    for (std::size_t i = 0; i < grad.size(); ++i)
      grad[i] = static_cast<float>(t.rank() + 1 + i % 8);
    sync.allreduce(std::span<float>(grad), gs::op::sum);
    for (std::size_t i = 0; i < grad.size(); ++i)
      bad += grad[i] != static_cast<float>(n * (n + 1) / 2 + n * (i % 8));
  }
  {
    auto tl = gs::transport::two_level_from_mpi(MPI_COMM_WORLD);
    gs::allreducer<decltype(tl), gs::algo::hierarchical<gs::algo::ring>> sync{tl};
    std::vector<double> w(5000);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<double>(t.rank() * i);
    sync.allreduce(std::span<double>(w), gs::op::sum);  // sum of r * i over ranks r
    for (std::size_t i = 0; i < w.size(); ++i)
      bad += w[i] != static_cast<double>(n * (n - 1) / 2 * i);
  }
  // Ranks disagree on the count: every rank raises errc::mismatch naming the count.
  std::vector<double> v(10 + t.rank(), 1.0);
  try {
    gs::allreduce<gs::algo::ring>(t, std::span<double>(v), gs::op::sum);
    bad += n > 1;  // with several ranks the call must have thrown
  } catch (const gs::error& e) {
    if (n == 1 || e.code() != gs::errc::mismatch ||
        std::string(e.what()).find("count") == std::string::npos) {
      std::printf("mpi part: unexpected error: %s\n", e.what());
      ++bad;
    }
  }
  if (n == 1) bad += v[0] != 1.0;  // one rank: nothing to disagree with
  std::printf("mpi part (rank %zu of %zu): bf16 and two-level allreducers, count mismatch %s\n",
              t.rank(), n, bad ? "WRONG" : "ok");
  return bad;
}
