// SPDX-License-Identifier: Apache-2.0
// algo::hierarchical over transport::two_level<local, local>: nodes x local ranks as
// threads of one process, each node an in-process group and each local index another.
// Exact results from exactly representable inputs and bitwise identity across all
// ranks, for several shapes, element types, ops, counts and inter-node algorithms; an
// uneven job refused at construction; a mismatched call failing every rank.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <gradsync/algo/halving_doubling.hpp>
#include <gradsync/algo/hierarchical.hpp>
#include <gradsync/algo/tree.hpp>
#include <gradsync/gradsync.hpp>
#include <gradsync/testing/exact_inputs.hpp>

#include "two_level_ranks.hpp"
#include "watchdog.hpp"

namespace gs = gradsync;
using gs::transport::local;
using two_level = gs::transport::two_level<local, local>;

namespace {

/// 20 s instead of the default 300 s: a rank left waiting fails the case quickly.
gs::call_options short_deadline() {
  gs::call_options o;
  o.timeout = gs::seconds_d(20);
  return o;
}

struct outcome {
  std::vector<std::vector<std::uint64_t>> hashes;  // [rank][case]
  std::vector<std::size_t> wrong;                  // [rank]
  std::vector<std::size_t> rank_seen;              // [global rank] = 1 when seen
};

template <class A, class T, class Op>
void cases(two_level& t, outcome& o, std::size_t r) {
  const std::size_t n = t.size(), L = t.intra().size();
  for (std::size_t count :
       {std::size_t{0}, std::size_t{1}, L - 1, L + 1, std::size_t{9001}, std::size_t{65539}}) {
    std::vector<T> v(count);
    gs::testing::fill_inputs(std::span<T>(v), Op::id, t.rank(), n);
    gs::allreduce<A>(t, std::span<T>(v), Op{});
    o.wrong[r] += gs::testing::count_wrong(std::span<const T>(v), Op::id, n);
    o.hashes[r].push_back(gs::testing::fnv1a64(v.data(), v.size() * sizeof(T)));
  }
}

template <class A>
void all_types(two_level& t, outcome& o, std::size_t r) {
  cases<A, float, gs::op::sum_t>(t, o, r);
  cases<A, float, gs::op::avg_t>(t, o, r);
  cases<A, double, gs::op::prod_t>(t, o, r);
  cases<A, gs::half, gs::op::max_t>(t, o, r);
  cases<A, gs::bfloat16, gs::op::avg_t>(t, o, r);
  cases<A, std::int32_t, gs::op::min_t>(t, o, r);
  cases<A, std::int64_t, gs::op::sum_t>(t, o, r);
}

}  // namespace

TEST_CASE("hierarchical: exact and bitwise identical on every shape and inter algorithm") {
  gs::testbed::watchdog wd(240, "hierarchical exactness");
  const std::size_t shapes[][2] = {{2, 2}, {3, 2}, {2, 3}, {1, 4}, {4, 1}, {2, 1}, {1, 1}};
  for (const auto& s : shapes) {
    const std::size_t nodes = s[0], per_node = s[1], n = nodes * per_node;
    CAPTURE(nodes);
    CAPTURE(per_node);
    outcome o{std::vector<std::vector<std::uint64_t>>(n), std::vector<std::size_t>(n),
              std::vector<std::size_t>(n)};
    std::mutex m;
    const auto errors =
        gs::testbed::run_two_level_shape(nodes, per_node, [&](local intra, local inter) {
          two_level t(std::move(intra), std::move(inter));
          const std::size_t r = t.rank();
          {
            std::lock_guard lk(m);
            o.rank_seen.at(r) += 1;
          }
          CHECK(t.size() == n);
          all_types<gs::algo::hierarchical<>>(t, o, r);
          all_types<gs::algo::hierarchical<gs::algo::tree>>(t, o, r);
          all_types<gs::algo::hierarchical<gs::algo::halving_doubling>>(t, o, r);
        });
    for (std::size_t r = 0; r < n; ++r) {
      CAPTURE(r);
      CHECK(errors[r] == "");
      CHECK(o.rank_seen[r] == 1);  // node-major numbering covers every rank once
      CHECK(o.wrong[r] == 0);
      CHECK(o.hashes[r].size() == 3 * 7 * 6);
      CHECK(o.hashes[r] == o.hashes[0]);
    }
  }
}

