// Host loops over the shared functors: what host transports use to reduce in place.
#pragma once

#include <cstddef>
#include <cstring>

#include "gradsync/kernels/functors.hpp"

namespace gradsync::kernels {

/// dst[i] = combine(dst[i], src[i]) for i < n.
template <class T, class Op>
inline void reduce_into(T* GRADSYNC_RESTRICT dst, const T* GRADSYNC_RESTRICT src, std::size_t n,
                        Op) {
  const combine_fn<T, Op> f{};
  for (std::size_t i = 0; i < n; ++i) dst[i] = f(dst[i], src[i]);
}

/// dst[i] = combine(a[i], b[i]) for i < n (dst may alias a).
template <class T, class Op>
inline void reduce_to(T* dst, const T* a, const T* GRADSYNC_RESTRICT b, std::size_t n, Op) {
  const combine_fn<T, Op> f{};
  for (std::size_t i = 0; i < n; ++i) dst[i] = f(a[i], b[i]);
}

/// Applies the op's final step (avg: divide by ranks) to n elements in place.
template <class T, class Op>
inline void finalize(T* data, std::size_t n, std::size_t ranks, Op) {
  if constexpr (needs_finalize_v<Op>) {
    const finalize_fn<T, Op> f{static_cast<compute_t<T>>(ranks)};
    for (std::size_t i = 0; i < n; ++i) data[i] = f(data[i]);
  }
}

/// data[i] *= factor.
template <class T>
inline void scale(T* data, std::size_t n, float factor) {
  const scale_fn<T> f{factor};
  for (std::size_t i = 0; i < n; ++i) data[i] = f(data[i]);
}

/// dst[i] = To(src[i]).
template <class From, class To>
inline void cast(To* GRADSYNC_RESTRICT dst, const From* GRADSYNC_RESTRICT src, std::size_t n) {
  const cast_fn<From, To> f{};
  for (std::size_t i = 0; i < n; ++i) dst[i] = f(src[i]);
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
