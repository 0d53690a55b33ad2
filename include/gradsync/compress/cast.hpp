// SPDX-License-Identifier: Apache-2.0
// compress::cast<Wire> (compress::fp16, compress::bf16): float and double gradients are
// reduced as 16-bit floats, so every collective moves half the bytes (a quarter for
// double). Its codec converts each bucket to Wire before the collective and back after
// it (kernels::cast; AVX2/F16C on x86); the allreducer only calls the codec. Other
// element types go unchanged.
//
// What it costs: the reduction happens in Wire precision (each partial sum rounded to
// Wire), so results differ from the uncompressed ones, but they are still bitwise
// identical on every rank. For op::avg each rank divides by the rank count before
// converting, and the wire sums (what PyTorch's fp16 compression hook does): the values
// on the wire are n times smaller, so a sum cannot overflow half's range (65504) where
// the average does not; small gradients lose more to half's subnormal range in exchange.
// bfloat16 has float's range and 8 bits of precision; half has 11 bits and range 6e-8..65504.
#pragma once

#include <cstddef>
#include <string_view>
#include <type_traits>

#include "gradsync/core/half.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/kernels/host.hpp"

namespace gradsync::compress {

template <class Wire>  ///< the 16-bit type on the wire: gradsync::half or gradsync::bfloat16
struct cast {
  static_assert(std::is_same_v<Wire, half> || std::is_same_v<Wire, bfloat16>,
                "gradsync::compress::cast<Wire>: Wire must be gradsync::half or "
                "gradsync::bfloat16 (or use compress::fp16 / compress::bf16)");
  static constexpr std::string_view name = std::is_same_v<Wire, half> ? "fp16" : "bf16";
  /// float and double travel as Wire; every other type as itself.
  template <class T>
  using wire_t = std::conditional_t<std::is_same_v<T, float> || std::is_same_v<T, double>, Wire, T>;

  /// A bucket of T (float, double) through a collective of Op: encoded to Wire, summed or
  /// reduced on the wire by the algorithm (a cast is summable), decoded back.
  template <class T, class Op>
  struct codec {
    using wire_type = wire_t<T>;
    /// avg divides before converting (the rule above), so the wire only sums.
    using wire_op = std::conditional_t<Op::id == reduce_op::avg, op::sum_t, Op>;
    /// wire[i] = Wire(finalize(x[i])): for avg x[i] / ranks, in one pass.
    static void encode(wire_type* wire, const T* x, std::size_t count, std::size_t ranks) {
      kernels::finalize_cast(wire, x, count, ranks, Op{});
    }
    static void decode(T* x, const wire_type* wire, std::size_t count) {
      kernels::cast(x, wire, count);
    }
  };
};

/// Gradients on the wire as IEEE half (11-bit precision, max 65504).
using fp16 = cast<half>;
/// Gradients on the wire as bfloat16 (8-bit precision, float's range).
using bf16 = cast<bfloat16>;

}  // namespace gradsync::compress
