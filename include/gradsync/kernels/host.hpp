// SPDX-License-Identifier: Apache-2.0
// Host loops over the shared functors: what host transports use to reduce in place.
#pragma once

#include <cstddef>
#include <cstring>
#include <type_traits>

#include "gradsync/kernels/cpu_features.hpp"
#include "gradsync/kernels/functors.hpp"
#include "gradsync/kernels/host_16bit.hpp"

namespace gradsync::kernels {

// Every loop below runs in blocks of a fixed 64 bytes plus a scalar tail: GCC's -O2
// (cheap vectorizer cost model, the default of buildtype=debugoptimized) vectorizes a
// fixed-length inner loop but not one with an unknown trip count (about 4x at 1 MiB;
// docs/perf/tuning.md, "host reduction kernels").
//
// The two reductions (reduce_into, reduce_to) also have an AVX2 build of the same loop,
// chosen at run time when the CPU has AVX2 (x86-64, GCC or Clang, not under nvcc): the
// default x86-64 target only has 16-byte SSE2 vectors. The arithmetic is the same
// elementwise IEEE operations in the same order (no FMA, no reassociation), so both
// builds give the same bits and ranks on different CPUs still agree; tests/core/
// test_host_simd.cpp checks it. Open MPI's own reductions use AVX2 there too (its op/avx
// component); the gain is in docs/perf/tuning.md.
//
// For half and bfloat16, reduce_into, reduce_to, finalize and cast from and to float use
// explicit AVX2 (and, for half, F16C) loops instead where the CPU has them
// (kernels/host_16bit.hpp; same bits): 13x for half, 2.5x for bfloat16 at 64Ki elements
// (docs/perf/tuning.md).

/// Elements of T per fixed-length block.
template <class T>
inline constexpr std::size_t block_elems = 64 / sizeof(T) ? 64 / sizeof(T) : 1;

namespace detail {

/// dst[i] = f(dst[i], src[i]); dst and src do not overlap.
template <class T, class F>
GRADSYNC_ALWAYS_INLINE void loop_into(T* GRADSYNC_RESTRICT dst, const T* GRADSYNC_RESTRICT src,
                                      std::size_t n, F f) {
  constexpr std::size_t w = block_elems<T>;
  const std::size_t body = n - n % w;
  for (std::size_t i = 0; i < body; i += w) {
    for (std::size_t k = 0; k < w; ++k) dst[i + k] = f(dst[i + k], src[i + k]);
  }
  for (std::size_t i = body; i < n; ++i) dst[i] = f(dst[i], src[i]);
}

/// dst[i] = f(a[i], b[i]); no two of the three ranges overlap.
template <class T, class F>
GRADSYNC_ALWAYS_INLINE void loop_to(T* GRADSYNC_RESTRICT dst, const T* GRADSYNC_RESTRICT a,
                                    const T* GRADSYNC_RESTRICT b, std::size_t n, F f) {
  constexpr std::size_t w = block_elems<T>;
  const std::size_t body = n - n % w;
  for (std::size_t i = 0; i < body; i += w) {
    for (std::size_t k = 0; k < w; ++k) dst[i + k] = f(a[i + k], b[i + k]);
  }
  for (std::size_t i = body; i < n; ++i) dst[i] = f(a[i], b[i]);
}

/// data[i] = f(data[i]) in place.
template <class T, class F>
GRADSYNC_ALWAYS_INLINE void loop_map(T* data, std::size_t n, F f) {
  constexpr std::size_t w = block_elems<T>;
  const std::size_t body = n - n % w;
  for (std::size_t i = 0; i < body; i += w) {
    for (std::size_t k = 0; k < w; ++k) data[i + k] = f(data[i + k]);
  }
  for (std::size_t i = body; i < n; ++i) data[i] = f(data[i]);
}

template <class T, class F>
void loop_into_generic(T* GRADSYNC_RESTRICT dst, const T* GRADSYNC_RESTRICT src, std::size_t n,
                       F f) {
  loop_into(dst, src, n, f);
}
template <class T, class F>
void loop_to_generic(T* GRADSYNC_RESTRICT dst, const T* GRADSYNC_RESTRICT a,
                     const T* GRADSYNC_RESTRICT b, std::size_t n, F f) {
  loop_to(dst, a, b, n, f);
}

#if GRADSYNC_HOST_AVX2
/// The same loops compiled for AVX2 (call only where has_avx2()).
template <class T, class F>
__attribute__((target("avx2"))) void loop_into_avx2(T* GRADSYNC_RESTRICT dst,
                                                    const T* GRADSYNC_RESTRICT src, std::size_t n,
                                                    F f) {
  loop_into(dst, src, n, f);
}
template <class T, class F>
__attribute__((target("avx2"))) void loop_to_avx2(T* GRADSYNC_RESTRICT dst,
                                                  const T* GRADSYNC_RESTRICT a,
                                                  const T* GRADSYNC_RESTRICT b, std::size_t n,
                                                  F f) {
  loop_to(dst, a, b, n, f);
}
#endif

/// Below this many bytes the dispatch is not worth it (one block of 64 bytes or less).
inline constexpr std::size_t avx2_min_bytes = 128;

}  // namespace detail

/// dst[i] = combine(dst[i], src[i]) for i < n; dst and src do not overlap.
template <class T, class Op>
inline void reduce_into(T* GRADSYNC_RESTRICT dst, const T* GRADSYNC_RESTRICT src, std::size_t n,
                        Op) {
  const combine_fn<T, Op> f{};
#if GRADSYNC_HOST_AVX2
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
    if (n >= 16 && detail::has_16bit_loops<T>())
      return detail::reduce_16bit<T, Op>(dst, dst, src, n);
  }
#endif
#if GRADSYNC_HOST_AVX2
  if (n * sizeof(T) >= detail::avx2_min_bytes && detail::has_avx2()) {
    return detail::loop_into_avx2(dst, src, n, f);
  }
#endif
  detail::loop_into_generic(dst, src, n, f);
}

