// SPDX-License-Identifier: Apache-2.0
// checksum_cost: what transport::checksummed costs. Ranks are threads (transport::local);
// each size is a float sum by algo::ring, timed on the slowest rank, plain and checksummed
// calls alternating, median over --iters after --warmup. "same" says whether the two
// results were bit for bit equal on every rank; "ratio" is checksummed over plain.
//
//   checksum_cost [--ranks 2] [--sizes 64K,1M,16M,64M] [--iters 11] [--warmup 2]
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <gradsync/gradsync.hpp>
#include <gradsync/testing/exact_inputs.hpp>
#include <gradsync/transport/checksummed.hpp>

#include "../common/build_note.hpp"
#include "../common/group.hpp"

namespace gs = gradsync;
namespace gb = gradsync::bench;

namespace {

struct options {
  std::size_t ranks = 2;
  std::vector<std::size_t> sizes = {64u << 10, 1u << 20, 16u << 20, 64u << 20};
  int iters = 11, warmup = 2;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "checksum_cost: %s\nusage: checksum_cost [--ranks N] [--sizes 64K,1M,...] "
               "[--iters N] [--warmup N]\n",
               why);
  std::exit(2);
}

std::size_t parse_count(const std::string& flag, const std::string& s, std::size_t max) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (s.empty() || s[0] == '-' || s[0] == ' ' || errno || end == s.c_str()) {
    usage((flag + " needs a positive whole number, got '" + s + "'").c_str());
  }
  std::size_t mult = 1;
  if (*end == 'K')
    mult = 1u << 10, ++end;
  else if (*end == 'M')
    mult = 1u << 20, ++end;
  if (*end != '\0' || v == 0 || v > max / mult) {
    usage((flag + " must be a whole number from 1 to " + std::to_string(max) +
           " (K or M suffix allowed), got '" + s + "'")
              .c_str());
  }
  return static_cast<std::size_t>(v) * mult;
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage((a + " needs a value").c_str());
    const std::string v = argv[++i];
    if (a == "--ranks") {
      o.ranks = parse_count(a, v, 64);
    } else if (a == "--iters") {
      o.iters = static_cast<int>(parse_count(a, v, 100000));
    } else if (a == "--warmup") {
      o.warmup = static_cast<int>(parse_count(a, v, 100000));
    } else if (a == "--sizes") {
      o.sizes.clear();
      for (std::size_t p = 0; p <= v.size();) {
        const std::size_t q = std::min(v.find(',', p), v.size());
        o.sizes.push_back(parse_count(a, v.substr(p, q - p), std::size_t{1} << 32));
        p = q + 1;
      }
    } else {
      usage(("unknown flag " + a).c_str());
    }
  }
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  gb::print_build_note();
  std::printf(
      "# float sum, algo::ring, %zu ranks (threads, transport::local); median of %d "
      "after %d warm-up\n",
      o.ranks, o.iters, o.warmup);
  std::printf("#    bytes |  plain ms  checksummed ms |  ratio  same\n");
  auto state = gb::thread_group::make_state(o.ranks);
  int status = 0;
  gs::transport::run_local(o.ranks, [&](gs::transport::local& lt) {
    gb::thread_group g(state, lt.rank());
    gs::transport::checksummed<gs::transport::local> ct(lt);
    for (std::size_t bytes : o.sizes) {
      const std::size_t n = bytes / sizeof(float);
      std::vector<float> in(n), a(n), b(n);
      gs::testing::fill_inputs(std::span<float>(in), gs::reduce_op::sum, lt.rank(), lt.size());
      std::vector<double> plain, checked;
      for (int i = 0; i < o.warmup + o.iters; ++i) {
        for (int which = 0; which < 2; ++which) {
          std::vector<float>& x = which ? b : a;
          std::copy(in.begin(), in.end(), x.begin());
          g.barrier();
          const auto t0 = std::chrono::steady_clock::now();
          if (which) {
            gs::allreduce<gs::algo::ring>(ct, std::span<float>(x), gs::op::sum);
          } else {
            gs::allreduce<gs::algo::ring>(lt, std::span<float>(x), gs::op::sum);
          }
          double s[1] = {
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
          g.max_all(s);
          if (i >= o.warmup) (which ? checked : plain).push_back(s[0]);
        }
      }
      const std::uint64_t differ =
          g.sum_all(std::memcmp(a.data(), b.data(), n * sizeof(float)) != 0 ? 1 : 0);
      if (g.rank() == 0) {
        const double p = median(plain) * 1e3, c = median(checked) * 1e3;
        std::printf("%10zu | %9.3f %15.3f | %5.2fx  %s\n", bytes, p, c, c / p,
                    differ ? "NO" : "yes");
        if (differ) status = 1;
      }
    }
  });
  return status;
}
