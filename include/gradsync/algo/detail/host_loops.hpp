// SPDX-License-Identifier: Apache-2.0
// The typed loops an algorithm that reads peers' memory on the host runs (algo/direct.hpp),
// behind function pointers: one table per (element type, op), so that the direct
// algorithms are compiled once per transport, on bytes, as the message-passing ones are
// (erased_op.hpp). Each pointer is called once per L1-sized block.
#pragma once

#include <cstddef>
#include <cstring>

#include "gradsync/kernels/finite.hpp"
#include "gradsync/kernels/host.hpp"

namespace gradsync::algo::detail {

/// An element type and op's host loops; counts are in elements.
struct host_loops {
  /// dst[i] = a[i] (+) b[i] for n elements.
  void (*reduce_to)(std::byte* dst, const std::byte* a, const std::byte* b, std::size_t n);
  /// dst[i] = dst[i] (+) src[i] for n elements.
  void (*reduce_into)(std::byte* dst, const std::byte* src, std::size_t n);
  /// The op's final step (avg: divide by `ranks`) on n elements in place.
  void (*finalize)(std::byte* data, std::size_t n, std::size_t ranks);
  /// Whether an element can be NaN or Inf (a floating-point type).
  bool can_be_non_finite;
  /// The index of the first NaN or Inf among x[0..n), or n.
  std::size_t (*first_non_finite)(const std::byte* x, std::size_t n);
  /// memcpy of n elements and first_non_finite of the source, in one pass.
  std::size_t (*copy_first_non_finite)(std::byte* dst, const std::byte* src, std::size_t n);
  /// "NaN", "+Inf" or "-Inf" for the element at v (non-finite; "" for integer types).
  const char* (*non_finite_name)(const std::byte* v);
};

/// The host loops of element type T and op Op.
template <class T, class Op>
inline constexpr host_loops host_loops_v{
    [](std::byte* dst, const std::byte* a, const std::byte* b, std::size_t n) {
      kernels::reduce_to(reinterpret_cast<T*>(dst), reinterpret_cast<const T*>(a),
                         reinterpret_cast<const T*>(b), n, Op{});
    },
    [](std::byte* dst, const std::byte* src, std::size_t n) {
      kernels::reduce_into(reinterpret_cast<T*>(dst), reinterpret_cast<const T*>(src), n, Op{});
    },
    [](std::byte* data, std::size_t n, std::size_t ranks) {
      kernels::finalize(reinterpret_cast<T*>(data), n, ranks, Op{});
    },
    kernels::can_be_non_finite_v<T>,
    [](const std::byte* x, std::size_t n) {
      return kernels::first_non_finite(reinterpret_cast<const T*>(x), n);
    },
    [](std::byte* dst, const std::byte* src, std::size_t n) {
      return kernels::copy_first_non_finite(reinterpret_cast<T*>(dst),
                                            reinterpret_cast<const T*>(src), n);
    },
    [](const std::byte* v) -> const char* {
      if constexpr (kernels::can_be_non_finite_v<T>) {
        T x;
        std::memcpy(&x, v, sizeof x);
        return kernels::non_finite_name(x);
      } else {
        (void)v;
        return "";
      }
    }};

}  // namespace gradsync::algo::detail
