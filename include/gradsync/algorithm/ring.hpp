// algo::ring — reduce-scatter then allgather around a ring, 2(n-1) steps; each step is
// cut into segments so that receiving segment j+1 overlaps reducing segment j, and a
// reduced segment is forwarded as soon as it is final (detail/ring_pass.hpp).
// Bandwidth-optimal.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

#include "gradsync/algorithm/concept.hpp"
#include "gradsync/algorithm/detail/ring_pass.hpp"
#include "gradsync/transport/concept.hpp"

namespace gradsync::algo {

struct ring {
  static constexpr std::string_view name = "ring";
  static constexpr bool needs_peer_access = false;
  static constexpr bool needs_native = false;

  template <transport_policy Tr, class T, class Op>
  static void run(Tr& t, std::span<T> data, Op op, const call_context& ctx) {
    const std::size_t n = t.size(), count = data.size();
    if (n == 1 || count == 0) {
      t.executor().finalize(data.data(), count, n, op);
      return;
    }
    detail::ring_pass<Tr, T> pass(t, data, ctx);
    pass.reduce_scatter(op, n, true);
    pass.allgather();
    pass.finish();
  }
};

}  // namespace gradsync::algo
