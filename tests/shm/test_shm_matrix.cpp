// SPDX-License-Identifier: Apache-2.0
// The correctness matrix over transport::shm with 1..6 forked processes: every
// algorithm (direct one-shot and two-shot, ring, and tree / halving_doubling /
// auto_select when present), the 6 element types, every op, counts {0, 1, n-1, n,
// 9001, 1000003, 2^20+7}. Results must be exact (count_wrong == 0) and bitwise
// identical on every rank (same fnv1a64).
#include <doctest/doctest.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <gradsync/algo/direct.hpp>
#include <gradsync/algo/ring.hpp>
#include <gradsync/allreduce.hpp>
#include <gradsync/testing/exact_inputs.hpp>
#include <gradsync/transport/shm.hpp>

#if __has_include(<gradsync/algo/tree.hpp>)
#include <gradsync/algo/tree.hpp>
#define GS_TEST_TREE , gs::algo::tree
#else
#define GS_TEST_TREE
#endif
#if __has_include(<gradsync/algo/halving_doubling.hpp>)
#include <gradsync/algo/halving_doubling.hpp>
#define GS_TEST_HD , gs::algo::halving_doubling
#else
#define GS_TEST_HD
#endif
#if __has_include(<gradsync/algo/auto_select.hpp>)
#include <gradsync/algo/auto_select.hpp>
#define GS_TEST_AUTO , gs::algo::auto_select
#else
#define GS_TEST_AUTO
#endif

#include "fork_ranks.hpp"
#include "watchdog.hpp"

namespace gs = gradsync;
using gs::testbed::rank_env;
using gs::testbed::rank_outcome;

namespace {

template <class... A>
struct algo_list {};
using all_algos = algo_list<gs::algo::direct_one_shot, gs::algo::direct_two_shot,
                            gs::algo::ring GS_TEST_TREE GS_TEST_HD GS_TEST_AUTO>;

template <class A, class T, class Op>
void one_case(gs::transport::shm& t, rank_env& env, std::size_t count) {
  std::vector<T> v(count);
  gs::testing::fill_inputs(std::span<T>(v), Op::id, t.rank(), t.size());
  gs::allreduce<A>(t, std::span<T>(v), Op{});
  const std::size_t wrong = gs::testing::count_wrong(std::span<const T>(v), Op::id, t.size());
  env.report(std::string(A::name) + "/" + std::string(gs::dtype_name(gs::dtype_of<T>::value)) +
                 "/" + std::string(gs::op_name(Op::id)) + "/" + std::to_string(count),
             wrong, gs::testing::fnv1a64(v.data(), v.size() * sizeof(T)));
}

template <class A, class T>
void all_ops(gs::transport::shm& t, rank_env& env, std::size_t count) {
  one_case<A, T, gs::op::sum_t>(t, env, count);
  one_case<A, T, gs::op::prod_t>(t, env, count);
  one_case<A, T, gs::op::min_t>(t, env, count);
  one_case<A, T, gs::op::max_t>(t, env, count);
  if constexpr (gs::is_floating_element_v<T>) one_case<A, T, gs::op::avg_t>(t, env, count);
}

// One large case per algorithm and count, rotating through types and ops.
template <class A>
void big_case(gs::transport::shm& t, rank_env& env, std::size_t count, std::size_t pick) {
  switch (pick % 6) {
    case 0:
      return one_case<A, float, gs::op::sum_t>(t, env, count);
    case 1:
      return one_case<A, double, gs::op::avg_t>(t, env, count);
    case 2:
      return one_case<A, gs::half, gs::op::sum_t>(t, env, count);
    case 3:
      return one_case<A, gs::bfloat16, gs::op::max_t>(t, env, count);
    case 4:
      return one_case<A, std::int32_t, gs::op::prod_t>(t, env, count);
    default:
      return one_case<A, std::int64_t, gs::op::min_t>(t, env, count);
  }
}

template <class A>
void matrix_for(gs::transport::shm& t, rank_env& env, std::size_t index) {
  const std::size_t n = t.size();
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, n - 1, n, std::size_t{9001}}) {
    all_ops<A, float>(t, env, count);
    all_ops<A, double>(t, env, count);
    all_ops<A, gs::half>(t, env, count);
    all_ops<A, gs::bfloat16>(t, env, count);
    all_ops<A, std::int32_t>(t, env, count);
    all_ops<A, std::int64_t>(t, env, count);
  }
  big_case<A>(t, env, 1000003, index + n);
  big_case<A>(t, env, (std::size_t{1} << 20) + 7, index + n + 3);
}

