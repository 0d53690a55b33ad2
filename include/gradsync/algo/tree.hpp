// SPDX-License-Identifier: Apache-2.0
// algo::tree — double binary tree allreduce (as NCCL does). The data is split in two
// halves; half 0 is reduced up tree A to its root and broadcast back down A, half 1 does
// the same on tree B, whose interior nodes are A's leaves (see detail/btree.hpp), so both
// trees together use every link in both directions. Each half is cut into segments and
// pipelined: a node at depth d of a tree of height D handles the reduce of segment j in
// step j + D - d and its broadcast in step j + D + d, so while segment j travels up,
// earlier segments travel down. Latency is O(log n) hops plus one hop per segment.
//
// Bitwise identity: every element is combined in a fixed order (own value, then
// children in ascending position) on the way up, finalized once at the root (avg divides
// there), and every other rank receives the root's bits.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <string_view>

#include "gradsync/algo/concept.hpp"
#include "gradsync/algo/detail/btree.hpp"
#include "gradsync/algo/detail/erased_op.hpp"
#include "gradsync/algo/detail/erasing_run.hpp"
#include "gradsync/algo/detail/partition.hpp"
#include "gradsync/algo/tuning.hpp"
#include "gradsync/transport/concept.hpp"

namespace gradsync::algo {

struct tree : detail::erasing_run<tree> {
  static constexpr std::string_view name = "tree";
  static constexpr algorithm_traits traits{.generic = true, .on_bytes = true};

  // Its workspace buffer (get<tree>) holds the reduce-up receives: 2 trees x 2
  // children x 2 (double buffering) segments.

  // Schedule, per tree, for a node at depth d (D = the tree's height), segment j:
  //   step j+D-d-1  post the receives of segment j from the children (scratch)
  //   step j+D-d    wait for them, reduce them in; post the send to the parent
  //                 (the root instead finalizes and posts the sends to its children)
  //   step j+D-d+1  wait for the send to the parent
  //   step j+D+d-1  post the receive of the reduced segment j from the parent (in place)
  //   step j+D+d    wait for it; post the sends to the children
  //   step j+D+d+1  wait for the sends to the children
  // Within a step every rank first waits for its previous step's sends, then posts this
  // step's receives, then waits for receives posted in the previous step. Every wait in
  // step s is therefore matched by an operation a peer posted in a step < s (or in an
  // earlier phase of step s before any wait), so no rank can wait on a rank that waits
  // on it: the schedule is deadlock-free even when sends complete only on a matching
  // receive (rendezvous). Per pair of ranks and step there is at most one message per
  // tree, posted tree A first on both sides, so FIFO matching on one tag is exact.

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
    using req_t = typename Tr::request;
    using step_t = std::ptrdiff_t;
    constexpr std::size_t none = detail::tree_node::none;
    const std::size_t half_max = detail::part(count, 2, 0).count;
    const std::size_t seg =
        std::min(half_max, std::max<std::size_t>(1, tuning::segment_bytes / elem));
    std::byte* const buf = static_cast<std::byte*>(t.scratch().template get<tree>(8 * seg * elem));

    struct lane {
      detail::tree_node node;
      std::size_t offset = 0, count = 0, segs = 0;
      step_t up0 = 0, down0 = 0;                    // steps of segment 0's reduce and broadcast
      std::array<std::array<req_t, 2>, 2> up_recv;  // [child][j % 2]
      std::array<req_t, 2> down_recv;               // [j % 2]
      std::array<req_t, 2> down_send;               // [child]
      req_t up_send;
    };
    std::array<lane, 2> lanes;
    std::size_t steps = 0;
    for (std::size_t w = 0; w < 2; ++w) {
      lane& l = lanes[w];
      l.node = detail::btree_node(n, static_cast<int>(w), r);
      const detail::range h = detail::part(count, 2, w);
      l.offset = h.offset;
      l.count = h.count;
      l.segs = detail::segments(h.count, seg);
      const auto big_d = static_cast<step_t>(l.node.max_depth);
      const auto d = static_cast<step_t>(l.node.depth);
      l.up0 = big_d - d;
      l.down0 = big_d + d;
      steps = std::max(steps, l.segs + 2 * l.node.max_depth + 2);
    }
    // Segment of lane l handled at step s by the stage starting at `first`, if any.
    auto seg_at = [](const lane& l, step_t s, step_t first, std::size_t& j) {
      if (s < first || static_cast<std::size_t>(s - first) >= l.segs) return false;
      j = static_cast<std::size_t>(s - first);
      return true;
    };
    auto ptr = [&](const lane& l, std::size_t j) { return base + (l.offset + j * seg) * elem; };
    auto bytes = [&](const lane& l, std::size_t j) {
      return std::min(seg, l.count - j * seg) * elem;
    };
    auto slot = [&](std::size_t w, std::size_t c, std::size_t j) {
      return buf + ((w * 2 + c) * 2 + j % 2) * seg * elem;
    };

    for (std::size_t step = 0; step < steps; ++step) {
      const auto s = static_cast<step_t>(step);
      std::size_t j = 0;
      // 1. Complete the sends posted in the previous step.
      for (lane& l : lanes) {
        if (l.node.parent != none && seg_at(l, s - 1, l.up0, j)) t.wait(l.up_send, ctx.until);
        if (seg_at(l, s - 1, l.down0, j)) {
          for (std::size_t c = 0; c < l.node.children; ++c) t.wait(l.down_send[c], ctx.until);
        }
      }
      // 2. Post the receives that the peers' sends of this step will match.
      for (std::size_t w = 0; w < 2; ++w) {
        lane& l = lanes[w];
        if (seg_at(l, s + 1, l.up0, j)) {
          for (std::size_t c = 0; c < l.node.children; ++c) {
            l.up_recv[c][j % 2] = t.irecv(l.node.child[c], slot(w, c, j), bytes(l, j), ctx.tag);
          }
        }
        if (l.node.parent != none && seg_at(l, s + 1, l.down0, j)) {
          l.down_recv[j % 2] = t.irecv(l.node.parent, ptr(l, j), bytes(l, j), ctx.tag);
        }
      }
      // 3. Reduce segments up and forward segments down.
      for (std::size_t w = 0; w < 2; ++w) {
        lane& l = lanes[w];
        if (seg_at(l, s, l.up0, j)) {
          std::byte* dst = ptr(l, j);
          const std::size_t len = bytes(l, j) / elem;
          for (std::size_t c = 0; c < l.node.children; ++c) {
            t.wait(l.up_recv[c][j % 2], ctx.until);
            op.reduce_into(ex, dst, slot(w, c, j), len);
          }
          if (l.node.parent == none) {
            op.finalize(ex, dst, len, n);
            for (std::size_t c = 0; c < l.node.children; ++c) {
              l.down_send[c] = t.isend(l.node.child[c], dst, bytes(l, j), ctx.tag);
            }
          } else {
            l.up_send = t.isend(l.node.parent, dst, bytes(l, j), ctx.tag);
          }
        }
        if (l.node.parent != none && seg_at(l, s, l.down0, j)) {
          t.wait(l.down_recv[j % 2], ctx.until);
          for (std::size_t c = 0; c < l.node.children; ++c) {
            l.down_send[c] = t.isend(l.node.child[c], ptr(l, j), bytes(l, j), ctx.tag);
          }
        }
      }
    }
  }
};

}  // namespace gradsync::algo
