// SPDX-License-Identifier: Apache-2.0
// The usual end of a fork_ranks test: every rank exited 0 and reported `count` records,
// none with a wrong element.
#pragma once

#include <doctest/doctest.h>

#include <cstddef>
#include <vector>

#include "fork_ranks.hpp"

namespace gradsync::testbed {

inline void expect_every_record_right(const std::vector<rank_outcome>& out, std::size_t count) {
  for (std::size_t r = 0; r < out.size(); ++r) {
    INFO("rank " << r << ": " << out[r].what);
    CHECK(out[r].status == 0);
    REQUIRE(out[r].records.size() == count);
    for (const auto& rec : out[r].records) {
      INFO(rec.label);
      CHECK(rec.wrong == 0);
    }
  }
}

}  // namespace gradsync::testbed
