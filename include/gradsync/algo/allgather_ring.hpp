// SPDX-License-Identifier: Apache-2.0
// algo::allgather_ring — every rank's block of equal size to every rank, around a ring:
// n-1 steps, at step s each rank forwards block (r - s) to its right neighbour and
// receives block (r - s - 1) from its left. Each rank sends (n-1) blocks, the least an
// allgather can. The entry point is gradsync::allgather (allgather.hpp).
#pragma once

#include <cstddef>
#include <cstring>
#include <span>
#include <string_view>

#include "gradsync/core/call.hpp"
#include "gradsync/transport/concept.hpp"

namespace gradsync::algo {

struct allgather_ring {
  static constexpr std::string_view name = "allgather_ring";

  /// out (n blocks of mine.size() bytes, rank order) := every rank's `mine`. Returns the
  /// bytes this rank sent.
  template <transport_policy Tr>
  static std::size_t run(Tr& t, std::span<const std::byte> mine, std::span<std::byte> out,
                         const call_context& ctx) {
    const std::size_t n = t.size(), r = t.rank(), b = mine.size();
    if (b) std::memcpy(out.data() + r * b, mine.data(), b);
    if (n == 1 || b == 0) return 0;
    const std::size_t right = (r + 1) % n, left = (r + n - 1) % n;
    for (std::size_t s = 0; s + 1 < n; ++s) {
      const std::size_t send_block = (r + n - s) % n, recv_block = (r + 2 * n - s - 1) % n;
      auto rq = t.irecv(left, out.data() + recv_block * b, b, ctx.tag);
      auto sq = t.isend(right, out.data() + send_block * b, b, ctx.tag);
      t.wait(rq, ctx.until);
      t.wait(sq, ctx.until);
    }
    return (n - 1) * b;
  }
};

}  // namespace gradsync::algo
