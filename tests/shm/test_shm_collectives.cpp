// SPDX-License-Identifier: Apache-2.0
// broadcast, reduce_scatter and allgather over transport::shm with 1..6 forked processes:
// exact results, every root, counts 0, 1, odd and past the chain's threshold (several
// segments in flight), bitwise identity across ranks for broadcast and allgather.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <gradsync/allgather.hpp>
#include <gradsync/broadcast.hpp>
#include <gradsync/reduce_scatter.hpp>
#include <gradsync/testing/exact_inputs.hpp>
#include <gradsync/transport/shm.hpp>

#include "fork_ranks.hpp"
#include "watchdog.hpp"

namespace gs = gradsync;
using gs::testbed::rank_env;

namespace {

template <class T>
T value_of(std::size_t who, std::size_t i) {
  return gs::testing::from_double<T>(static_cast<double>((i * 7 + who * 13) % 201) - 100);
}

template <class T>
void broadcasts(gs::transport::shm& t, rank_env& env) {
  const std::size_t n = t.size(), r = t.rank();
  for (std::size_t count :
       {std::size_t{0}, std::size_t{1}, std::size_t{1001}, std::size_t{(1 << 20) + 3}}) {
    for (std::size_t root = 0; root < n; ++root) {
      std::vector<T> v(count);
      for (std::size_t i = 0; i < count; ++i) v[i] = value_of<T>(r == root ? root : n + 1, i);
      gs::broadcast(t, std::span<T>(v), root);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < count; ++i) {
        const T want = value_of<T>(root, i);
        wrong += std::memcmp(&want, &v[i], sizeof(T)) != 0;
      }
      env.report("broadcast/" + std::string(gs::dtype_name(gs::dtype_of<T>::value)) + "/" +
                     std::to_string(count) + "/root" + std::to_string(root),
                 wrong, gs::testing::fnv1a64(v.data(), v.size() * sizeof(T)));
    }
  }
}

template <class T, class Op>
void reduce_scatters(gs::transport::shm& t, rank_env& env) {
  const std::size_t n = t.size(), r = t.rank();
  for (std::size_t m : {std::size_t{0}, std::size_t{1}, std::size_t{1001}, std::size_t{300001}}) {
    std::vector<T> in(n * m), out(m), all(n * m);
    gs::testing::fill_inputs(std::span<T>(in), Op::id, r, n);
    gs::reduce_scatter(t, std::span<const T>(in), std::span<T>(out), Op{});
    std::size_t wrong = gs::testing::count_wrong(std::span<const T>(out), Op::id, n, r * m);
    gs::allgather(t, std::span<const T>(out), std::span<T>(all));
    wrong += gs::testing::count_wrong(std::span<const T>(all), Op::id, n);
    env.report("reduce_scatter+allgather/" + std::string(gs::dtype_name(gs::dtype_of<T>::value)) +
                   "/" + std::string(gs::op_name(Op::id)) + "/" + std::to_string(m),
               wrong, gs::testing::fnv1a64(all.data(), all.size() * sizeof(T)));
  }
}

void collectives_on(std::size_t n) {
  gs::testbed::watchdog wd(170, "shm collectives on " + std::to_string(n) + " processes");
  const auto out = gs::testbed::fork_ranks(
      n, gs::testbed::unique_job("coll"),
      [](gs::transport::shm& t, rank_env& env) {
        broadcasts<float>(t, env);
        broadcasts<gs::half>(t, env);
        broadcasts<std::int64_t>(t, env);
        reduce_scatters<float, gs::op::sum_t>(t, env);
        reduce_scatters<gs::bfloat16, gs::op::avg_t>(t, env);
        reduce_scatters<double, gs::op::prod_t>(t, env);
        reduce_scatters<std::int32_t, gs::op::min_t>(t, env);
      },
      {.time_limit = 160, .max_records = 1024, .configure = {}, .while_running = {}});
  std::size_t bad = 0;
  for (std::size_t r = 0; r < n; ++r) {
    INFO("rank " << r << ": " << out[r].what);
    CHECK(out[r].status == 0);
    REQUIRE(out[r].records.size() == out[0].records.size());
    for (std::size_t i = 0; i < out[r].records.size(); ++i) {
      const auto& a = out[0].records[i];
      const auto& b = out[r].records[i];
      if (b.wrong != 0 || b.hash != a.hash || std::string(a.label) != b.label) {
        if (bad++ < 5) FAIL_CHECK("rank " << r << " " << b.label << ": wrong=" << b.wrong);
      }
    }
  }
  CHECK(bad == 0);
  CHECK(out[0].records.size() == 3 * 4 * n + 4 * 4);
}

}  // namespace

TEST_CASE("shm collectives: 1 process") {
  collectives_on(1);
}
TEST_CASE("shm collectives: 2 processes") {
  collectives_on(2);
}
TEST_CASE("shm collectives: 3 processes") {
  collectives_on(3);
}
TEST_CASE("shm collectives: 4 processes") {
  collectives_on(4);
}
TEST_CASE("shm collectives: 6 processes") {
  collectives_on(6);
}
