// SPDX-License-Identifier: Apache-2.0
// algo::broadcast_tree — the root's bytes to every rank along a binomial tree: ceil(log2 n)
// rounds, the whole message per hop. Least latency; for small messages (broadcast.hpp
// picks it below algo::broadcast_chain's threshold).
#pragma once

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "gradsync/core/call.hpp"
#include "gradsync/transport/concept.hpp"

namespace gradsync::algo {

struct broadcast_tree {
  static constexpr std::string_view name = "bcast_tree";

  /// data := the root's data, on every rank. Returns the bytes this rank sent.
  template <transport_policy Tr>
  static std::size_t run(Tr& t, std::span<std::byte> data, std::size_t root,
                         const call_context& ctx) {
    const std::size_t n = t.size(), b = data.size();
    if (n == 1 || b == 0) return 0;
    const std::size_t v = (t.rank() + n - root) % n;  // rank relative to the root
    auto real = [&](std::size_t rel) { return (rel + root) % n; };
    // Receive from the parent: v minus its lowest set bit.
    std::size_t mask = 1;
    while (mask < n) {
      if (v & mask) {
        auto q = t.irecv(real(v - mask), data.data(), b, ctx.tag);
        t.wait(q, ctx.until);
        break;
      }
      mask <<= 1;
    }
    // Send to the children: v + each lower power of two that stays in range.
    std::vector<typename Tr::request> sends;
    for (mask >>= 1; mask > 0; mask >>= 1) {
      if (v + mask < n) sends.push_back(t.isend(real(v + mask), data.data(), b, ctx.tag));
    }
    for (auto& q : sends) t.wait(q, ctx.until);
    return sends.size() * b;
  }
};

}  // namespace gradsync::algo
