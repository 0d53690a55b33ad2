// SPDX-License-Identifier: Apache-2.0
// Blockwise int8 quantisation (compress::int8): each block of values is scaled by
// levels / absmax into integer codes in [-levels, levels]. The element functors are
// GRADSYNC_HOST_DEVICE so the CPU tests check the arithmetic a GPU would run; the block
// loops below are for host memory (plain loops the compiler vectorises).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "gradsync/config.hpp"

namespace gradsync::kernels {

/// The code of x at `inv` = levels / scale: x * inv rounded to nearest even, clamped to
/// [-levels, levels]; NaN gives 0 (its block's scale, NaN or Inf, poisons the decoded
/// block instead). Adding and subtracting 1.5 * 2^mantissa rounds without a libm call, so
/// the loop vectorises (under -ffast-math it truncates: still the same on every rank).
template <class F>
GRADSYNC_HOST_DEVICE inline std::int8_t quant_code(F x, F inv, F levels) {
  F y = x * inv;
  y = y < -levels ? -levels : y;
  y = y > levels ? levels : y;
  y = y == y ? y : F(0);
  const F magic = std::is_same_v<F, float> ? F(12582912.0f) : F(6755399441055744.0);
  return static_cast<std::int8_t>(static_cast<int>((y + magic) - magic));
}

/// The value of a (summed) code at `step` = scale / levels (/ ranks for an average).
template <class F>
GRADSYNC_HOST_DEVICE inline F dequant(std::int8_t code, F step) {
  return static_cast<F>(code) * step;
}

/// scales[b] = max |x| over block b (blocks of `block` elements; the last may be short).
template <class T>
void block_absmax(float* scales, const T* x, std::size_t count, std::size_t block) {
  for (std::size_t b = 0, i0 = 0; i0 < count; ++b, i0 += block) {
    const std::size_t end = i0 + block < count ? i0 + block : count;
    T m = 0;
    for (std::size_t i = i0; i < end; ++i) {
      const T a = x[i] < 0 ? -x[i] : x[i];
      m = a > m || a != a ? a : m;  // a NaN sticks
    }
    // Rounded up to float, so no |x| exceeds its block's scale. A NaN or Inf makes the
    // scale Inf, which survives the max across ranks and decodes the block non-finite on
    // every rank (never silently finite).
    float s = static_cast<float>(m);
    if (!(s <= std::numeric_limits<float>::max())) {
      s = INFINITY;
    } else if (static_cast<T>(s) < m) {
      s = std::nextafter(s, INFINITY);
    }
    scales[b] = s;
  }
}

/// codes[i] = quant_code(x[i]) on each block's agreed scale; with `residual`, also
/// residual[i] = x[i] - codes[i] * scale / levels (what the codes lose).
template <class T>
void quantize_blocks(std::int8_t* codes, T* residual, const T* x, const float* scales,
                     std::size_t count, std::size_t block, int levels) {
  const T lv = static_cast<T>(levels);
  for (std::size_t b = 0, i0 = 0; i0 < count; ++b, i0 += block) {
    const std::size_t end = i0 + block < count ? i0 + block : count;
    const T s = static_cast<T>(scales[b]);
    const T inv = s > 0 ? lv / s : T(0), step = s / lv;
    for (std::size_t i = i0; i < end; ++i) codes[i] = quant_code(x[i], inv, lv);
    if (residual) {
      for (std::size_t i = i0; i < end; ++i) residual[i] = x[i] - dequant(codes[i], step);
    }
  }
}

/// x[i] = sums[i] * scale / (levels * divide): the decoded sum (divide = ranks for avg).
template <class T>
void dequantize_blocks(T* x, const std::int8_t* sums, const float* scales, std::size_t count,
                       std::size_t block, int levels, std::size_t divide) {
  const T den = static_cast<T>(levels) * static_cast<T>(divide);
  for (std::size_t b = 0, i0 = 0; i0 < count; ++b, i0 += block) {
    const std::size_t end = i0 + block < count ? i0 + block : count;
    const T step = static_cast<T>(scales[b]) / den;
    for (std::size_t i = i0; i < end; ++i) x[i] = dequant(sums[i], step);
  }
}

}  // namespace gradsync::kernels
