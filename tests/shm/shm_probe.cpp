// SPDX-License-Identifier: Apache-2.0
// A quick, informal timing probe for transport::shm (not a test; bench/allreduce_perf
// is the real benchmark): forks N ranks and prints the median time per allreduce of
// float sum for each algorithm and size, plus a memcpy bandwidth probe run by all
// ranks at once. Used to pick auto_select's shm thresholds.
//
//   build/tests/shm/shm_probe [ranks=2] [iters=50] [min_bytes=8] [max_bytes=64M] [exchange_bytes]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <gradsync/algo/direct.hpp>
#include <gradsync/algo/halving_doubling.hpp>
#include <gradsync/algo/ring.hpp>
#include <gradsync/algo/tree.hpp>
#include <gradsync/allreduce.hpp>
#include <gradsync/transport/shm.hpp>

#include "fork_ranks.hpp"

namespace gs = gradsync;
using steady = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

template <class A>
double time_algo(gs::transport::shm& t, std::vector<float>& v, std::size_t count, int iters) {
  std::span<float> s(v.data(), count);
  for (int i = 0; i < 3; ++i) gs::allreduce<A>(t, s, gs::op::sum);
  std::vector<double> us;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = steady::now();
    gs::allreduce<A>(t, s, gs::op::sum);
    us.push_back(std::chrono::duration<double, std::micro>(steady::now() - t0).count());
  }
  return median(us);
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t n = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 2;
  const int iters = argc > 2 ? std::atoi(argv[2]) : 50;
  const std::size_t lo = argc > 3 ? std::strtoul(argv[3], nullptr, 10) : 8;
  const std::size_t hi = argc > 4 ? std::strtoul(argv[4], nullptr, 10) : 64 << 20;
  const std::size_t exch = argc > 5 ? std::strtoul(argv[5], nullptr, 10) : 0;
  std::vector<std::size_t> bytes;
  for (std::size_t b : {8, 64, 1 << 10, 4 << 10, 16 << 10, 32 << 10, 64 << 10, 256 << 10, 1 << 20,
                        4 << 20, 16 << 20, 64 << 20}) {
    if (b >= lo && b <= hi) bytes.push_back(b);
  }
  if (bytes.empty()) return 2;
  const auto out = gs::testbed::fork_ranks(
      n, gs::testbed::unique_job("probe"),
      [&](gs::transport::shm& t, gs::testbed::rank_env& env) {
        std::vector<float> v(std::size_t{64 << 20} / 4, 1.0f), w(v.size());
        // memcpy bandwidth: every rank copies 64 MiB at once (after a warm-up copy).
        std::vector<double> us;
        for (int i = 0; i < 6; ++i) {
          std::vector<float> one(1);
          gs::allreduce<gs::algo::direct_one_shot>(t, std::span<float>(one), gs::op::sum);
          const auto t0 = steady::now();
          std::memcpy(w.data(), v.data(), 64 << 20);
          if (i)
            us.push_back(std::chrono::duration<double, std::micro>(steady::now() - t0).count());
        }
        env.report("memcpy", 0, static_cast<std::uint64_t>(median(us) * 1000));
        for (std::size_t b : bytes) {
          const std::size_t c = b / 4;
          const int it = b >= (16 << 20) ? std::max(5, iters / 5) : iters;
          auto rep = [&](const char* name, double v_us) {
            env.report((std::string(name) + "/" + std::to_string(b)).c_str(), 0,
                       static_cast<std::uint64_t>(v_us * 1000));
          };
          if (b <= (4 << 20)) rep("one_shot", time_algo<gs::algo::direct_one_shot>(t, v, c, it));
          rep("two_shot", time_algo<gs::algo::direct_two_shot>(t, v, c, it));
          rep("ring", time_algo<gs::algo::ring>(t, v, c, it));
          if (b <= (4 << 20)) rep("tree", time_algo<gs::algo::tree>(t, v, c, it));
          rep("halving_doubling", time_algo<gs::algo::halving_doubling>(t, v, c, it));
        }
      },
      {.time_limit = 600,
       .max_records = 256,
       .configure =
           [&](gs::transport::shm_options& o) {
             if (exch) o.exchange_bytes = exch;
           },
       .while_running = {}});
  if (out[0].status != 0) {
    std::fprintf(stderr, "rank 0 failed: %s\n", out[0].what.c_str());
    return 1;
  }
  std::printf(
      "%zu ranks, float sum, median us per call (rank 0); busbw = 2(n-1)/n * bytes / time\n", n);
  for (const auto& r : out[0].records) {
    const double us = r.hash / 1000.0;
    const char* slash = std::strrchr(r.label, '/');
    const double b = slash ? std::strtod(slash + 1, nullptr) : (64 << 20);
    const double busbw =
        std::string(r.label) == "memcpy" ? b / us / 1e3 : 2.0 * (n - 1) / n * b / us / 1e3;
    std::printf(
        "%-28s %12.2f us %8.2f GB/s%s\n", r.label, us, busbw,
        std::string(r.label) == "memcpy" ? " (memcpy of 64 MiB, per rank, all at once)" : "");
  }
  return 0;
}
