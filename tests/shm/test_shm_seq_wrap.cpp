// SPDX-License-Identifier: Apache-2.0
// The direct algorithms' stage flag across 2^32 calls (issue 54, item 5): it holds the
// call's number in 32 bits above the chunk step, so after 2^32 calls the numbers start
// low again. Without the lowering in direct_call::open_header the peers' old (higher)
// values passed every barrier at once and ranks summed staging data not yet written.
// shm_options::first_seq starts the group 3 calls before the wrap; every call across it
// must give exact sums, bitwise equal on every rank.
#include <doctest/doctest.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <gradsync/algo/direct.hpp>
#include <gradsync/allreduce.hpp>
#include <gradsync/testing/exact_inputs.hpp>
#include <gradsync/transport/shm.hpp>

#include "expect_records.hpp"
#include "fork_ranks.hpp"
#include "watchdog.hpp"

namespace gs = gradsync;

namespace {

constexpr std::size_t calls = 8;

// Rank r's value at element i of call c: exact in float, different in every call, so a
// rank that reads another call's staging data gets a wrong sum.
float value(std::size_t r, std::size_t c, std::size_t i) {
  return float((r + 1) * (c + 1) + i % 7);
}

template <class A>
void across_the_wrap(std::size_t n, std::size_t count) {
  gs::testbed::watchdog wd(110, std::string(A::name) + " across 2^32 calls");
  const auto out = gs::testbed::fork_ranks(
      n, gs::testbed::unique_job("seqwrap"),
      [count](gs::transport::shm& t, gs::testbed::rank_env& env) {
        const std::size_t ranks = t.size();
        std::vector<float> x(count);
        for (std::size_t c = 0; c < calls; ++c) {
          for (std::size_t i = 0; i < count; ++i) x[i] = value(t.rank(), c, i);
          gs::allreduce<A>(t, std::span<float>(x), gs::op::sum);
          std::uint64_t wrong = 0;
          for (std::size_t i = 0; i < count; ++i) {
            float want = 0;
            for (std::size_t r = 0; r < ranks; ++r) want += value(r, c, i);
            wrong += x[i] != want;
          }
          env.report("call " + std::to_string(c) + " (op #" + std::to_string(t.last_seq()) + ")",
                     wrong, gs::testing::fnv1a64(x.data(), count * sizeof(float)));
        }
      },
      {.time_limit = 100,
       .max_records = 64,
       // 64 KiB of staging per rank: a call of `count` floats takes many chunk barriers.
       .configure =
           [](gs::transport::shm_options& o) {
             o.exchange_bytes = 64 << 10;
             o.first_seq = (std::uint64_t{1} << 32) - 3;
           },
       .while_running = {}});
  gs::testbed::expect_every_record_right(out, calls);
  for (std::size_t c = 0; c < calls; ++c) {
    for (std::size_t r = 1; r < n; ++r) CHECK(out[r].records[c].hash == out[0].records[c].hash);
  }
}

}  // namespace

TEST_CASE("shm direct algorithms: calls across the 2^32 wrap of the stage flag stay exact") {
  for (std::size_t n : {2, 3}) {
    INFO(n << " processes");
    across_the_wrap<gs::algo::direct_two_shot>(n, 256 << 10);
    across_the_wrap<gs::algo::direct_one_shot>(n, 64 << 10);
  }
}
