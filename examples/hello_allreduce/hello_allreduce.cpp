// SPDX-License-Identifier: Apache-2.0
// hello_allreduce: 4 in-process ranks each hold a vector; one ring allreduce later every
// rank holds the same sum. Run: build/examples/hello_allreduce/hello_allreduce [ranks]
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include <gradsync/gradsync.hpp>

namespace gs = gradsync;

int main(int argc, char** argv) {
  const std::size_t ranks = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 4;
  const std::size_t count = 8;
  std::mutex print;
  gs::transport::run_local(ranks, [&](gs::transport::local& t) {
    std::vector<float> grad(count);
    for (std::size_t i = 0; i < count; ++i) grad[i] = float(t.rank() + 1) * float(i + 1);
    const std::vector<float> before = grad;

    gs::allreduce<gs::algo::ring>(t, std::span<float>(grad), gs::op::sum);

    std::lock_guard lk(print);
    std::printf("rank %zu of %zu: [", t.rank(), t.size());
    for (std::size_t i = 0; i < count; ++i) std::printf("%s%g", i ? " " : "", before[i]);
    std::printf("] -> sum [");
    for (std::size_t i = 0; i < count; ++i) std::printf("%s%g", i ? " " : "", grad[i]);
    std::printf("]\n");
  });
  // Every element i must be (1 + 2 + ... + ranks) * (i + 1).
  std::printf("allreduce(sum) over %zu in-process ranks with algo::ring: done\n", ranks);
  return 0;
}