/// dst[i] = combine(a[i], b[i]) for i < n; no two of dst, a and b overlap (for dst == a
/// use reduce_into).
template <class T, class Op>
inline void reduce_to(T* GRADSYNC_RESTRICT dst, const T* GRADSYNC_RESTRICT a,
                      const T* GRADSYNC_RESTRICT b, std::size_t n, Op) {
  const combine_fn<T, Op> f{};
#if GRADSYNC_HOST_AVX2
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
    if (n >= 16 && detail::has_16bit_loops<T>()) return detail::reduce_16bit<T, Op>(dst, a, b, n);
  }
#endif
#if GRADSYNC_HOST_AVX2
  if (n * sizeof(T) >= detail::avx2_min_bytes && detail::has_avx2()) {
    return detail::loop_to_avx2(dst, a, b, n, f);
  }
#endif
  detail::loop_to_generic(dst, a, b, n, f);
}

/// Applies the op's final step (avg: divide by ranks) to n elements in place.
/// For a power-of-two rank count it multiplies by the exact reciprocal instead, which
/// gives the same bits as the division (both round the same real value) at a fraction
/// of the cost.
template <class T, class Op>
inline void finalize(T* data, std::size_t n, std::size_t ranks, Op) {
  if constexpr (needs_finalize_v<Op>) {
    using C = compute_t<T>;
    const bool pow2 = ranks != 0 && (ranks & (ranks - 1)) == 0;
#if GRADSYNC_HOST_AVX2
    if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
      if (n >= 16 && detail::has_16bit_loops<T>()) {
        if (pow2)
          return detail::scale_16bit<T, detail::pre_scale::mul>(data, n,
                                                                1.0f / static_cast<float>(ranks));
        return detail::scale_16bit<T, detail::pre_scale::div>(data, n, static_cast<float>(ranks));
      }
    }
#endif
    if (pow2) {
      const C inv = C(1) / static_cast<C>(ranks);
      detail::loop_map(data, n, [inv](T v) { return store<T>(load(v) * inv); });
    } else {
      detail::loop_map(data, n, finalize_fn<T, Op>{static_cast<C>(ranks)});
    }
  }
}

