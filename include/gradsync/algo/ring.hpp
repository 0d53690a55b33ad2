// SPDX-License-Identifier: Apache-2.0
// algo::ring — reduce-scatter then allgather around a ring, 2(n-1) steps; each step is
// cut into segments so that receiving segment j+1 overlaps reducing segment j, and a
// reduced segment is forwarded as soon as it is final (detail/ring_pass.hpp).
// Bandwidth-optimal.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

#include "gradsync/algo/concept.hpp"
#include "gradsync/algo/detail/erased_op.hpp"
#include "gradsync/algo/detail/erasing_run.hpp"
#include "gradsync/algo/detail/ring_pass.hpp"
#include "gradsync/algo/tuning.hpp"
#include "gradsync/transport/concept.hpp"

namespace gradsync::algo {

struct ring : detail::erasing_run<ring> {
  static constexpr std::string_view name = "ring";
  static constexpr algorithm_traits traits{.generic = true, .on_bytes = true};

  /// run() on `count` elements of op.elem bytes at `base`: one instance per transport.
  template <transport_policy Tr, class Ex>
  static void run_bytes(Tr& t, std::byte* base, std::size_t count, const detail::erased_op<Ex>& op,
                        const call_context& ctx) {
    const std::size_t n = t.size();
    if (n == 1 || count == 0) {
      op.finalize(t.executor(), base, count, n);
      return;
    }
    // Two ranks across a network: the owned chunk goes out when the allgather starts, not
    // segment by segment during the reduce-scatter. Sends the peer has not posted
    // receives for yet cost MPICH over UCX's TCP transport a third more (raw MPI, 2 hosts
    // x 1 rank, 1 Gbit/s, 64 MiB: 742-774 ms against 614; Open MPI 585-587 against
    // 578-589; docs/cluster.md).
    const bool forward = !(n == 2 && tuning::crosses_network(t));
    detail::ring_pass<Tr> pass(t, base, count, op.elem, ctx);
    pass.reduce_scatter(op, n, forward);
    pass.allgather();
    pass.finish();
  }
};

}  // namespace gradsync::algo
