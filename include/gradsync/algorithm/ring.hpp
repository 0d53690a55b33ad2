// algo::ring — reduce-scatter then allgather around a ring, 2(n-1) steps; each step is
// cut into segments so that receiving segment j+1 overlaps reducing segment j, and a
// reduced segment is forwarded as soon as it is final. Bandwidth-optimal.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "gradsync/algorithm/concept.hpp"
#include "gradsync/algorithm/detail/partition.hpp"
#include "gradsync/algorithm/tuning.hpp"
#include "gradsync/transport/concept.hpp"

namespace gradsync::algo {

struct ring {
  static constexpr std::string_view name = "ring";
  static constexpr bool needs_peer_access = false;
  static constexpr bool needs_native = false;

  /// Scratch slot the ring uses for its in-flight receive buffers.
  static constexpr std::size_t scratch_slot = 0;

  template <transport_policy Tr, class T, class Op>
  static void run(Tr& t, std::span<T> data, Op op, const call_context& ctx) {
    const std::size_t n = t.size(), r = t.rank(), count = data.size();
    auto ex = t.executor();
    if (n == 1 || count == 0) {
      ex.finalize(data.data(), count, n, op);
      return;
    }
    const std::size_t right = (r + 1) % n, left = (r + n - 1) % n;
    const std::size_t seg = std::max<std::size_t>(1, tuning::segment_bytes_for<Tr>() / sizeof(T));
    constexpr std::size_t K = tuning::ring_inflight;
    T* buf = static_cast<T*>(t.scratch().get(scratch_slot, K * seg * sizeof(T)));
    T* base = data.data();
    using req_t = typename Tr::request;
    std::vector<req_t> sends, next_sends, recvs(K);

    auto chunk = [&](std::size_t c) { return detail::part(count, n, c % n); };
    auto send_segments = [&](std::vector<req_t>& out, detail::range c) {
      for (std::size_t off = 0; off < c.count; off += seg) {
        const std::size_t len = std::min(seg, c.count - off);
        out.push_back(t.isend(right, base + c.offset + off, len * sizeof(T), ctx.tag));
      }
    };
    auto wait_all = [&](std::vector<req_t>& v) {
      for (auto& q : v) t.wait(q, ctx.until);
      v.clear();
    };

    // Reduce-scatter: at step s send chunk r-s, receive chunk r-s-1 and reduce it in.
    send_segments(sends, chunk(r));
    for (std::size_t s = 0; s + 1 < n; ++s) {
      const detail::range rc = chunk(r + 2 * n - s - 1);
      const std::size_t m = detail::segments(rc.count, seg);
      const bool last = s + 2 == n;  // rc is then the chunk this rank owns
      auto len_of = [&](std::size_t j) { return std::min(seg, rc.count - j * seg); };
      for (std::size_t j = 0; j < std::min(K, m); ++j) {
        recvs[j] = t.irecv(left, buf + j * seg, len_of(j) * sizeof(T), ctx.tag);
      }
      for (std::size_t j = 0; j < m; ++j) {
        t.wait(recvs[j % K], ctx.until);
        T* dst = base + rc.offset + j * seg;
        ex.reduce_into(dst, buf + (j % K) * seg, len_of(j), op);
        if (last) ex.finalize(dst, len_of(j), n, op);
        if (j + K < m) {
          recvs[j % K] = t.irecv(left, buf + (j % K) * seg, len_of(j + K) * sizeof(T), ctx.tag);
        }
        next_sends.push_back(t.isend(right, dst, len_of(j) * sizeof(T), ctx.tag));
      }
      wait_all(sends);
      std::swap(sends, next_sends);
    }

    // Allgather: at step s forward chunk r+1-s, receive chunk r-s in place.
    for (std::size_t s = 0; s + 1 < n; ++s) {
      const detail::range rc = chunk(r + n - s);
      const std::size_t m = detail::segments(rc.count, seg);
      std::vector<req_t>& in = recvs;
      in.clear();
      for (std::size_t j = 0; j < m; ++j) {
        const std::size_t len = std::min(seg, rc.count - j * seg);
        in.push_back(t.irecv(left, base + rc.offset + j * seg, len * sizeof(T), ctx.tag));
      }
      for (std::size_t j = 0; j < m; ++j) {
        t.wait(in[j], ctx.until);
        if (s + 2 < n) {
          const std::size_t len = std::min(seg, rc.count - j * seg);
          next_sends.push_back(
              t.isend(right, base + rc.offset + j * seg, len * sizeof(T), ctx.tag));
        }
      }
      wait_all(sends);
      std::swap(sends, next_sends);
      recvs.resize(K);
    }
    wait_all(sends);
  }
};

}  // namespace gradsync::algo
