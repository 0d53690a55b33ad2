// SPDX-License-Identifier: Apache-2.0
// Started by a launcher (mpirun of Open MPI or MPICH) with no GRADSYNC_SHM_* variable and
// no MPI in the program: transport::shm::from_env() must find rank, size and job in the
// launcher's variables. Every rank checks the source it expects (argv[1]), exact sums
// for several algorithms and counts, bitwise identity across ranks (hashes reduced with
// min and max over the transport itself), and that the segment is gone from /dev/shm.
// Exit 0 = pass; a watchdog turns a hang into a failure.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include <gradsync/algo/auto_select.hpp>
#include <gradsync/algo/direct.hpp>
#include <gradsync/algo/ring.hpp>
#include <gradsync/allreduce.hpp>
#include <gradsync/testing/exact_inputs.hpp>
#include <gradsync/transport/shm.hpp>

#include "watchdog.hpp"

namespace gs = gradsync;

namespace {

template <class A>
void run_cases(gs::transport::shm& t, std::uint64_t& wrong, std::vector<std::int64_t>& hashes) {
  for (std::size_t count : {std::size_t{1}, t.size(), std::size_t{9001}, std::size_t{300007}}) {
    std::vector<float> v(count);
    gs::testing::fill_inputs(std::span<float>(v), gs::reduce_op::sum, t.rank(), t.size());
    gs::allreduce<A>(t, std::span<float>(v), gs::op::sum);
    wrong += gs::testing::count_wrong(std::span<const float>(v), gs::reduce_op::sum, t.size());
    hashes.push_back(
        static_cast<std::int64_t>(gs::testing::fnv1a64(v.data(), v.size() * sizeof(float))));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: shm_launched SOURCE RANKS  (e.g. 'Open MPI' 3)\n");
    return 2;
  }
  const std::string want_source = argv[1];
  const std::size_t want_size = std::stoul(argv[2]);
  gs::testbed::watchdog wd(60, "shm_launched");
  int failed = 0;
  try {
    const auto l = gs::transport::shm_launch_from_env();
    if (l.source != want_source || l.size != want_size) {
      std::fprintf(stderr, "rank %zu: group from '%s' of %zu, expected '%s' of %zu\n", l.rank,
                   l.source.c_str(), l.size, want_source.c_str(), want_size);
      failed = 1;
    }
    auto t = gs::transport::shm::from_env();
    const std::string path = "/dev/shm" + t.segment_name();
    if (::access(path.c_str(), F_OK) == 0) {
      std::fprintf(stderr, "rank %zu: %s still exists after the bootstrap\n", t.rank(),
                   path.c_str());
      failed = 1;
    }
    std::uint64_t wrong = 0;
    std::vector<std::int64_t> hashes;
    run_cases<gs::algo::direct_one_shot>(t, wrong, hashes);
    run_cases<gs::algo::direct_two_shot>(t, wrong, hashes);
    run_cases<gs::algo::ring>(t, wrong, hashes);
    run_cases<gs::algo::auto_select>(t, wrong, hashes);
    std::vector<std::int64_t> lo = hashes, hi = hashes;
    gs::allreduce<gs::algo::direct_one_shot>(t, std::span<std::int64_t>(lo), gs::op::min);
    gs::allreduce<gs::algo::direct_one_shot>(t, std::span<std::int64_t>(hi), gs::op::max);
    if (wrong) {
      std::fprintf(stderr, "rank %zu: %llu wrong elements\n", t.rank(),
                   static_cast<unsigned long long>(wrong));
      failed = 1;
    }
    if (lo != hi) {
      std::fprintf(stderr, "rank %zu: results differ bitwise between ranks\n", t.rank());
      failed = 1;
    }
    std::int64_t any = failed;
    gs::allreduce<gs::algo::direct_one_shot>(t, std::span<std::int64_t>(&any, 1), gs::op::max);
    if (t.rank() == 0) {
      std::printf("shm from %s's variables, %zu ranks, job '%s', %zu cases: %s\n", l.source.c_str(),
                  t.size(), l.job.c_str(), hashes.size(), any ? "FAILED" : "ok");
    }
    failed = any ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    failed = 1;
  }
  return failed;
}
