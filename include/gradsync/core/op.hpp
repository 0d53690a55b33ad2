// SPDX-License-Identifier: Apache-2.0
// Reduction operations: compile-time tags (checked against the element type) with a
// run-time id for the cross-rank consistency header.
#pragma once

#include <concepts>
#include <cstdint>
#include <string_view>

#include "gradsync/core/dtype.hpp"

namespace gradsync {

/// Run-time id of a reduction op.
enum class reduce_op : std::uint8_t { sum = 1, prod, min, max, avg };

/// "sum", "prod", "min", "max" or "avg".
inline constexpr std::string_view op_name(reduce_op o) {
  switch (o) {
    // clang-format off
    case reduce_op::sum: return "sum";
    case reduce_op::prod: return "prod";
    case reduce_op::min: return "min";
    case reduce_op::max: return "max";
    case reduce_op::avg: return "avg";
      // clang-format on
  }
  return "unknown";
}

namespace op {
// clang-format off
/// Elementwise sum.
struct sum_t { static constexpr reduce_op id = reduce_op::sum; /**< its run-time id */ };
/// Elementwise product.
struct prod_t { static constexpr reduce_op id = reduce_op::prod; /**< its run-time id */ };
/// Elementwise minimum.
struct min_t { static constexpr reduce_op id = reduce_op::min; /**< its run-time id */ };
/// Elementwise maximum.
struct max_t { static constexpr reduce_op id = reduce_op::max; /**< its run-time id */ };
/// Sum divided by the number of ranks (floating-point types only); the owner of each
/// element divides once, so every rank receives the same bits.
struct avg_t { static constexpr reduce_op id = reduce_op::avg; /**< its run-time id */ };
// clang-format on

inline constexpr sum_t sum{};    ///< elementwise sum: pass as the op argument
inline constexpr prod_t prod{};  ///< elementwise product: pass as the op argument
inline constexpr min_t min{};    ///< elementwise minimum: pass as the op argument
inline constexpr max_t max{};    ///< elementwise maximum: pass as the op argument
inline constexpr avg_t avg{};    ///< elementwise average: pass as the op argument
}  // namespace op

/// A reduction op tag: op::sum, op::prod, op::min, op::max or op::avg.
template <class Op>
concept reduction_op = requires {
  { Op::id } -> std::convertible_to<reduce_op>;
};

/// Checks that element type T can take Op and explains the fix otherwise.
template <class T, class Op>
constexpr void check_op_for() {
  static_assert(reduction_op<Op>,
                "gradsync: the op must be one of gradsync::op::sum, prod, min, max, avg");
  if constexpr (reduction_op<Op>) {
    static_assert(Op::id != reduce_op::avg || is_floating_element_v<T>,
                  "gradsync: op::avg needs a floating-point element type (float, double, half, "
                  "bfloat16); for integers use op::sum and divide by the rank count yourself");
  }
}

/// Calls f(Op{}) with the tag matching a run-time op id (for benches and tools).
template <class F>
decltype(auto) visit_op(reduce_op o, F&& f) {
  switch (o) {
    // clang-format off
    case reduce_op::prod: return f(op::prod);
    case reduce_op::min: return f(op::min);
    case reduce_op::max: return f(op::max);
    case reduce_op::avg: return f(op::avg);
    case reduce_op::sum: break;
      // clang-format on
  }
  return f(op::sum);
}

}  // namespace gradsync
