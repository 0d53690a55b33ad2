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

#include "gradsync/algo/detail/host_loops.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/op.hpp"

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
  /// The same type's loops on host memory, for the direct algorithms (algo/direct.hpp).
  const host_loops* host;
};

/// erased_op for element type T and op Op on executor type Ex.
template <class Ex, class T, class Op>
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
          &host_loops_v<T, Op>};
}

/// erase_op<Ex, T, Op>() as a constant, which an allreducer's step table points to.
template <class Ex, class T, class Op>
inline constexpr erased_op<Ex> erased_op_v = erase_op<Ex, T, Op>();

/// erased_op for T and Op on the executor of transport t.
template <class T, class Op, class Tr>
auto erase_op_for(const Tr& t) {
  return erase_op<decltype(t.executor()), T, Op>();
}

}  // namespace gradsync::algo::detail