TEST_CASE("hierarchical: an uneven job is refused at construction, on every rank") {
  gs::testbed::watchdog wd(60, "hierarchical uneven");
  // Node 0 holds ranks 0 and 1, node 1 only rank 2.
  const auto errors = gs::testbed::run_two_level(
      {0, 0, 1}, {0, 1, 0},
      [](local intra, local inter) { two_level t(std::move(intra), std::move(inter)); });
  for (const auto& e : errors) {
    CAPTURE(e);
    CHECK(e.find("nodes must have equal numbers of ranks") != std::string::npos);
    CHECK((e.find("hold 1 to 2 ranks") != std::string::npos ||
           e.find("span 1 to 2 nodes") != std::string::npos));
  }
}

TEST_CASE("hierarchical: Inter groups mixing local indices are refused on every rank") {
  gs::testbed::watchdog wd(60, "hierarchical mixed local indices");
  // 3 nodes x 3; node 2's first two ranks are swapped between Inter groups 0 and 1, so
  // groups 0 and 1 mix local indices and group 2 ({2, 5, 8}) alone is well formed.
  const auto errors = gs::testbed::run_two_level(
      {0, 0, 0, 1, 1, 1, 2, 2, 2}, {0, 1, 2, 0, 1, 2, 1, 0, 2},
      [](local intra, local inter) { two_level t(std::move(intra), std::move(inter)); });
  for (std::size_t r = 0; r < errors.size(); ++r) {
    CAPTURE(r);
    CAPTURE(errors[r]);
    if (r == 2 || r == 5 || r == 8) {
      CHECK(errors[r].find("another rank found the layout") != std::string::npos);
    } else {
      CHECK(errors[r].find("must have the same local index") != std::string::npos);
    }
  }
}

TEST_CASE("hierarchical: a call with a different count fails every rank, naming it") {
  gs::testbed::watchdog wd(60, "hierarchical mismatch");
  const auto errors = gs::testbed::run_two_level_shape(2, 2, [](local intra, local inter) {
    two_level t(std::move(intra), std::move(inter));
    const gs::call_options opt = short_deadline();
    std::vector<float> v(t.rank() == 3 ? 99 : 100, 1.0f);
    gs::allreduce<gs::algo::hierarchical<>>(t, std::span<float>(v), gs::op::sum, opt);
  });
  // Node 1 (ranks 2, 3) names the difference; node 0 is told at once that another node
  // disagrees (not after its deadline: the watchdog and the 20 s timeout bound this).
  for (std::size_t r = 0; r < 4; ++r) {
    CAPTURE(r);
    CAPTURE(errors[r]);
    if (r >= 2) {  // named by global rank: node 1 holds ranks 2 and 3
      CHECK(errors[r].find("rank 3 differs from rank 2 in count 100 vs 99") != std::string::npos);
      CHECK(errors[r].find("on rank " + std::to_string(r)) != std::string::npos);
    } else {
      CHECK(errors[r].find("the ranks of another node called allreduce with different "
                           "arguments") != std::string::npos);
    }
  }
}

TEST_CASE("hierarchical: nodes calling different inter-node algorithms fail every rank") {
  gs::testbed::watchdog wd(60, "hierarchical inter algorithm mismatch");
  const auto errors = gs::testbed::run_two_level_shape(2, 2, [](local intra, local inter) {
    two_level t(std::move(intra), std::move(inter));
    const gs::call_options opt = short_deadline();
    std::vector<float> v(100, 1.0f);
    if (t.intra().rank() == 0 && t.inter().rank() == 1) {
      gs::allreduce<gs::algo::hierarchical<gs::algo::tree>>(t, std::span<float>(v), gs::op::sum,
                                                            opt);
    } else {
      gs::allreduce<gs::algo::hierarchical<>>(t, std::span<float>(v), gs::op::sum, opt);
    }
  });
  for (const auto& e : errors) {
    CAPTURE(e);
    CHECK(
        ((e.find("hier<tree>") != std::string::npos && e.find("hier<ring>") != std::string::npos) ||
         e.find("another node") != std::string::npos));
  }
}

TEST_CASE("hierarchical: avg divides once by the whole group") {
  gs::testbed::watchdog wd(60, "hierarchical avg");
  std::mutex m;
  std::vector<float> got;
  const auto errors = gs::testbed::run_two_level_shape(3, 2, [&](local intra, local inter) {
    two_level t(std::move(intra), std::move(inter));
    // Each rank contributes rank + 1: the mean over 6 ranks is 21 / 6 = 3.5, exact.
    std::vector<float> v(7, static_cast<float>(t.rank() + 1));
    gs::allreduce<gs::algo::hierarchical<>>(t, std::span<float>(v), gs::op::avg);
    std::lock_guard lk(m);
    got.insert(got.end(), v.begin(), v.end());
  });
  for (const auto& e : errors) CHECK(e == "");
  CHECK(got == std::vector<float>(6 * 7, 3.5f));
}
