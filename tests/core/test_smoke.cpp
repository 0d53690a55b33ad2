// SPDX-License-Identifier: Apache-2.0
// Smoke test of the core: a ring allreduce on a few in-process ranks gives exact sums.
#include <doctest/doctest.h>

#include <vector>

#include <gradsync/gradsync.hpp>
#include <gradsync/testing/exact_inputs.hpp>

#include "watchdog.hpp"

namespace gs = gradsync;

TEST_CASE("ring sum on 3 local ranks is exact") {
  gradsync::testbed::watchdog wd(60, "ring sum on 3 local ranks");
  std::vector<std::size_t> wrong(3, 99);
  gs::transport::run_local(3, [&](gs::transport::local& t) {
    std::vector<float> v(1001);
    gs::testing::fill_inputs(std::span<float>(v), gs::reduce_op::sum, t.rank(), 3);
    gs::allreduce<gs::algo::ring>(t, std::span<float>(v), gs::op::sum);
    wrong[t.rank()] = gs::testing::count_wrong(std::span<const float>(v), gs::reduce_op::sum, 3);
  });
  CHECK(wrong == std::vector<std::size_t>{0, 0, 0});
}
