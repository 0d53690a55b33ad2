// SPDX-License-Identifier: Apache-2.0
// Host loops for the 16-bit float types with x86 vector instructions, chosen at run
// time (kernels/host.hpp): binary16 (gradsync::half) with the F16C conversions where the
// CPU has AVX2 and F16C, bfloat16 with AVX2 integer operations. The portable conversions
// of core/half.hpp vectorize poorly (the 16 <-> 32-bit widening and narrowing, and ~20
// integer operations per half); here a conversion takes 1-9 instructions per 8 elements.
//
// Bit-identical to the portable loops, so ranks with and without these agree:
//  - 16-bit -> float is exact both ways (vcvtph2ps; a bfloat16 is the float's top half).
//    A NaN's payload may differ, but only whether the result is a NaN matters below;
//  - the arithmetic is the same single IEEE float operation as combine_fn / finalize_fn
//    (add, mul, x * inv or x / n; min and max as the same comparisons: minps(y, x) is
//    `y < x ? y : x`, maxps(y, x) is `x < y ? y : x`, NaN and signed zeros included);
//  - float -> half: vcvtps2ph with round-to-nearest-even is the IEEE conversion the
//    portable code computes (overflow to infinity, subnormal halves, a float subnormal to
//    a signed 0 even under DAZ), except that a NaN keeps its payload; float -> bfloat16:
//    the portable code's integer rounding, lane by lane. Every NaN lane is then replaced
//    by the canonical 0x7fff.
// tests/core/test_host_simd.cpp compares both on every 16-bit value.
#pragma once

#include <cstddef>
#include <type_traits>

#include "gradsync/core/half.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/kernels/functors.hpp"

#include "gradsync/kernels/cpu_features.hpp"

#if GRADSYNC_HOST_AVX2
#include <immintrin.h>

namespace gradsync::kernels::detail {

/// Whether the vector loops below run for T on this CPU.
template <class T>
inline bool has_16bit_loops() {
  if constexpr (std::is_same_v<T, half>) {
    return has_f16c();
  } else {
    return has_avx2();
  }
}

#define GRADSYNC_16BIT_TARGET __attribute__((target("avx2,f16c")))

/// 16 values of T as two vectors of 8 floats (exact). For bfloat16 the lanes are
/// interleaved (elements 0-3 and 8-11 in `lo`), which store16 undoes.
struct floats16 {
  __m256 lo, hi;
};

template <class T>
GRADSYNC_16BIT_TARGET inline floats16 load16(const T* p) {
  if constexpr (std::is_same_v<T, half>) {
    return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
  } else {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    // A bfloat16 is the top half of its float: put a zero half below each one.
    const __m256i zero = _mm256_setzero_si256();
    return {_mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, v)),
            _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, v))};
  }
}

/// (x + 0x7fff + lsb) >> 16 as in detail::float_to_bf16_bits, NaN -> 0x7fff, per lane.
GRADSYNC_16BIT_TARGET inline __m256i round_bf16(__m256 r) {
  const __m256i x = _mm256_castps_si256(r);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  const __m256i b =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(b, _mm256_set1_epi32(0x7fff), nan);
}

/// Rounds 8 floats to half (nearest even), NaN lanes as the canonical 0x7fff.
GRADSYNC_16BIT_TARGET inline __m128i round_half(__m256 r) {
  const __m128i h = _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT);
  const __m128i canonical = _mm_set1_epi16(0x7fff);
  const __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(h, canonical), _mm_set1_epi16(0x7c00));
  return _mm_blendv_epi8(h, canonical, nan);
}

/// Rounds 16 floats to T (nearest even), NaN lanes as the canonical 0x7fff, and stores.
template <class T>
GRADSYNC_16BIT_TARGET inline void store16(T* p, floats16 r) {
  if constexpr (std::is_same_v<T, half>) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), round_half(r.lo));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 8), round_half(r.hi));
  } else {
    // Values <= 0xffff, so unsigned saturation keeps them; packing within each 128-bit
    // half undoes load16's interleaving.
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm256_packus_epi32(round_bf16(r.lo), round_bf16(r.hi)));
  }
}

/// combine_fn<T, Op> on 8 lanes: x is the first operand (dst or a), y the second.
template <class Op>
GRADSYNC_16BIT_TARGET inline __m256 combine8(__m256 x, __m256 y) {
  if constexpr (Op::id == reduce_op::prod) {
    return _mm256_mul_ps(x, y);
  } else if constexpr (Op::id == reduce_op::min) {
    return _mm256_min_ps(y, x);
  } else if constexpr (Op::id == reduce_op::max) {
    return _mm256_max_ps(y, x);
  } else {
    return _mm256_add_ps(x, y);
  }
}

