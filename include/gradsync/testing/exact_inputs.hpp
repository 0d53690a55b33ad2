// SPDX-License-Identifier: Apache-2.0
// Exactly representable test inputs (as nccl-tests does): every partial result of every
// op, in every element type, for up to 64 ranks, is an exact small integer, so the
// result is known bit for bit whatever order an algorithm combines in. Used by the
// tests and by the benchmarks' #wrong column.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

#include "gradsync/core/dtype.hpp"
#include "gradsync/core/op.hpp"

namespace gradsync::testing {

/// Converts a small exact integer (held in a double) to element type T.
template <class T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
    return T(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

/// The value rank `rank` of `n` contributes at element `i` for op `o`.
inline double input_value(reduce_op o, std::size_t rank, std::size_t n, std::size_t i) {
  switch (o) {
    case reduce_op::sum:  // partial sums stay <= 256, so exact even in bfloat16
      if (n <= 8) return static_cast<double>((rank % 4 + 1) * (i % 7 + 1));
      return static_cast<double>((rank % 2) * (i % 4 + 1));  // n <= 64
    case reduce_op::prod: {  // +-1 or +-2: products are +-2^k with k <= n/3 + 1
      const double mag = (i + rank) % 3 == 0 ? 2.0 : 1.0;
      return (i + 2 * rank) % 5 == 0 ? -mag : mag;
    }
    case reduce_op::min:
    case reduce_op::max:
      return static_cast<double>(static_cast<long>((i * 31 + rank * 17) % 97) - 48);
    case reduce_op::avg: {  // base(i) plus offsets that cancel in pairs: the mean is base(i)
      const double base = static_cast<double>(static_cast<long>(i % 11) - 5);
      if (rank + 1 == n && n % 2 == 1) return base;
      const double c = static_cast<double>((rank / 2) % 3 + 1);
      return rank % 2 == 0 ? base + c : base - c;
    }
  }
  return 0;
}

/// The exact result at element `i` of op `o` over `n` ranks.
inline double expected_value(reduce_op o, std::size_t n, std::size_t i) {
  if (o == reduce_op::avg) return static_cast<double>(static_cast<long>(i % 11) - 5);
  double acc = input_value(o, 0, n, i);
  for (std::size_t r = 1; r < n; ++r) {
    const double v = input_value(o, r, n, i);
    switch (o) {
      // clang-format off
      case reduce_op::sum: acc += v; break;
      case reduce_op::prod: acc *= v; break;
      case reduce_op::min: acc = v < acc ? v : acc; break;
      case reduce_op::max: acc = v > acc ? v : acc; break;
      case reduce_op::avg: break;
        // clang-format on
    }
  }
  return acc;
}

/// Fills `data` with rank `rank`'s inputs; `first` is the global index of data[0].
template <class T>
void fill_inputs(std::span<T> data, reduce_op o, std::size_t rank, std::size_t n,
                 std::size_t first = 0) {
  for (std::size_t i = 0; i < data.size(); ++i) {
    data[i] = from_double<T>(input_value(o, rank, n, first + i));
  }
}

/// Number of elements whose bits differ from the exact expected result.
template <class T>
std::size_t count_wrong(std::span<const T> data, reduce_op o, std::size_t n,
                        std::size_t first = 0) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < data.size(); ++i) {
    const T want = from_double<T>(expected_value(o, n, first + i));
    // Bits, not values: every rank must hold the same bits (NaN and -0 included).
    // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison)
    if (std::memcmp(&want, &data[i], sizeof(T)) != 0) ++wrong;
  }
  return wrong;
}

/// 64-bit FNV-1a over a byte range (bitwise-identity checks across ranks).
inline std::uint64_t fnv1a64(const void* p, std::size_t bytes,
                             std::uint64_t h = 0xcbf29ce484222325ull) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < bytes; ++i) {
    h ^= b[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace gradsync::testing