/// data[i] *= factor.
template <class T>
inline void scale(T* data, std::size_t n, float factor) {
  detail::loop_map(data, n, scale_fn<T>{factor});
}

/// dst[i] = To(src[i]).
template <class From, class To>
inline void cast(To* GRADSYNC_RESTRICT dst, const From* GRADSYNC_RESTRICT src, std::size_t n) {
#if GRADSYNC_HOST_AVX2
  constexpr bool to_16 =
      std::is_same_v<From, float> && (std::is_same_v<To, half> || std::is_same_v<To, bfloat16>);
  constexpr bool from_16 =
      std::is_same_v<To, float> && (std::is_same_v<From, half> || std::is_same_v<From, bfloat16>);
  if constexpr (to_16) {
    if (n >= 16 && detail::has_16bit_loops<To>()) return detail::cast_to_16bit(dst, src, n);
  } else if constexpr (from_16) {
    if (n >= 16 && detail::has_16bit_loops<From>()) return detail::cast_from_16bit(dst, src, n);
  }
#endif
  const cast_fn<From, To> f{};
  constexpr std::size_t w = block_elems<From>;
  const std::size_t body = n - n % w;
  for (std::size_t i = 0; i < body; i += w) {
    for (std::size_t k = 0; k < w; ++k) dst[i + k] = f(src[i + k]);
  }
  for (std::size_t i = body; i < n; ++i) dst[i] = f(src[i]);
}

/// dst[i] = To(finalize(src[i])): the op's final step (avg: divide by ranks) and the
/// conversion in one pass, with the same bits as kernels::finalize followed by
/// kernels::cast (compression converts an avg bucket this way; src is left unchanged).
template <class From, class To, class Op>
inline void finalize_cast(To* GRADSYNC_RESTRICT dst, const From* GRADSYNC_RESTRICT src,
                          std::size_t n, std::size_t ranks, Op op) {
  if constexpr (!needs_finalize_v<Op>) {
    (void)ranks;
    (void)op;
    cast(dst, src, n);
  } else {
    using C = compute_t<From>;
    const bool pow2 = ranks != 0 && (ranks & (ranks - 1)) == 0;
#if GRADSYNC_HOST_AVX2
    if constexpr (std::is_same_v<From, float> &&
                  (std::is_same_v<To, half> || std::is_same_v<To, bfloat16>)) {
      if (n >= 16 && detail::has_16bit_loops<To>()) {
        if (pow2) {
          return detail::cast_to_16bit<To, detail::pre_scale::mul>(
              dst, src, n, 1.0f / static_cast<float>(ranks));
        }
        return detail::cast_to_16bit<To, detail::pre_scale::div>(dst, src, n,
                                                                 static_cast<float>(ranks));
      }
    }
#endif
    const cast_fn<From, To> f{};
    const C inv = C(1) / static_cast<C>(ranks);
    const finalize_fn<From, Op> fin{static_cast<C>(ranks)};
    for (std::size_t i = 0; i < n; ++i) {
      dst[i] = f(pow2 ? store<From>(load(src[i]) * inv) : fin(src[i]));
    }
  }
}

/// The executor host transports expose: reductions and copies run on the calling thread.
struct host_executor {
  template <class T, class Op>
  void reduce_into(T* dst, const T* src, std::size_t n, Op op) const {
    kernels::reduce_into(dst, src, n, op);
  }
  template <class T, class Op>
  void finalize(T* data, std::size_t n, std::size_t ranks, Op op) const {
    kernels::finalize(data, n, ranks, op);
  }
  void copy(void* dst, const void* src, std::size_t bytes) const {
    if (bytes && dst != src) std::memcpy(dst, src, bytes);
  }
};

}  // namespace gradsync::kernels
