// SPDX-License-Identifier: Apache-2.0
// algo::broadcast_chain — the root's bytes along a chain root, root+1, ..., in segments:
// each rank forwards a segment as soon as it has it, so every link carries the message
// once and the time is about one message time plus (n - 2) segment times. Bandwidth-
// optimal (the root must send the message once); for large messages.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "gradsync/algo/detail/partition.hpp"
#include "gradsync/algo/tuning.hpp"
#include "gradsync/core/call.hpp"
#include "gradsync/transport/concept.hpp"

namespace gradsync::algo {

struct broadcast_chain {
  static constexpr std::string_view name = "bcast_chain";
  /// Below this many bytes broadcast.hpp uses broadcast_tree (one hop per round beats
  /// n - 1 hops when the message is short).
  static constexpr std::size_t min_bytes = std::size_t{64} << 10;

  /// data := the root's data, on every rank. Returns the bytes this rank sent.
  template <transport_policy Tr>
  static std::size_t run(Tr& t, std::span<std::byte> data, std::size_t root,
                         const call_context& ctx) {
    const std::size_t n = t.size(), b = data.size();
    if (n == 1 || b == 0) return 0;
    const std::size_t v = (t.rank() + n - root) % n;
    const std::size_t prev = (t.rank() + n - 1) % n, next = (t.rank() + 1) % n;
    const bool receives = v != 0, sends = v + 1 < n;
    const std::size_t seg = tuning::segment_bytes_for<Tr>(), m = detail::segments(b, seg);
    const std::size_t k = std::min<std::size_t>(m, tuning::ring_inflight);
    auto at = [&](std::size_t j) { return data.data() + j * seg; };
    auto len = [&](std::size_t j) { return std::min(seg, b - j * seg); };
    std::vector<typename Tr::request> recvs(k), out;
    std::size_t done = 0;  // sends waited for, in order
    if (receives) {
      for (std::size_t j = 0; j < k; ++j) recvs[j] = t.irecv(prev, at(j), len(j), ctx.tag);
    }
    for (std::size_t j = 0; j < m; ++j) {
      if (receives) {
        t.wait(recvs[j % k], ctx.until);
        if (j + k < m) recvs[j % k] = t.irecv(prev, at(j + k), len(j + k), ctx.tag);
      }
      if (sends) {
        out.push_back(t.isend(next, at(j), len(j), ctx.tag));
        if (out.size() - done > k) t.wait(out[done++], ctx.until);  // k sends in flight
      }
    }
    for (; done < out.size(); ++done) t.wait(out[done], ctx.until);
    return sends ? b : 0;
  }
};

}  // namespace gradsync::algo