/// dst[i] = combine(a[i], b[i]) (a == dst allowed: reduce_into). Call only where
/// has_16bit_loops<T>().
template <class T, class Op>
GRADSYNC_16BIT_TARGET void reduce_16bit(T* dst, const T* a, const T* b, std::size_t n) {
  const std::size_t body = n - n % 16;
  for (std::size_t i = 0; i < body; i += 16) {
    const floats16 x = load16(a + i), y = load16(b + i);
    store16(dst + i, {combine8<Op>(x.lo, y.lo), combine8<Op>(x.hi, y.hi)});
  }
  const combine_fn<T, Op> f{};
  for (std::size_t i = body; i < n; ++i) dst[i] = f(a[i], b[i]);
}

/// What a loop does to each float before rounding it: nothing, times k, or over k (avg's
/// final step: kernels::finalize, and fused into the conversion in finalize_cast).
enum class pre_scale { none, mul, div };

template <pre_scale P>
GRADSYNC_16BIT_TARGET inline __m256 apply(__m256 v, __m256 k) {
  if constexpr (P == pre_scale::mul) {
    return _mm256_mul_ps(v, k);
  } else if constexpr (P == pre_scale::div) {
    return _mm256_div_ps(v, k);
  } else {
    (void)k;
    return v;
  }
}
/// The same on one float (the loops' scalar tails).
template <pre_scale P>
inline float apply(float v, float k) {
  return P == pre_scale::mul ? v * k : P == pre_scale::div ? v / k : v;
}

/// data[i] = data[i] <P> k, as finalize does for avg. Call only where
/// has_16bit_loops<T>().
template <class T, pre_scale P>
GRADSYNC_16BIT_TARGET void scale_16bit(T* data, std::size_t n, float k) {
  const __m256 kv = _mm256_set1_ps(k);
  const std::size_t body = n - n % 16;
  for (std::size_t i = 0; i < body; i += 16) {
    const floats16 x = load16(data + i);
    store16(data + i, {apply<P>(x.lo, kv), apply<P>(x.hi, kv)});
  }
  for (std::size_t i = body; i < n; ++i) data[i] = store<T>(apply<P>(load(data[i]), k));
}

/// dst[i] = T(src[i] <P> k) (float -> half or bfloat16, as cast_fn, after the same float
/// multiplication or division finalize does). Call only where has_16bit_loops<T>().
template <class T, pre_scale P = pre_scale::none>
GRADSYNC_16BIT_TARGET void cast_to_16bit(T* dst, const float* src, std::size_t n, float k = 1) {
  const __m256 kv = _mm256_set1_ps(k);
  const std::size_t body = n - n % 16;
  for (std::size_t i = 0; i < body; i += 16) {
    const __m256 f0 = apply<P>(_mm256_loadu_ps(src + i), kv);
    const __m256 f1 = apply<P>(_mm256_loadu_ps(src + i + 8), kv);
    if constexpr (std::is_same_v<T, half>) {
      store16(dst + i, {f0, f1});
    } else {  // store16 packs in the interleaved order load16 produces
      store16(dst + i,
              {_mm256_permute2f128_ps(f0, f1, 0x20), _mm256_permute2f128_ps(f0, f1, 0x31)});
    }
  }
  const cast_fn<float, T> f{};
  for (std::size_t i = body; i < n; ++i) dst[i] = f(apply<P>(src[i], k));
}

/// dst[i] = float(src[i]) (half or bfloat16 -> float, as cast_fn: exact; a half NaN
/// becomes the canonical float NaN 0x7fffffff, a bfloat16 NaN keeps its bits). Call only
/// where has_16bit_loops<T>().
template <class T>
GRADSYNC_16BIT_TARGET void cast_from_16bit(float* dst, const T* src, std::size_t n) {
  const std::size_t body = n - n % 16;
  for (std::size_t i = 0; i < body; i += 16) {
    floats16 x = load16(src + i);
    if constexpr (std::is_same_v<T, half>) {
      const __m256 canonical = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
      x.lo = _mm256_blendv_ps(x.lo, canonical, _mm256_cmp_ps(x.lo, x.lo, _CMP_UNORD_Q));
      x.hi = _mm256_blendv_ps(x.hi, canonical, _mm256_cmp_ps(x.hi, x.hi, _CMP_UNORD_Q));
      _mm256_storeu_ps(dst + i, x.lo);
      _mm256_storeu_ps(dst + i + 8, x.hi);
    } else {  // undo load16's interleaving
      _mm256_storeu_ps(dst + i, _mm256_permute2f128_ps(x.lo, x.hi, 0x20));
      _mm256_storeu_ps(dst + i + 8, _mm256_permute2f128_ps(x.lo, x.hi, 0x31));
    }
  }
  const cast_fn<T, float> f{};
  for (std::size_t i = body; i < n; ++i) dst[i] = f(src[i]);
}

#undef GRADSYNC_16BIT_TARGET

}  // namespace gradsync::kernels::detail
#endif
