// SPDX-License-Identifier: Apache-2.0
// An element type and reduction op reduced to what an algorithm's schedule needs: the
// element's size, what a call header says of the two, the executor's two reductions
// behind function pointers, and the host loops of the algorithms that read peers'
// memory (host_loops.hpp). The schedules run on bytes with it, so each is compiled once
// per transport instead of once per (element type, op): most of the cost of a
// translation unit that instantiates several (docs/build-time.md). The reduction loops
// themselves stay typed; one indirect call per segment is all the erasure costs.
#pragma once

#include <cstddef>
#include <utility>

#include "gradsync/algo/detail/host_loops.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/transport/concept.hpp"

namespace gradsync::algo::detail {

/// What executor type Ex does for one element type and op.
template <class Ex>
struct erased_op {
  using executor_type = Ex;
  std::size_t elem;  ///< bytes per element
  dtype type;        ///< the element type, as a call header names it
  reduce_op id;      ///< the op, as a call header names it
  /// dst[i] = combine(dst[i], src[i]) for n elements.
  void (*reduce_into)(const Ex& ex, std::byte* dst, const std::byte* src, std::size_t n);
  /// The op's final step (avg: divide by `ranks`) on n elements in place.
  void (*finalize)(const Ex& ex, std::byte* data, std::size_t n, std::size_t ranks);
  /// The same type's loops on host memory, for the direct algorithms (algo/direct.hpp);
  /// null over transports without host peer memory (reads_host_peers_v).
  const host_loops* host;
};

/// erased_op for element type T and op Op on executor type Ex; with `Host`, it carries
/// the type's host loops too.
template <class Ex, class T, class Op, bool Host>
constexpr erased_op<Ex> erase_op() {
  return {sizeof(T),
          dtype_of<T>::value,
          Op::id,
          [](const Ex& ex, std::byte* dst, const std::byte* src, std::size_t n) {
            ex.reduce_into(reinterpret_cast<T*>(dst), reinterpret_cast<const T*>(src), n, Op{});
          },
          [](const Ex& ex, std::byte* data, std::size_t n, std::size_t ranks) {
            ex.finalize(reinterpret_cast<T*>(data), n, ranks, Op{});
          },
          Host ? &host_loops_v<T, Op> : nullptr};
}

/// Whether algorithms over Tr may read its peers' memory on the host (the direct ones):
/// only then do its erased ops carry the host loops, which are compiled for them alone.
template <class Tr>
inline constexpr bool reads_host_peers_v = peer_memory_transport<Tr>&& host_transport<Tr>;

/// The erased ops of T and Op over transport Tr, a constant (an allreducer's step table
/// points to it).
template <class Tr, class T, class Op>
inline constexpr erased_op<decltype(std::declval<const Tr&>().executor())> erased_op_v =
    erase_op<decltype(std::declval<const Tr&>().executor()), T, Op, reads_host_peers_v<Tr>>();

/// erased_op_v for T and Op over the transport of t.
template <class T, class Op, class Tr>
const auto& erase_op_for(const Tr&) {
  return erased_op_v<Tr, T, Op>;
}

}  // namespace gradsync::algo::detail
