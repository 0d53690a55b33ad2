// SPDX-License-Identifier: Apache-2.0
// algo::reduce_scatter_ring — the reduce-scatter half of algo::ring (detail/ring_pass.hpp):
// n-1 steps, each rank sends (n-1)/n of its input, the least a reduce-scatter can. The
// pass leaves rank r holding chunk r + 1, so the input is laid out rotated by one block
// in a working copy and rank r ends with block r. The entry point is
// gradsync::reduce_scatter (reduce_scatter.hpp).
#pragma once

#include <cstddef>
#include <cstring>
#include <span>
#include <string_view>
#include <type_traits>

#include "gradsync/algo/detail/ring_pass.hpp"
#include "gradsync/algo/tuning.hpp"
#include "gradsync/core/call.hpp"
#include "gradsync/transport/concept.hpp"

namespace gradsync::algo {

struct reduce_scatter_ring {
  static constexpr std::string_view name = "reduce_scatter_ring";
  // Its rotated working copy stays in the workspace (get<reduce_scatter_ring>) across
  // calls: a fresh vector per call costs a zeroing pass and page faults (docs/collectives.md).

  /// out (m elements) := block `rank` of the reduction of every rank's `in` (n blocks of
  /// m elements, block q for rank q); op::avg divides by n. Returns the bytes sent.
  template <transport_policy Tr, class T, class Op>
  static std::size_t run(Tr& t, std::span<const T> in, std::span<T> out, Op op,
                         const call_context& ctx) {
    const std::size_t n = t.size(), m = out.size();
    if (n == 1 || m == 0) {
      if (m) std::memcpy(out.data(), in.data(), m * sizeof(T));
      t.executor().finalize(out.data(), m, n, op);
      return 0;
    }
    // work chunk c holds input block c - 1: the pass reduces chunk r + 1 onto rank r.
    T* const work =
        static_cast<T*>(t.scratch().template get<reduce_scatter_ring>(n * m * sizeof(T)));
    for (std::size_t c = 0; c < n; ++c) {
      std::memcpy(work + c * m, in.data() + ((c + n - 1) % n) * m, m * sizeof(T));
    }
    detail::ring_pass<Tr> pass(t, std::span<T>(work, n * m), ctx);
    pass.reduce_scatter(detail::erase_op_for<T, Op>(t), n, /*forward=*/false);
    pass.finish();
    std::memcpy(out.data(), work + ((t.rank() + 1) % n) * m, m * sizeof(T));
    return (n - 1) * m * sizeof(T);
  }
};

}  // namespace gradsync::algo
