// SPDX-License-Identifier: Apache-2.0
// Finding NaN and Inf in a buffer (call_options::check_finite): an element is not finite
// when its exponent bits are all ones, for float, double, half and bfloat16 alike, so one
// integer mask-and-compare per element decides, in blocks whose flags are OR-ed without a
// branch (the loop vectorises); only a block with a hit is searched for its first index.
// The pack pass of a fused bucket copies and checks in one read (copy_first_non_finite).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "gradsync/config.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/half.hpp"

namespace gradsync::kernels {

/// Whether element type T can hold NaN or Inf (floating types; integers cannot).
template <class T>
inline constexpr bool can_be_non_finite_v = is_floating_element_v<T>;

namespace detail {
// The unsigned integer of T's size, and T's exponent mask in it.
template <class T>
using finite_bits_t =
    std::conditional_t<sizeof(T) == 8, std::uint64_t,
                       std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint16_t>>;
template <class T>
inline constexpr finite_bits_t<T> exponent_mask = std::is_same_v<T, double>
                                                      ? finite_bits_t<T>(0x7ff0000000000000ull)
                                                  : std::is_same_v<T, float>
                                                      ? finite_bits_t<T>(0x7f800000u)
                                                  : std::is_same_v<T, half>
                                                      ? finite_bits_t<T>(0x7c00u)
                                                      : finite_bits_t<T>(0x7f80u);  // bfloat16

inline constexpr std::size_t finite_block = 256;

// Whether any of the n words at w has all exponent bits set; with Copy, copies them to
// dst too. Full blocks run in fixed lanes (constant trip counts), so the loop vectorises
// at -O2 as well, where GCC's cheap cost model refuses loops of unknown length; not
// inlined, so that the restrict qualifiers survive (inlined, the copy stays scalar).
template <bool Copy, class U>
__attribute__((noinline)) bool block_flags(U* GRADSYNC_RESTRICT dst, const U* GRADSYNC_RESTRICT w,
                                           std::size_t n, U mask) {
  constexpr std::size_t lanes = 64 / sizeof(U);
  U any = 0;
  if (n == finite_block) {
    U acc[lanes] = {};
    for (std::size_t i = 0; i < finite_block; i += lanes) {
      for (std::size_t l = 0; l < lanes; ++l) {
        const U v = w[i + l];
        if constexpr (Copy) dst[i + l] = v;
        acc[l] |= static_cast<U>((v & mask) == mask);
      }
    }
    for (std::size_t l = 0; l < lanes; ++l) any |= acc[l];
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      if constexpr (Copy) dst[i] = w[i];
      any |= static_cast<U>((w[i] & mask) == mask);
    }
  }
  return any != 0;
}

// The first non-finite index of src[0..count) (count: none); with dst, copies all of it.
template <class T>
std::size_t scan(T* dst, const T* src, std::size_t count) {
  using U = finite_bits_t<T>;
  constexpr U mask = exponent_mask<T>;
  // Element types are trivially copyable values of their size: their bits are read as U.
  const U* w = reinterpret_cast<const U*>(src);
  U* d = reinterpret_cast<U*>(dst);
  std::size_t found = count;
  for (std::size_t b = 0; b < count; b += finite_block) {
    const std::size_t n = count - b < finite_block ? count - b : finite_block;
    const bool hit = d ? block_flags<true>(d + b, w + b, n, mask)
                       : block_flags<false>(static_cast<U*>(nullptr), w + b, n, mask);
    if (hit && found == count) {
      for (std::size_t i = b; i < b + n; ++i) {
        if ((w[i] & mask) == mask) {
          found = i;
          break;
        }
      }
      if (!d) return found;  // nothing left to copy
    }
  }
  return found;
}
}  // namespace detail

/// The index of the first NaN or Inf among x[0..count), or `count` when every element is
/// finite (always, for integer types).
template <class T>
std::size_t first_non_finite(const T* x, std::size_t count) {
  if constexpr (!can_be_non_finite_v<T>) {
    (void)x;
    return count;
  } else {
    return detail::scan<T>(nullptr, x, count);
  }
}

/// memcpy(dst, src, count elements) and first_non_finite(src, count), in one pass.
template <class T>
std::size_t copy_first_non_finite(T* dst, const T* src, std::size_t count) {
  if constexpr (!can_be_non_finite_v<T>) {
    if (count) std::memcpy(dst, src, count * sizeof(T));
    return count;
  } else {
    return detail::scan<T>(dst, src, count);
  }
}

/// "NaN", "+Inf" or "-Inf" for a non-finite value of T (by its bits).
template <class T>
const char* non_finite_name(const T& v) {
  using U = detail::finite_bits_t<T>;
  U w;
  std::memcpy(&w, &v, sizeof w);
  constexpr U mask = detail::exponent_mask<T>;
  constexpr U sign = U(U(1) << (sizeof(U) * 8 - 1));
  const U mantissa = U(w & U(~mask) & U(~sign));
  if (mantissa) return "NaN";
  return (w & sign) ? "-Inf" : "+Inf";
}

}  // namespace gradsync::kernels
