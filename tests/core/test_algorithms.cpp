// SPDX-License-Identifier: Apache-2.0
// Algorithm internals: the double binary tree's shape, scratch reuse across calls, the
// pipelined paths (many segments, many ranks) that the matrix does not reach, and integer
// wrap-around.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <gradsync/algo/detail/btree.hpp>
#include <gradsync/gradsync.hpp>
#include <gradsync/testing/exact_inputs.hpp>

#include "watchdog.hpp"

namespace gs = gradsync;
namespace gd = gradsync::algo::detail;

TEST_CASE("double binary tree: two valid trees, interior nodes of one are leaves of the other") {
  for (std::size_t n = 1; n <= 64; ++n) {
    CAPTURE(n);
    std::vector<std::size_t> interior(n, 0);
    for (int w = 0; w < 2; ++w) {
      CAPTURE(w);
      std::vector<gd::tree_node> nodes(n);
      std::size_t roots = 0, height = 0;
      for (std::size_t r = 0; r < n; ++r) {
        nodes[r] = gd::btree_node(n, w, r);
        roots += nodes[r].parent == gd::tree_node::none;
        height = std::max(height, nodes[r].depth);
      }
      CHECK(roots == 1);
      std::size_t edges = 0;
      for (std::size_t r = 0; r < n; ++r) {
        const gd::tree_node& t = nodes[r];
        CHECK(t.max_depth == height);
        CHECK(t.children <= 2);
        interior[r] += t.children > 0;
        for (std::size_t c = 0; c < t.children; ++c) {
          REQUIRE(t.child[c] < n);
          CHECK(nodes[t.child[c]].parent == r);  // parent and child agree
          CHECK(nodes[t.child[c]].depth == t.depth + 1);
          ++edges;
        }
      }
      CHECK(edges == n - 1);  // n nodes, one root, every parent link matched: a tree
      // Height is logarithmic: at most ceil(log2(n)).
      std::size_t lg = 0;
      while ((std::size_t{1} << lg) < n) ++lg;
      CHECK(height <= lg);
    }
    for (std::size_t r = 0; r < n; ++r) {
      CAPTURE(r);
      // Even n: every rank is interior in at most one tree; odd n: all but rank 0.
      if (n % 2 == 0 || r != 0) CHECK(interior[r] <= 1);
    }
  }
}

template <class A>
void check_scratch_reuse() {
  constexpr std::size_t n = 4;
  gs::testbed::watchdog wd(60, std::string("scratch reuse, ") + std::string(A::name));
  std::vector<std::vector<std::size_t>> held(n);
  gs::transport::run_local(n, [&](gs::transport::local& t) {
    std::vector<float> v(1 << 20);
    for (std::size_t count : {std::size_t{1} << 20, std::size_t{1} << 20, std::size_t{1000}}) {
      gs::allreduce<A>(t, std::span<float>(v.data(), count), gs::op::sum);
      held[t.rank()].push_back(t.scratch().held_bytes());
    }
  });
  for (std::size_t r = 0; r < n; ++r) {
    CAPTURE(r);
    REQUIRE(held[r].size() == 3);
    CHECK(held[r][0] > 0);            // the algorithm does use scratch at 4 MiB
    CHECK(held[r][1] == held[r][0]);  // a second identical call allocates nothing
    CHECK(held[r][2] == held[r][0]);  // nor does a smaller one
    // Scratch stays a few pipeline segments, not a copy of the message.
    CHECK(held[r][0] <= 8 * gs::algo::tuning::segment_bytes);
  }
}

TEST_CASE_TEMPLATE("scratch is reused: held_bytes does not grow on repeated calls", A,
                   gs::algo::ring, gs::algo::tree, gs::algo::halving_doubling) {
  check_scratch_reuse<A>();
}

