// SPDX-License-Identifier: Apache-2.0
// algo::halving_doubling — Rabenseifner's allreduce: a recursive-halving reduce-scatter
// (log2 p exchanges of halving size) then a recursive-doubling allgather (log2 p
// exchanges of doubling size). Same bytes on the wire as the ring in far fewer steps,
// so it wins at medium sizes and larger rank counts.
//
// Non-power-of-two n: with p the largest power of two <= n and rem = n - p, the first
// 2*rem ranks fold pairwise (even rank 2i sends its vector to 2i+1, which reduces it in
// and takes virtual rank i; rank 2i sits out), the other ranks take virtual rank r - rem,
// the p virtual ranks run the power-of-two algorithm, and at the end 2i+1 sends the
// result back to 2i.
//
// Bitwise identity: after the reduce-scatter each of the p blocks has exactly one owner,
// which holds its fully combined value and finalizes it (avg divides there); the
// allgather and the unfold only copy those bits.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "gradsync/algo/concept.hpp"
#include "gradsync/algo/detail/erased_op.hpp"
#include "gradsync/algo/detail/erasing_run.hpp"
#include "gradsync/algo/detail/partition.hpp"
#include "gradsync/algo/tuning.hpp"
#include "gradsync/transport/concept.hpp"

namespace gradsync::algo {

struct halving_doubling : detail::erasing_run<halving_doubling> {
  static constexpr std::string_view name = "halving_doubling";
  static constexpr algorithm_traits traits{.generic = true, .on_bytes = true};

  // Its workspace buffer (get<halving_doubling>) holds the reduce-scatter's in-flight
  // receive segments.

  /// run() on `count` elements of op.elem bytes at `base`: one instance per transport.
  template <transport_policy Tr, class Ex>
  static void run_bytes(Tr& t, std::byte* const base, std::size_t count,
                        const detail::erased_op<Ex>& op, const call_context& ctx) {
    const std::size_t n = t.size(), r = t.rank(), elem = op.elem;
    const Ex ex = t.executor();
    if (n == 1 || count == 0) {
      op.finalize(ex, base, count, n);
      return;
    }
    const std::size_t p = std::bit_floor(n), rem = n - p;
    const std::size_t seg =
        std::min(count, std::max<std::size_t>(1, tuning::segment_bytes_for<Tr>() / elem));
    // The largest exchange: the fold's whole vector, else the first halving's half.
    const std::size_t most = rem ? count : (count + 1) / 2;
    const std::size_t k =
        tuning::inflight_segments(t, detail::segments(most, seg), tuning::hd_inflight);
    std::byte* const buf =
        static_cast<std::byte*>(t.scratch().template get<halving_doubling>(k * seg * elem));
    exchanger<Tr, Ex> x{t, ex, op, ctx, buf, seg, k};
    auto at = [&](std::size_t i) { return base + i * elem; };

    // Fold the first 2*rem ranks pairwise.
    if (r < 2 * rem && r % 2 == 0) {
      x.template run<false>(r + 1, base, count, nullptr, 0);  // hand the vector over
      x.template run<false>(r + 1, nullptr, 0, base, count);  // get the result back
      return;
    }
    if (r < 2 * rem) x.template run<true>(r - 1, nullptr, 0, base, count);
    const std::size_t vr = r < 2 * rem ? r / 2 : r - rem;
    auto real = [&](std::size_t v) { return v < rem ? 2 * v + 1 : v + rem; };
    // Element range of blocks [a, b) out of p near-equal blocks.
    auto blocks = [&](std::size_t a, std::size_t b) {
      const std::size_t off = detail::part(count, p, a).offset;
      const std::size_t end = b == p ? count : detail::part(count, p, b).offset;
      return detail::range{off, end - off};
    };

    // Reduce-scatter: keep the half of [lo, hi) on this rank's side of `mask`, send the
    // other half to the partner and reduce the partner's copy of the kept half in.
    std::size_t lo = 0, hi = p;
    for (std::size_t mask = p / 2; mask >= 1; mask /= 2) {
      const std::size_t mid = (lo + hi) / 2;
      const bool upper = (vr & mask) != 0;
      const detail::range keep = upper ? blocks(mid, hi) : blocks(lo, mid);
      const detail::range give = upper ? blocks(lo, mid) : blocks(mid, hi);
      x.template run<true>(real(vr ^ mask), at(give.offset), give.count, at(keep.offset),
                           keep.count);
      (upper ? lo : hi) = mid;
    }
    const detail::range mine = blocks(vr, vr + 1);  // lo == vr here
    op.finalize(ex, at(mine.offset), mine.count, n);

    // Allgather: exchange aligned groups of `mask` blocks, doubling each time.
    for (std::size_t mask = 1; mask < p; mask *= 2) {
      const std::size_t pv = vr ^ mask, a = vr & ~(mask - 1), b = pv & ~(mask - 1);
      const detail::range out = blocks(a, a + mask), in = blocks(b, b + mask);
      x.template run<false>(real(pv), at(out.offset), out.count, at(in.offset), in.count);
    }
    if (r < 2 * rem) x.template run<false>(r - 1, base, count, nullptr, 0);  // unfold
  }

