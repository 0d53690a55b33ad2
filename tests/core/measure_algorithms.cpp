// SPDX-License-Identifier: Apache-2.0
// Measures ring / tree / halving_doubling on transport::local for the auto_select
// table (algo/auto_select.hpp). Not a test: build it on demand with
//   ninja -C <builddir> tests/core/measure_algorithms && <builddir>/tests/core/measure_algorithms
//   [runs]
// Each run times 9 interleaved calls (order rotated, ranks lined up before each) of each algorithm
// per (ranks, size) on rank 0 (after 2 warm-up calls) and takes the median; the table prints the
// median over runs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include <gradsync/gradsync.hpp>

namespace gs = gradsync;

namespace {

// Times one call on this rank after a small untimed allreduce that lines the ranks up,
// so no algorithm is charged for the skew the previous call left behind.
template <class A>
double time_call(gs::transport::local& t, std::span<float> v) {
  int token = 1;
  gs::allreduce<gs::algo::tree>(t, std::span<int>(&token, 1), gs::op::sum);
  const auto t0 = std::chrono::steady_clock::now();
  gs::allreduce<A>(t, v, gs::op::sum);
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return x[x.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 3;
  constexpr std::size_t reps = 9, warmup = 2;
  const std::size_t ranks[] = {2, 3, 4, 5, 6, 8};
  const std::size_t sizes[] = {256, 4 << 10, 32 << 10, 128 << 10, 512 << 10, 2 << 20, 8 << 20};
  std::map<std::pair<std::size_t, std::size_t>, std::vector<std::vector<double>>> per_run;
  for (int run = 0; run < runs; ++run) {
    for (std::size_t n : ranks) {
      for (std::size_t bytes : sizes) {
        std::vector<std::vector<double>> us(3);
        gs::transport::run_local(n, [&](gs::transport::local& t) {
          std::vector<float> v(bytes / sizeof(float), 1.0f);
          for (std::size_t i = 0; i < reps + warmup; ++i) {
            // Rotate the order so no algorithm always runs on caches the previous one left.
            double us_i[3] = {};
            for (std::size_t k = 0; k < 3; ++k) {
              switch ((i + k) % 3) {
                case 0:
                  us_i[0] = time_call<gs::algo::ring>(t, v);
                  break;
                case 1:
                  us_i[1] = time_call<gs::algo::tree>(t, v);
                  break;
                default:
                  us_i[2] = time_call<gs::algo::halving_doubling>(t, v);
                  break;
              }
            }
            if (t.rank() == 0 && i >= warmup) {
              for (std::size_t k = 0; k < 3; ++k) us[k].push_back(us_i[k]);
            }
          }
        });
        auto& slot = per_run[{n, bytes}];
        slot.resize(3);
        for (int k = 0; k < 3; ++k) slot[k].push_back(median(us[k]));
      }
    }
  }
  std::printf("%5s %10s %12s %12s %12s  %s\n", "ranks", "bytes", "ring_us", "tree_us", "hd_us",
              "fastest");
  const char* names[] = {"ring", "tree", "halving_doubling"};
  for (const auto& [key, v] : per_run) {
    double m[3];
    for (int k = 0; k < 3; ++k) m[k] = median(v[k]);
    const int best = static_cast<int>(std::min_element(m, m + 3) - m);
    std::printf("%5zu %10zu %12.1f %12.1f %12.1f  %s\n", key.first, key.second, m[0], m[1], m[2],
                names[best]);
  }
}