// Rank counts past the matrix's 8 (deeper trees, larger non-power-of-two folds) with
// messages of many pipeline segments, in sum and avg.
template <class A, class T, class Op>
void check_exact(std::size_t n, std::size_t count, Op op) {
  INFO(A::name << ", " << n << " ranks, count " << count << ", op " << gs::op_name(Op::id));
  std::vector<std::vector<T>> out(n);
  gs::transport::run_local(n, [&](gs::transport::local& t) {
    std::vector<T> v(count);
    gs::testing::fill_inputs(std::span<T>(v), Op::id, t.rank(), n);
    gs::allreduce<A>(t, std::span<T>(v), op, {.timeout = gs::seconds_d{60}});
    out[t.rank()] = std::move(v);
  });
  CHECK(gs::testing::count_wrong(std::span<const T>(out[0]), Op::id, n) == 0);
  for (std::size_t r = 1; r < n; ++r) {
    CAPTURE(r);
    CHECK(std::memcmp(out[r].data(), out[0].data(), count * sizeof(T)) == 0);
  }
}

TEST_CASE_TEMPLATE("larger groups: 9..17 ranks, multi-segment messages", A, gs::algo::tree,
                   gs::algo::halving_doubling, gs::algo::ring) {
  gs::testbed::watchdog wd(120, std::string("larger groups, ") + std::string(A::name));
  for (std::size_t n : {9, 12, 13, 16, 17}) {
    check_exact<A, float>(n, 3 * (gs::algo::tuning::segment_bytes / 4) * 2 + 17, gs::op::sum);
    check_exact<A, double>(n, 200003, gs::op::avg);
    check_exact<A, gs::bfloat16>(n, 5 * n + 3, gs::op::max);
  }
}

// Integer sums and products wrap modulo 2^bits (two's complement, as NCCL and MPI give),
// the same on every rank and in every algorithm. The reference is computed here in the
// unsigned type; the kernels must not leave signed overflow to the optimizer (the
// sanitizer build, -Db_sanitize=undefined, reports it).
template <class A, class T, class Op>
void check_wrapping(Op op) {
  using U = std::make_unsigned_t<T>;
  constexpr std::size_t n = 3, count = 1001;
  INFO(A::name << ", " << gs::dtype_name(gs::dtype_of<T>::value) << ", op " << gs::op_name(Op::id));
  // Large values of both signs: most sums and products overflow.
  auto input = [](std::size_t r, std::size_t i) {
    return static_cast<T>(static_cast<U>(0x9E3779B97F4A7C15ull * (r * count + i + 1)));
  };
  std::vector<std::vector<T>> out(n);
  gs::transport::run_local(n, [&](gs::transport::local& t) {
    std::vector<T> v(count);
    for (std::size_t i = 0; i < count; ++i) v[i] = input(t.rank(), i);
    gs::allreduce<A>(t, std::span<T>(v), op, {.timeout = gs::seconds_d{60}});
    out[t.rank()] = std::move(v);
  });
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i) {
    U e = static_cast<U>(input(0, i));
    for (std::size_t r = 1; r < n; ++r) {
      const U x = static_cast<U>(input(r, i));
      e = Op::id == gs::reduce_op::prod ? static_cast<U>(e * x) : static_cast<U>(e + x);
    }
    wrong += out[0][i] != static_cast<T>(e);
  }
  CHECK(wrong == 0);
  for (std::size_t r = 1; r < n; ++r) {
    CAPTURE(r);
    CHECK(out[r] == out[0]);
  }
}

TEST_CASE_TEMPLATE("integer sum and prod wrap modulo 2^bits on every rank", A, gs::algo::ring,
                   gs::algo::tree, gs::algo::halving_doubling) {
  gs::testbed::watchdog wd(60, std::string("integer wrap, ") + std::string(A::name));
  check_wrapping<A, std::int32_t>(gs::op::sum);
  check_wrapping<A, std::int32_t>(gs::op::prod);
  check_wrapping<A, std::int64_t>(gs::op::sum);
  check_wrapping<A, std::int64_t>(gs::op::prod);
}