 private:
  // One pairwise exchange: send `sn` elements from `src` to `peer` while receiving `rn`
  // elements from it into `dst` (Reduce: combined into dst through scratch; else copied
  // straight in). Both directions are cut into segments with at most hd_inflight of
  // each posted at a time (all of them across a network); a segment's wait only needs the peer to
  // have reached an earlier segment, so two ranks running this against each other cannot deadlock.
  template <class Tr, class Ex>
  struct exchanger {
    Tr& t;
    const Ex& ex;
    const detail::erased_op<Ex>& op;
    const call_context& ctx;
    std::byte* buf;
    std::size_t seg;  // elements
    std::size_t k;    // segments of each direction in flight (tuning::inflight_segments)

    template <bool Reduce>
    void run(std::size_t peer, const std::byte* src, std::size_t sn, std::byte* dst,
             std::size_t rn) {
      const std::size_t elem = op.elem;
      using req_t = typename Tr::request;
      // Inside a host the window fits on the stack (no allocation per exchange of a
      // latency-bound call); across a network it can hold a whole step.
      std::array<req_t, tuning::hd_inflight> s_small, r_small;
      std::vector<req_t> s_big, r_big;
      if (k > tuning::hd_inflight) {
        s_big.resize(k);
        r_big.resize(k);
      }
      req_t* const sreq = k > tuning::hd_inflight ? s_big.data() : s_small.data();
      req_t* const rreq = k > tuning::hd_inflight ? r_big.data() : r_small.data();
      const std::size_t ms = detail::segments(sn, seg), mr = detail::segments(rn, seg);
      auto rlen = [&](std::size_t j) { return std::min(seg, rn - j * seg); };
      auto post_recv = [&](std::size_t j) {
        std::byte* into = Reduce ? buf + (j % k) * seg * elem : dst + j * seg * elem;
        rreq[j % k] = t.irecv(peer, into, rlen(j) * elem, ctx.tag);
      };
      auto post_send = [&](std::size_t j) {
        sreq[j % k] =
            t.isend(peer, src + j * seg * elem, std::min(seg, sn - j * seg) * elem, ctx.tag);
      };
      for (std::size_t j = 0; j < std::min(k, mr); ++j) post_recv(j);
      for (std::size_t j = 0; j < std::min(k, ms); ++j) post_send(j);
      for (std::size_t j = 0; j < std::max(ms, mr); ++j) {
        if (j < mr) {
          t.wait(rreq[j % k], ctx.until);
          if constexpr (Reduce)
            op.reduce_into(ex, dst + j * seg * elem, buf + (j % k) * seg * elem, rlen(j));
          if (j + k < mr) post_recv(j + k);
        }
        if (j < ms) {
          t.wait(sreq[j % k], ctx.until);
          if (j + k < ms) post_send(j + k);
        }
      }
    }
  };
};

}  // namespace gradsync::algo
