// SPDX-License-Identifier: Apache-2.0
// A deliberately faulty algorithm for the verification tests: algo::ring, then one bit
// of the result flipped on one rank, so the ranks end with different bits.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

#include <gradsync/algo/ring.hpp>

namespace gradsync::testbed {

/// Rank `Bad` (the last rank when Bad is last_rank) flips bit 4 of its result's middle
/// element's first byte after an exact ring allreduce.
inline constexpr std::size_t last_rank = ~std::size_t{0};
template <std::size_t Bad>
struct ring_then_flip {
  static constexpr std::string_view name = "ring_then_flip";
  static constexpr algorithm_traits traits{};
  template <class Tr, class T, class Op>
  static void run(Tr& t, std::span<T> data, Op op, const call_context& c) {
    algo::ring::run(t, data, op, c);
    const std::size_t bad = Bad == last_rank ? t.size() - 1 : Bad;
    if (t.rank() == bad && !data.empty()) {
      reinterpret_cast<unsigned char*>(data.data() + data.size() / 2)[0] ^= 0x10;
    }
  }
};

}  // namespace gradsync::testbed
