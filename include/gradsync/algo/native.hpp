// SPDX-License-Identifier: Apache-2.0
// algo::native — the transport's own allreduce (MPI_Iallreduce for transport::mpi,
// ncclAllReduce for transport::nccl) as a baseline for the other algorithms. The
// transport declares the trait `native_allreduce = true` and provides the member
//   template <class T, class Op>
//   void allreduce_native(T* data, std::size_t count, Op op, const call_context& ctx);
// (a different name: a class cannot have a data member and a function both called
// native_allreduce)
// which reduces in place, honours ctx.until and, for op::avg, leaves every rank with the
// same bits (sum first, then the same division on every rank).
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

#include "gradsync/algo/concept.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/transport/concept.hpp"

namespace gradsync::algo {

/// A transport whose own allreduce algo::native can call for element type T and op Op.
template <class Tr, class T, class Op>
concept native_callable = requires(Tr& t, T* p, std::size_t n, Op op, const call_context& c) {
  t.allreduce_native(p, n, op, c);  // in-place allreduce of n elements under c.until
};

struct native {
  static constexpr std::string_view name = "native";
  static constexpr algorithm_traits traits{.needs_native = true};

  template <transport_policy Tr, class T, class Op>
  static void run(Tr& t, std::span<T> data, Op op, const call_context& ctx) {
    static_assert(Tr::native_allreduce,
                  "gradsync: algo::native calls the transport's own allreduce and this transport "
                  "has none; use transport::mpi (or nccl), or algo::ring / algo::auto_select");
    static_assert(!Tr::native_allreduce || native_callable<Tr, T, Op>,
                  "gradsync: the transport sets native_allreduce = true but has no member "
                  "allreduce_native(T*, std::size_t, Op, const call_context&); add it or set "
                  "native_allreduce = false");
    if constexpr (Tr::native_allreduce && native_callable<Tr, T, Op>) {
      if (!data.empty()) t.allreduce_native(data.data(), data.size(), op, ctx);
    }
  }
};

}  // namespace gradsync::algo