template <class... A>
void run_matrix(gs::transport::shm& t, rank_env& env, algo_list<A...>) {
  std::size_t i = 0;
  (matrix_for<A>(t, env, i++), ...);
}

// Checks that every rank finished cleanly and reported the same exact results.
void check_outcomes(const std::vector<rank_outcome>& out) {
  for (std::size_t r = 0; r < out.size(); ++r) {
    INFO("rank " << r << ": " << out[r].what);
    CHECK(out[r].status == 0);
    CHECK(out[r].error_code == 0);
    CHECK(out[r].records.size() == out[0].records.size());
  }
  std::size_t bad = 0;
  std::string first;
  for (std::size_t i = 0; i < out[0].records.size(); ++i) {
    for (std::size_t r = 0; r < out.size(); ++r) {
      if (i >= out[r].records.size()) continue;
      const auto& a = out[0].records[i];
      const auto& b = out[r].records[i];
      const bool ok = std::string(a.label) == b.label && b.wrong == 0 && b.hash == a.hash;
      if (!ok && bad++ < 10) {
        first += "\n  rank " + std::to_string(r) + " " + b.label +
                 ": wrong=" + std::to_string(b.wrong) +
                 (b.hash == a.hash ? "" : " (bits differ from rank 0)");
      }
    }
  }
  INFO("first failures:" << first);
  CHECK(bad == 0);
  CHECK(out[0].records.size() > 0);
}

// Interleaves direct calls with point-to-point calls and count-0 calls without the
// consistency check, so slots are reused after calls that did not touch them.
void mixed_sequence(gs::transport::shm& t, rank_env& env) {
  const std::size_t n = t.size();
  gs::call_options unchecked;
  unchecked.check = false;
  for (std::size_t it = 0; it < 40; ++it) {
    std::vector<float> a(3 + it), b(20000 + it), none;
    gs::testing::fill_inputs(std::span<float>(a), gs::reduce_op::sum, t.rank(), n);
    gs::testing::fill_inputs(std::span<float>(b), gs::reduce_op::max, t.rank(), n);
    gs::allreduce<gs::algo::direct_one_shot>(t, std::span<float>(a), gs::op::sum);
    gs::allreduce<gs::algo::ring>(t, std::span<float>(none), gs::op::sum, unchecked);
    gs::allreduce<gs::algo::direct_two_shot>(t, std::span<float>(b), gs::op::max);
    if (it % 3 == 0) gs::allreduce<gs::algo::ring>(t, std::span<float>(b), gs::op::max);
    env.report(
        "mixed/" + std::to_string(it),
        gs::testing::count_wrong(std::span<const float>(a), gs::reduce_op::sum, n) +
            gs::testing::count_wrong(std::span<const float>(b), gs::reduce_op::max, n),
        gs::testing::fnv1a64(a.data(), a.size() * 4, gs::testing::fnv1a64(b.data(), b.size() * 4)));
  }
}

void matrix_on(std::size_t n) {
  gs::testbed::watchdog wd(170, "shm correctness matrix on " + std::to_string(n) + " processes");
  const auto out = gs::testbed::fork_ranks(n, gs::testbed::unique_job("matrix"),
                                           [](gs::transport::shm& t, rank_env& env) {
                                             run_matrix(t, env, all_algos{});
                                             mixed_sequence(t, env);
                                           },
                                           {.time_limit = 160,
                                            .max_records = 8192,
                                            .configure =
                                                [n](gs::transport::shm_options& o) {
                                                  // Odd rank counts: small staging buffers, so that
                                                  // the large counts take many chunks.
                                                  if (n % 2 == 1) o.exchange_bytes = 1 << 20;
                                                },
                                            .while_running = {}});
  check_outcomes(out);
}

}  // namespace

TEST_CASE("shm matrix: 1 process") {
  matrix_on(1);
}
TEST_CASE("shm matrix: 2 processes") {
  matrix_on(2);
}
TEST_CASE("shm matrix: 3 processes") {
  matrix_on(3);
}
TEST_CASE("shm matrix: 4 processes") {
  matrix_on(4);
}
TEST_CASE("shm matrix: 5 processes") {
  matrix_on(5);
}
TEST_CASE("shm matrix: 6 processes") {
  matrix_on(6);
}
