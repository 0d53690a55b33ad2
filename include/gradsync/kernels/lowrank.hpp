// SPDX-License-Identifier: Apache-2.0
// The products of PowerSGD (compress::powersgd) on a row-major m x n matrix M and rank-R
// factors kept transposed (Pt: R x m, Qt: R x n), so every inner loop runs along a
// contiguous row of M, read once per product: P = M Q (R dot products per row, in fixed
// lanes so that the sums vectorise without reassociation), Q = M^T P and M = P Q^T (R
// axpys per row, fused). Plus Gram-Schmidt on P's columns. The same order of operations
// on every rank and CPU, so the same bits. The per-element functors at the end compute
// each output in that order; kernels/lowrank.cuh runs them on a GPU, and the CPU tests
// check them against the loops.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "gradsync/config.hpp"
#include "gradsync/kernels/cpu_features.hpp"
#include "gradsync/kernels/rounding.hpp"

namespace gradsync::kernels {

namespace detail {
// R is the rank: the r factor rows are updated in the same pass along a row of M, which
// is read once (not r times), and the fixed R lets the compiler keep them in registers.
template <std::size_t R, class T>
GRADSYNC_ALWAYS_INLINE void mq_body(T* GRADSYNC_RESTRICT pt, T* GRADSYNC_RESTRICT m,
                                    const T* GRADSYNC_RESTRICT add, const T* GRADSYNC_RESTRICT qt,
                                    std::size_t rows, std::size_t cols) {
  constexpr std::size_t w = 32 / sizeof(T);
  const std::size_t body = cols - cols % w;
  for (std::size_t i = 0; i < rows; ++i) {
    T* row = m + i * cols;
    if (add) {
      const T* a = add + i * cols;
      for (std::size_t j = 0; j < cols; ++j) row[j] += a[j];
    }
    T lane[R][w] = {};
    for (std::size_t j = 0; j < body; j += w) {
      for (std::size_t c = 0; c < R; ++c) {
        const T* q = qt + c * cols + j;
        for (std::size_t k = 0; k < w; ++k) lane[c][k] += row[j + k] * q[k];
      }
    }
    for (std::size_t c = 0; c < R; ++c) {
      T s = 0;
      for (std::size_t k = 0; k < w; ++k) s += lane[c][k];
      for (std::size_t j = body; j < cols; ++j) s += row[j] * qt[c * cols + j];
      pt[c * rows + i] = s;
    }
  }
}

template <std::size_t R, class T>
GRADSYNC_ALWAYS_INLINE void mtp_body(T* GRADSYNC_RESTRICT qt, const T* GRADSYNC_RESTRICT m,
                                     const T* GRADSYNC_RESTRICT pt, std::size_t rows,
                                     std::size_t cols) {
  for (std::size_t c = 0; c < R * cols; ++c) qt[c] = T(0);
  for (std::size_t i = 0; i < rows; ++i) {
    const T* row = m + i * cols;
    T p[R];
    for (std::size_t c = 0; c < R; ++c) p[c] = pt[c * rows + i];
    for (std::size_t j = 0; j < cols; ++j) {
      const T v = row[j];
      for (std::size_t c = 0; c < R; ++c) qt[c * cols + j] += p[c] * v;
    }
  }
}

template <std::size_t R, class T>
GRADSYNC_ALWAYS_INLINE void pqt_body(T* GRADSYNC_RESTRICT m, T* GRADSYNC_RESTRICT residual,
                                     const T* GRADSYNC_RESTRICT pt, const T* GRADSYNC_RESTRICT qt,
                                     const T* GRADSYNC_RESTRICT qmine_t, std::size_t rows,
                                     std::size_t cols, T scale) {
  for (std::size_t i = 0; i < rows; ++i) {
    T* row = m + i * cols;
    T p[R], ps[R];
    for (std::size_t c = 0; c < R; ++c) {
      p[c] = pt[c * rows + i];
      ps[c] = p[c] * scale;
    }
    if (residual) {
      T* res = residual + i * cols;
      for (std::size_t j = 0; j < cols; ++j) {
        T mine = 0, all = 0;
        for (std::size_t c = 0; c < R; ++c) {
          mine += p[c] * qmine_t[c * cols + j];
          all += ps[c] * qt[c * cols + j];
        }
        res[j] = row[j] - mine;
        row[j] = all;
      }
    } else {
      for (std::size_t j = 0; j < cols; ++j) {
        T all = 0;
        for (std::size_t c = 0; c < R; ++c) all += ps[c] * qt[c * cols + j];
        row[j] = all;
      }
    }
  }
}

// The same bodies built for AVX2 (without FMA, so the bits do not change: the lanes fix
// the order of every sum), picked at run time as kernels/host.hpp does.
template <std::size_t R, class T>
void mq_generic(T* pt, T* m, const T* add, const T* qt, std::size_t rows, std::size_t cols) {
  mq_body<R>(pt, m, add, qt, rows, cols);
}
template <std::size_t R, class T>
void mtp_generic(T* qt, const T* m, const T* pt, std::size_t rows, std::size_t cols) {
  mtp_body<R>(qt, m, pt, rows, cols);
}
template <std::size_t R, class T>
void pqt_generic(T* m, T* residual, const T* pt, const T* qt, const T* qmine_t, std::size_t rows,
                 std::size_t cols, T scale) {
  pqt_body<R>(m, residual, pt, qt, qmine_t, rows, cols, scale);
}
#if GRADSYNC_HOST_AVX2
template <std::size_t R, class T>
__attribute__((target("avx2"))) void mq_avx2(T* pt, T* m, const T* add, const T* qt,
                                             std::size_t rows, std::size_t cols) {
  mq_body<R>(pt, m, add, qt, rows, cols);
}
template <std::size_t R, class T>
__attribute__((target("avx2"))) void mtp_avx2(T* qt, const T* m, const T* pt, std::size_t rows,
                                              std::size_t cols) {
  mtp_body<R>(qt, m, pt, rows, cols);
}
template <std::size_t R, class T>
__attribute__((target("avx2"))) void pqt_avx2(T* m, T* residual, const T* pt, const T* qt,
                                              const T* qmine_t, std::size_t rows, std::size_t cols,
                                              T scale) {
  pqt_body<R>(m, residual, pt, qt, qmine_t, rows, cols, scale);
}
#endif

inline bool lowrank_avx2() {
#if GRADSYNC_HOST_AVX2
  return has_avx2();
#else
  return false;
#endif
}
}  // namespace detail

/// Pt[c][i] = sum_j M[i][j] * Qt[c][j] for i < m, c < R; with `add` (error feedback),
/// M[i][j] += add[i][j] first, in the same pass.
template <std::size_t R, class T>
void lowrank_mq(T* pt, T* m, const T* add, const T* qt, std::size_t rows, std::size_t cols) {
#if GRADSYNC_HOST_AVX2
  if (detail::lowrank_avx2()) return detail::mq_avx2<R>(pt, m, add, qt, rows, cols);
#endif
  detail::mq_generic<R>(pt, m, add, qt, rows, cols);
}

/// Qt[c][j] = sum_i M[i][j] * Pt[c][i] (Qt overwritten).
template <std::size_t R, class T>
void lowrank_mtp(T* qt, const T* m, const T* pt, std::size_t rows, std::size_t cols) {
#if GRADSYNC_HOST_AVX2
  if (detail::lowrank_avx2()) return detail::mtp_avx2<R>(qt, m, pt, rows, cols);
#endif
  detail::mtp_generic<R>(qt, m, pt, rows, cols);
}

/// M[i][j] = scale * sum_c Pt[c][i] * Qt[c][j]; with `residual`, first
/// residual[i][j] = M[i][j] - sum_c Pt[c][i] * Qmine_t[c][j] (what this rank's own factor
/// Q does not carry: its error-feedback residual), in the same pass.
template <std::size_t R, class T>
void lowrank_pqt(T* m, T* residual, const T* pt, const T* qt, const T* qmine_t, std::size_t rows,
                 std::size_t cols, T scale) {
#if GRADSYNC_HOST_AVX2
  if (detail::lowrank_avx2()) {
    return detail::pqt_avx2<R>(m, residual, pt, qt, qmine_t, rows, cols, scale);
  }
#endif
  detail::pqt_generic<R>(m, residual, pt, qt, qmine_t, rows, cols, scale);
}

/// Orthonormalises the r columns of P (rows of Pt, length m) in place by modified
/// Gram-Schmidt; a column that vanishes (below 1e-30 of norm) is set to zero. Sequential
/// sums: one GPU thread runs it as it is (kernels/lowrank.cuh).
template <class T>
GRADSYNC_HOST_DEVICE void orthonormalise(T* pt, std::size_t m, std::size_t r) {
  for (std::size_t c = 0; c < r; ++c) {
    T* v = pt + c * m;
    for (std::size_t d = 0; d < c; ++d) {
      const T* u = pt + d * m;
      T dot = 0;
      for (std::size_t i = 0; i < m; ++i) dot = add_rn(dot, mul_rn(u[i], v[i]));
      for (std::size_t i = 0; i < m; ++i) v[i] -= mul_rn(dot, u[i]);
    }
    T norm = 0;
    for (std::size_t i = 0; i < m; ++i) norm = add_rn(norm, mul_rn(v[i], v[i]));
#if defined(__CUDA_ARCH__)
    norm = sqrt(norm);  // correctly rounded, as std::sqrt (nvcc's default -prec-sqrt=true)
#else
    norm = std::sqrt(norm);
#endif
    const T inv = norm > T(1e-30) ? T(1) / norm : T(0);
    for (std::size_t i = 0; i < m; ++i) v[i] = mul_rn(v[i], inv);
  }
}

/// Element i of the shared-seed start of Q: uniform in [-1, 1) from (seed, i), a
/// splitmix64 hash (the same on every rank and device).
template <class T>
GRADSYNC_HOST_DEVICE inline T seeded_value(std::uint64_t seed, std::size_t i) {
  std::uint64_t z = seed * 0x9e3779b97f4a7c15ull + (i + 1) * 0xbf58476d1ce4e5b9ull;
  z ^= z >> 30;
  z *= 0xbf58476d1ce4e5b9ull;
  z ^= z >> 27;
  z *= 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<T>(static_cast<double>(z >> 11) / double(1ull << 52) - 1.0);
}

/// The shared-seed start of Q: out[i] = seeded_value(seed, i).
template <class T>
void seeded_uniform(T* out, std::size_t count, std::uint64_t seed) {
  for (std::size_t i = 0; i < count; ++i) out[i] = seeded_value<T>(seed, i);
}

// ---- per-element functors: each output of the loops above, in their order -------------

/// The lanes of lowrank_mq's dot products: its vector width, the same in every build.
template <class T>
inline constexpr std::size_t lowrank_lanes = 32 / sizeof(T);

/// Lane k (< lowrank_lanes<T>) of the dot product of a row of M with a row q of Qt: the
/// products of the columns j = k (mod lanes) before the tail, summed in column order.
template <class T>
GRADSYNC_HOST_DEVICE inline T mq_lane(const T* row, const T* q, std::size_t cols, std::size_t k) {
  constexpr std::size_t w = lowrank_lanes<T>;
  const std::size_t body = cols - cols % w;
  T s = 0;
  for (std::size_t j = k; j < body; j += w) s = add_rn(s, mul_rn(row[j], q[j]));
  return s;
}

/// Pt[c][i] from its lanes (`lanes[k]`, as mq_lane gives them): the lanes in order, then
/// the tail's products.
template <class T>
GRADSYNC_HOST_DEVICE inline T mq_finish(const T* lanes, const T* row, const T* q,
                                        std::size_t cols) {
  constexpr std::size_t w = lowrank_lanes<T>;
  T s = 0;
  for (std::size_t k = 0; k < w; ++k) s = add_rn(s, lanes[k]);
  for (std::size_t j = cols - cols % w; j < cols; ++j) s = add_rn(s, mul_rn(row[j], q[j]));
  return s;
}

/// Qt[c][j] of lowrank_mtp: the rows' products summed in row order.
template <class T>
GRADSYNC_HOST_DEVICE inline T mtp_element(const T* m, const T* pt, std::size_t rows,
                                          std::size_t cols, std::size_t c, std::size_t j) {
  T s = 0;
  for (std::size_t i = 0; i < rows; ++i) s = add_rn(s, mul_rn(pt[c * rows + i], m[i * cols + j]));
  return s;
}

/// M[i][j] of lowrank_pqt (and, with qmine_t, the residual before it): R products each,
/// summed in factor order.
template <std::size_t R, class T>
GRADSYNC_HOST_DEVICE inline void pqt_element(T* m, T* residual, const T* pt, const T* qt,
                                             const T* qmine_t, std::size_t rows, std::size_t cols,
                                             T scale, std::size_t i, std::size_t j) {
  T mine = 0, all = 0;
  for (std::size_t c = 0; c < R; ++c) {
    const T p = pt[c * rows + i];
    if (residual) mine = add_rn(mine, mul_rn(p, qmine_t[c * cols + j]));
    all = add_rn(all, mul_rn(mul_rn(p, scale), qt[c * cols + j]));
  }
  if (residual) residual[i * cols + j] = m[i * cols + j] - mine;
  m[i * cols + j] = all;
}

}  // namespace gradsync::kernels
