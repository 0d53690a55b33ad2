// SPDX-License-Identifier: Apache-2.0
// The typed entry of an algorithm that runs on bytes (algorithm_traits::on_bytes): run()
// erases the element type and op once and calls the algorithm's run_bytes, so each
// algorithm writes its schedule once, on bytes.
#pragma once

#include <cstddef>
#include <span>

#include "gradsync/algo/detail/erased_op.hpp"
#include "gradsync/core/call.hpp"
#include "gradsync/transport/concept.hpp"

namespace gradsync::algo::detail {

/// Base of an algorithm A with `run_bytes`: `struct ring : detail::erasing_run<ring>`.
template <class A>  ///< the algorithm deriving from it
struct erasing_run {
  /// The in-place allreduce of `data`: A::run_bytes on its bytes, T and Op erased.
  template <transport_policy Tr, class T, class Op>
  static void run(Tr& t, std::span<T> data, Op, const call_context& ctx) {
    A::run_bytes(t, reinterpret_cast<std::byte*>(data.data()), data.size(), erase_op_for<T, Op>(t),
                 ctx);
  }
};

}  // namespace gradsync::algo::detail
