// SPDX-License-Identifier: Apache-2.0
// Blockwise int8 quantisation (compress::int8): each block of values is scaled by
// levels / absmax into integer codes in [-levels, levels]. The element functors are
// GRADSYNC_HOST_DEVICE so the CPU tests check the arithmetic a GPU would run; the block
// loops below are for host memory (plain loops the compiler vectorises).
#pragma once

#include <cmath>
#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "gradsync/config.hpp"
#include "gradsync/kernels/cpu_features.hpp"
#include "gradsync/kernels/magnitude.hpp"
#include "gradsync/kernels/rounding.hpp"

namespace gradsync::kernels {

/// The code of x at `inv` = levels / scale, for |x| <= scale and inv finite (the caller
/// checks both: outside them the conversion to int is undefined): x * inv rounded
/// to nearest even, clamped to [-levels, levels] (against the last ulp). Adding and
/// subtracting 1.5 * 2^mantissa rounds without a libm call, and the clamp is an integer
/// min / max, so the loop vectorises (under -ffast-math the rounding truncates: still the
/// same on every rank).
template <class F>
GRADSYNC_HOST_DEVICE inline std::int8_t quant_code(F x, F inv, int levels) {
  const F magic = std::is_same_v<F, float> ? F(12582912.0f) : F(6755399441055744.0);
  int q = static_cast<int>((mul_rn(x, inv) + magic) - magic);
  q = q > levels ? levels : q;
  q = q < -levels ? -levels : q;
  return static_cast<std::int8_t>(q);
}

/// The value of a (summed) code at `step` = scale / levels (/ ranks for an average).
template <class F>
GRADSYNC_HOST_DEVICE inline F dequant(std::int8_t code, F step) {
  return mul_rn(static_cast<F>(code), step);
}

namespace detail {
// One block's loops, as functions with restrict parameters and a fixed-width inner loop:
// int8 stores may alias anything, so without both the compiler keeps them scalar (at -O2
// too, as kernels/host.hpp's loops).
inline constexpr std::size_t quant_chunk = 16;

template <class T>
GRADSYNC_ALWAYS_INLINE void quantize_run(std::int8_t* GRADSYNC_RESTRICT c,
                                         const T* GRADSYNC_RESTRICT x, std::size_t n, T inv,
                                         int lv) {
  constexpr std::size_t w = quant_chunk;
  const std::size_t body = n - n % w;
  for (std::size_t i = 0; i < body; i += w) {
    for (std::size_t k = 0; k < w; ++k) c[i + k] = quant_code(x[i + k], inv, lv);
  }
  for (std::size_t i = body; i < n; ++i) c[i] = quant_code(x[i], inv, lv);
}

template <class T>
GRADSYNC_ALWAYS_INLINE void residual_run(T* GRADSYNC_RESTRICT r,
                                         const std::int8_t* GRADSYNC_RESTRICT c,
                                         const T* GRADSYNC_RESTRICT x, std::size_t n, T step) {
  constexpr std::size_t w = quant_chunk;
  const std::size_t body = n - n % w;
  for (std::size_t i = 0; i < body; i += w) {
    for (std::size_t k = 0; k < w; ++k) r[i + k] = x[i + k] - dequant(c[i + k], step);
  }
  for (std::size_t i = body; i < n; ++i) r[i] = x[i] - dequant(c[i], step);
}

template <class T>
GRADSYNC_ALWAYS_INLINE void dequantize_run(T* GRADSYNC_RESTRICT x,
                                           const std::int8_t* GRADSYNC_RESTRICT s, std::size_t n,
                                           T step) {
  constexpr std::size_t w = quant_chunk;
  const std::size_t body = n - n % w;
  for (std::size_t i = 0; i < body; i += w) {
    for (std::size_t k = 0; k < w; ++k) x[i + k] = dequant(s[i + k], step);
  }
  for (std::size_t i = body; i < n; ++i) x[i] = dequant(s[i], step);
}
}  // namespace detail

namespace detail {
template <bool Add, class T>
GRADSYNC_ALWAYS_INLINE void absmax_body(float* GRADSYNC_RESTRICT scales, T* GRADSYNC_RESTRICT x,
                                        const T* GRADSYNC_RESTRICT add, std::size_t count,
                                        std::size_t block) {
  using K = magnitude_key_t<T>;
  constexpr std::size_t w = 64 / sizeof(T);
  for (std::size_t b = 0, i0 = 0; i0 < count; ++b, i0 += block) {
    const std::size_t len = i0 + block < count ? block : count - i0;
    T* xb = x + i0;
    const T* ab = Add ? add + i0 : nullptr;
    K lane[w] = {};
    const std::size_t body = len - len % w;
    for (std::size_t i = 0; i < body; i += w) {
      for (std::size_t k = 0; k < w; ++k) {
        if constexpr (Add) xb[i + k] += ab[i + k];
        const K key = magnitude_key(xb[i + k]);
        lane[k] = key > lane[k] ? key : lane[k];
      }
    }
    K m = 0;
    for (std::size_t i = body; i < len; ++i) {
      if constexpr (Add) xb[i] += ab[i];
      m = std::max(m, magnitude_key(xb[i]));
    }
    for (K v : lane) m = std::max(m, v);
    T a;
    std::memcpy(&a, &m, sizeof a);
    float s = static_cast<float>(a);
    if (!(a <= std::numeric_limits<T>::max())) {
      s = INFINITY;  // NaN or Inf
    } else if (static_cast<T>(s) < a) {
      s = std::nextafter(s, INFINITY);
    }
    scales[b] = s;
  }
}

template <class T>
GRADSYNC_ALWAYS_INLINE void quantize_body(std::int8_t* GRADSYNC_RESTRICT codes,
                                          T* GRADSYNC_RESTRICT residual,
                                          const T* GRADSYNC_RESTRICT x, const float* scales,
                                          std::size_t count, std::size_t block, int levels) {
  const T lv = static_cast<T>(levels);
  for (std::size_t b = 0, i0 = 0; i0 < count; ++b, i0 += block) {
    const std::size_t len = i0 + block < count ? block : count - i0;
    const T s = static_cast<T>(scales[b]);
    const T step = s / lv;
    const T inv = lv / s;
    if (s > 0 && s <= std::numeric_limits<T>::max() && inv <= std::numeric_limits<T>::max()) {
      quantize_run(codes + i0, x + i0, len, inv, levels);
      if (residual) residual_run(residual + i0, codes + i0, x + i0, len, step);
    } else {
      // Zero codes. A finite scale: 0, or so small (below levels / FLT_MAX) that inv is
      // Inf; the codes lose all of x. Otherwise a NaN or Inf in this block on some rank:
      // its residual restarts at zero rather than carry NaN forever.
      std::memset(codes + i0, 0, len);
      if (residual && s <= std::numeric_limits<T>::max()) {
        std::copy(x + i0, x + i0 + len, residual + i0);
      } else if (residual) {
        std::fill(residual + i0, residual + i0 + len, T(0));
      }
    }
  }
}

template <class T>
GRADSYNC_ALWAYS_INLINE void dequantize_body(T* GRADSYNC_RESTRICT x,
                                            const std::int8_t* GRADSYNC_RESTRICT sums,
                                            const float* scales, std::size_t count,
                                            std::size_t block, int levels, std::size_t divide) {
  const T den = static_cast<T>(levels) * static_cast<T>(divide);
  for (std::size_t b = 0, i0 = 0; i0 < count; ++b, i0 += block) {
    const std::size_t len = i0 + block < count ? block : count - i0;
    const T step = static_cast<T>(scales[b]) / den;
    dequantize_run(x + i0, sums + i0, len, step);
  }
}

// The three passes, and the same compiled for AVX2 (chosen at run time where the CPU has
// it, as kernels/host.hpp's reductions): 32-byte vectors for the integer max, the code
// conversion and the int8 packing. No FMA, no reassociation: the same bits either way.
template <bool Add, class T>
void absmax(float* scales, T* x, const T* add, std::size_t count, std::size_t block) {
  absmax_body<Add>(scales, x, add, count, block);
}
template <class T>
void quantize(std::int8_t* codes, T* residual, const T* x, const float* scales, std::size_t count,
              std::size_t block, int levels) {
  quantize_body(codes, residual, x, scales, count, block, levels);
}
template <class T>
void dequantize(T* x, const std::int8_t* sums, const float* scales, std::size_t count,
                std::size_t block, int levels, std::size_t divide) {
  dequantize_body(x, sums, scales, count, block, levels, divide);
}
#if GRADSYNC_HOST_AVX2
template <bool Add, class T>
__attribute__((target("avx2"))) void absmax_avx2(float* scales, T* x, const T* add,
                                                 std::size_t count, std::size_t block) {
  absmax_body<Add>(scales, x, add, count, block);
}
template <class T>
__attribute__((target("avx2"))) void quantize_avx2(std::int8_t* codes, T* residual, const T* x,
                                                   const float* scales, std::size_t count,
                                                   std::size_t block, int levels) {
  quantize_body(codes, residual, x, scales, count, block, levels);
}
template <class T>
__attribute__((target("avx2"))) void dequantize_avx2(T* x, const std::int8_t* sums,
                                                     const float* scales, std::size_t count,
                                                     std::size_t block, int levels,
                                                     std::size_t divide) {
  dequantize_body(x, sums, scales, count, block, levels, divide);
}
#endif

template <bool Add, class T>
void absmax_any(float* scales, T* x, const T* add, std::size_t count, std::size_t block) {
#if GRADSYNC_HOST_AVX2
  if (has_avx2()) return absmax_avx2<Add>(scales, x, add, count, block);
#endif
  absmax<Add>(scales, x, add, count, block);
}
}  // namespace detail

/// scales[b] = max |x| over block b (blocks of `block` elements; the last may be short),
/// rounded up to float so that no |x| exceeds its block's scale. The maximum is taken
/// over magnitude_key (an integer max: vectorises, and a NaN sorts above Inf): a NaN or
/// Inf makes the scale Inf, which survives the max across ranks and decodes the block
/// non-finite on every rank (never silently finite).
template <class T>
void block_absmax(float* GRADSYNC_RESTRICT scales, const T* GRADSYNC_RESTRICT x, std::size_t count,
                  std::size_t block) {
  detail::absmax_any<false>(scales, const_cast<T*>(x), static_cast<const T*>(nullptr), count,
                            block);
}

/// x[i] += add[i], and the scales of the sums, in one pass (error feedback's residual).
template <class T>
void add_block_absmax(float* GRADSYNC_RESTRICT scales, T* GRADSYNC_RESTRICT x,
                      const T* GRADSYNC_RESTRICT add, std::size_t count, std::size_t block) {
  detail::absmax_any<true>(scales, x, add, count, block);
}

/// codes[i] = quant_code(x[i]) on each block's agreed scale; with `residual`, also
/// residual[i] = x[i] - codes[i] * scale / levels (what the codes lose). Every |x| of a
/// block must be at most its scale (the int8 codec checks the agreed scales against its
/// own). A block whose scale is 0 (all zero) or below levels / FLT_MAX gets zero codes
/// and keeps x as its residual; one whose scale is Inf (a NaN or Inf somewhere) gets zero
/// codes and a zero residual: it decodes to non-finite values and leaves no NaN for the
/// next step.
template <class T>
void quantize_blocks(std::int8_t* GRADSYNC_RESTRICT codes, T* GRADSYNC_RESTRICT residual,
                     const T* GRADSYNC_RESTRICT x, const float* scales, std::size_t count,
                     std::size_t block, int levels) {
#if GRADSYNC_HOST_AVX2
  if (detail::has_avx2())
    return detail::quantize_avx2(codes, residual, x, scales, count, block, levels);
#endif
  detail::quantize(codes, residual, x, scales, count, block, levels);
}

/// x[i] = sums[i] * scale / (levels * divide): the decoded sum (divide = ranks for avg).
template <class T>
void dequantize_blocks(T* GRADSYNC_RESTRICT x, const std::int8_t* GRADSYNC_RESTRICT sums,
                       const float* scales, std::size_t count, std::size_t block, int levels,
                       std::size_t divide) {
#if GRADSYNC_HOST_AVX2
  if (detail::has_avx2())
    return detail::dequantize_avx2(x, sums, scales, count, block, levels, divide);
#endif
  detail::dequantize(x, sums, scales, count, block, levels, divide);
}

}  // namespace gradsync::kernels
