// SPDX-License-Identifier: Apache-2.0
// What one GPU thread does in each elementwise kernel, written as GRADSYNC_HOST_DEVICE
// functions of (thread index, thread count) so that the host compiler can run the very
// same code path on the CPU (tests/cuda/test_device_body.cpp runs it through Thrust's
// CPP device system). The __global__ wrappers in elementwise.cuh only supply
// blockIdx * blockDim + threadIdx and gridDim * blockDim.
//
// Layout of every loop: a scalar head until the pointers reach a 16-byte boundary, a
// grid-stride loop over 16-byte vectors (one LDG.128 / STG.128 per operand on the GPU),
// and a scalar tail. When the operands are not equally misaligned there is no vector
// body and the whole range runs scalar (still correct, just slower).
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "gradsync/config.hpp"
#include "gradsync/kernels/functors.hpp"

namespace gradsync::kernels::body {

/// Sixteen bytes: the widest load a CUDA thread issues in one instruction.
struct alignas(16) vec16 {
  std::uint32_t w[4];
};

GRADSYNC_HOST_DEVICE inline std::size_t misalign16(const void* p) {
  return static_cast<std::size_t>(reinterpret_cast<std::uintptr_t>(p) & 15u);
}

/// Loads 16 bytes at p (16-byte aligned) into a[]. On the host (the CPU tests) an
/// unaligned p fails an assert: it would fault on the GPU.
template <class T, std::size_t W>
GRADSYNC_HOST_DEVICE inline void load16(T (&a)[W], const T* p) {
  static_assert(W * sizeof(T) == 16, "load16 moves exactly 16 bytes");
#if defined(__CUDA_ARCH__)
  const vec16 v = *reinterpret_cast<const vec16*>(p);
  memcpy(a, &v, 16);
#else
  assert(misalign16(p) == 0 && "a 16-byte GPU load must be 16-byte aligned");
  std::memcpy(a, p, 16);
#endif
}

/// Stores a[] (16 bytes) at p (16-byte aligned).
template <class T, std::size_t W>
GRADSYNC_HOST_DEVICE inline void store16(T* p, const T (&a)[W]) {
  static_assert(W * sizeof(T) == 16, "store16 moves exactly 16 bytes");
#if defined(__CUDA_ARCH__)
  vec16 v;
  memcpy(&v, a, 16);
  *reinterpret_cast<vec16*>(p) = v;
#else
  assert(misalign16(p) == 0 && "a 16-byte GPU store must be 16-byte aligned");
  std::memcpy(p, a, 16);
#endif
}

/// How a range of n elements splits: `head` scalar elements, then `vecs` groups of W
/// elements whose operands all start on 16-byte boundaries, then a scalar tail.
struct split {
  std::size_t head;
  std::size_t vecs;
};

/// Split for operands of the same type T (all of `ptrs` must share the misalignment).
template <class T, std::size_t W = 16 / sizeof(T)>
GRADSYNC_HOST_DEVICE inline split split_same(std::size_t n, const void* a, const void* b) {
  const std::size_t ma = misalign16(a);
  if (ma != misalign16(b) || ma % sizeof(T) != 0) return {n, 0};
  std::size_t head = ma ? (16 - ma) / sizeof(T) : 0;
  if (head > n) head = n;
  return {head, (n - head) / W};
}

/// Split for a cast From -> To, W = 16 / min(sizeof From, sizeof To) elements per group.
template <class From, class To>
GRADSYNC_HOST_DEVICE inline split split_cast(std::size_t n, const From* src, const To* dst,
                                             std::size_t w) {
  const std::size_t ms = misalign16(src);
  if (ms % sizeof(From) != 0) return {n, 0};
  std::size_t head = ms ? (16 - ms) / sizeof(From) : 0;
  if (head > n) head = n;
  if (misalign16(dst + head) != 0) return {n, 0};
  return {head, (n - head) / w};
}

/// dst[i] = combine(dst[i], src[i]), then (if `fin`) the op's finalize step.
template <class T, class Op, bool Finalize>
GRADSYNC_HOST_DEVICE inline void reduce_into(T* dst, const T* src, std::size_t n,
                                             compute_t<T> ranks, std::size_t t, std::size_t nt) {
  constexpr std::size_t W = 16 / sizeof(T);
  const combine_fn<T, Op> f{};
  const finalize_fn<T, Op> fin{ranks};
  const split s = split_same<T>(n, dst, src);
  for (std::size_t i = t; i < s.head; i += nt) {
    const T v = f(dst[i], src[i]);
    dst[i] = Finalize ? fin(v) : v;
  }
  T* vd = dst + s.head;
  const T* vs = src + s.head;
  for (std::size_t v = t; v < s.vecs; v += nt) {
    T a[W], b[W];
    load16(a, vd + v * W);
    load16(b, vs + v * W);
    for (std::size_t k = 0; k < W; ++k) {
      a[k] = f(a[k], b[k]);
      if constexpr (Finalize) a[k] = fin(a[k]);
    }
    store16(vd + v * W, a);
  }
  for (std::size_t i = s.head + s.vecs * W + t; i < n; i += nt) {
    const T v = f(dst[i], src[i]);
    dst[i] = Finalize ? fin(v) : v;
  }
}

/// Applies `g` (finalize_fn or scale_fn) to every element of data in place.
template <class T, class G>
GRADSYNC_HOST_DEVICE inline void map_in_place(T* data, std::size_t n, G g, std::size_t t,
                                              std::size_t nt) {
  constexpr std::size_t W = 16 / sizeof(T);
  const split s = split_same<T>(n, data, data);
  for (std::size_t i = t; i < s.head; i += nt) data[i] = g(data[i]);
  T* vd = data + s.head;
  for (std::size_t v = t; v < s.vecs; v += nt) {
    T a[W];
    load16(a, vd + v * W);
    for (std::size_t k = 0; k < W; ++k) a[k] = g(a[k]);
    store16(vd + v * W, a);
  }
  for (std::size_t i = s.head + s.vecs * W + t; i < n; i += nt) data[i] = g(data[i]);
}

/// dst[i] = cast(src[i]); 16-byte loads and stores on both sides.
template <class From, class To>
GRADSYNC_HOST_DEVICE inline void cast(To* dst, const From* src, std::size_t n, std::size_t t,
                                      std::size_t nt) {
  constexpr std::size_t small = sizeof(From) < sizeof(To) ? sizeof(From) : sizeof(To);
  constexpr std::size_t W = 16 / small;
  constexpr std::size_t in16 = W * sizeof(From) / 16, out16 = W * sizeof(To) / 16;
  constexpr std::size_t WF = 16 / sizeof(From), WT = 16 / sizeof(To);
  const cast_fn<From, To> f{};
  const split s = split_cast(n, src, dst, W);
  for (std::size_t i = t; i < s.head; i += nt) dst[i] = f(src[i]);
  To* vd = dst + s.head;
  const From* vs = src + s.head;
  for (std::size_t v = t; v < s.vecs; v += nt) {
    From a[in16][WF];
    To b[out16][WT];
    for (std::size_t j = 0; j < in16; ++j) load16(a[j], vs + v * W + j * WF);
    for (std::size_t k = 0; k < W; ++k) b[k / WT][k % WT] = f(a[k / WF][k % WF]);
    for (std::size_t j = 0; j < out16; ++j) store16(vd + v * W + j * WT, b[j]);
  }
  for (std::size_t i = s.head + s.vecs * W + t; i < n; i += nt) dst[i] = f(src[i]);
}

/// Up to this many source buffers in one multi-input reduction (ranks on one node).
inline constexpr std::size_t max_sources = 8;

/// The source buffers of one multi-input reduction, passed by value to a kernel.
template <class T>
struct sources {
  const T* p[max_sources];
  std::size_t count;
};

/// dst[i] = finalize(src0[i] + src1[i] + ... ) combined in rank order 0, 1, ..., count-1,
/// so every rank that runs it produces the same bits. dst may alias any source.
template <class T, class Op>
GRADSYNC_HOST_DEVICE inline void reduce_sources(T* dst, const sources<T>& in, std::size_t n,
                                                std::size_t t, std::size_t nt) {
  constexpr std::size_t W = 16 / sizeof(T);
  const combine_fn<T, Op> f{};
  const finalize_fn<T, Op> fin{static_cast<compute_t<T>>(in.count)};
  bool aligned = true;
  for (std::size_t k = 0; k < max_sources; ++k) {
    if (k < in.count) aligned = aligned && misalign16(in.p[k]) == misalign16(dst);
  }
  const split s = aligned ? split_same<T>(n, dst, dst) : split{n, 0};
  auto one = [&](std::size_t i) {
    T acc = in.p[0][i];
    for (std::size_t k = 1; k < max_sources; ++k) {
      if (k < in.count) acc = f(acc, in.p[k][i]);
    }
    dst[i] = fin(acc);
  };
  for (std::size_t i = t; i < s.head; i += nt) one(i);
  for (std::size_t v = t; v < s.vecs; v += nt) {
    const std::size_t i = s.head + v * W;
    T acc[W], b[W];
    load16(acc, in.p[0] + i);
    for (std::size_t k = 1; k < max_sources; ++k) {
      if (k < in.count) {
        load16(b, in.p[k] + i);
        for (std::size_t e = 0; e < W; ++e) acc[e] = f(acc[e], b[e]);
      }
    }
    for (std::size_t e = 0; e < W; ++e) acc[e] = fin(acc[e]);
    store16(dst + i, acc);
  }
  for (std::size_t i = s.head + s.vecs * W + t; i < n; i += nt) one(i);
}

}  // namespace gradsync::kernels::body
