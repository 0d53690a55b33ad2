// SPDX-License-Identifier: Apache-2.0
// algo::nccl_ring — the ring allreduce on transport::nccl, written so that every NCCL
// group is matched: at each of the 2(n-1) steps every rank puts exactly {send one chunk
// to the right, receive one chunk from the left} in one group, so the group of rank r
// and the group of rank r+1 complete together (no cycle of unmatched sends, see
// nccl.hpp). The received chunk lands in device scratch and is reduced into place by a
// kernel on the same stream (the owner divides its chunk once for avg);
// the allgather receives straight into place. Each element is reduced once, by its
// owner, then copied: bitwise-identical results on every rank. Nothing waits on the host.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "gradsync/algo/concept.hpp"
#include "gradsync/algo/detail/partition.hpp"
#include "gradsync/core/device_memory.hpp"
#include "gradsync/transport/nccl.hpp"

namespace gradsync::algo {

/// What nccl_ring needs from a transport: point-to-point whose every {send, recv} pair
/// is one matched group, an executor, and persistent scratch where the data lives.
template <class Tr>
concept ring_device_transport = requires(Tr& t, const void* cp, void* p, std::size_t n,
                                         deadline d) {
  { t.isend(n, cp, n, std::uint32_t{}) } -> std::same_as<typename Tr::request>;
  { t.irecv(n, p, n, std::uint32_t{}) } -> std::same_as<typename Tr::request>;
  { t.device_scratch(n) } -> std::same_as<void*>;
  t.executor();
};

struct nccl_ring {
  static constexpr std::string_view name = "nccl_ring";
  static constexpr algorithm_traits traits{};

  /// Tr: transport::nccl (or any ring_device_transport: the CPU test runs it over
  /// transport::local with host scratch and the host executor).
  template <ring_device_transport Tr, class T, class Op>
  static void run_device(Tr& t, device_span<T> data, Op op, const call_context& ctx) {
    const std::size_t n = t.size(), r = t.rank(), count = data.size();
    auto ex = t.executor();
    if (n == 1 || count == 0) {
      ex.finalize(data.data(), count, n, op);
      return;
    }
    const std::size_t right = (r + 1) % n, left = (r + n - 1) % n;
    T* base = data.data();
    auto chunk = [&](std::size_t c) { return detail::part(count, n, c % n); };
    T* buf = static_cast<T*>(t.device_scratch(chunk(0).count * sizeof(T)));  // largest chunk
    // Reduce-scatter: step k sends chunk r-k, receives chunk r-k-1 and reduces it in.
    for (std::size_t k = 0; k + 1 < n; ++k) {
      const detail::range sc = chunk(r + n - k), rc = chunk(r + 2 * n - k - 1);
      auto sq = t.isend(right, base + sc.offset, sc.count * sizeof(T), ctx.tag);
      auto rq = t.irecv(left, buf, rc.count * sizeof(T), ctx.tag);
      t.wait(sq, ctx.until);  // nccl: one group {send, recv}
      t.wait(rq, ctx.until);
      ex.reduce_into(base + rc.offset, buf, rc.count, op);
      if (k + 2 == n) ex.finalize(base + rc.offset, rc.count, n, op);  // rc: the owned chunk
    }
    // Allgather: step k forwards chunk r+1-k, receives chunk r-k in place.
    for (std::size_t k = 0; k + 1 < n; ++k) {
      const detail::range sc = chunk(r + 1 + n - k), rc = chunk(r + n - k);
      auto sq = t.isend(right, base + sc.offset, sc.count * sizeof(T), ctx.tag);
      auto rq = t.irecv(left, base + rc.offset, rc.count * sizeof(T), ctx.tag);
      t.wait(sq, ctx.until);
      t.wait(rq, ctx.until);
    }
  }
};

}  // namespace gradsync::algo
