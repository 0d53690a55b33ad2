// SPDX-License-Identifier: Apache-2.0
// compress::powersgd's products for device buffers: P = M Q, Q = M^T P, M = P Q^T (with
// the error-feedback residual) and Gram-Schmidt, over the per-element functors of
// kernels/lowrank.hpp (mq_lane / mq_finish, mtp_element, pqt_element, orthonormalise), so
// a GPU computes the bits the host loops do. Factors are kept transposed as on the host
// (Pt: R x rows, Qt: R x cols). Every launcher enqueues on `stream` without synchronizing.
#pragma once

#if !defined(__CUDACC__)
#error \
    "gradsync/kernels/lowrank.cuh holds CUDA kernels: include it only from a .cu file compiled by nvcc (host code uses gradsync/kernels/lowrank.hpp)"
#endif

#include <cuda_runtime.h>

#include <cstddef>

#include "gradsync/core/cuda_check.hpp"
#include "gradsync/kernels/elementwise.cuh"
#include "gradsync/kernels/lowrank.hpp"
#include "gradsync/kernels/rounding.hpp"

namespace gradsync::kernels::device {

/// m[i] += add[i]: error feedback's carried residual, added before the first product.
template <class T>
__global__ void __launch_bounds__(block_threads)
    add_into_kernel(T* m, const T* add, std::size_t count) {
  for (std::size_t i = thread_index(); i < count; i += thread_count()) m[i] = add_rn(m[i], add[i]);
}

/// One block per row of M (grid-stride): its threads compute the R x lanes partial sums
/// of the row's dot products, then R threads finish them in the host's order.
template <std::size_t R, class T>
__global__ void __launch_bounds__(block_threads)
    mq_kernel(T* pt, const T* m, const T* qt, std::size_t rows, std::size_t cols) {
  constexpr std::size_t w = lowrank_lanes<T>;
  __shared__ T lanes[R * w];
  for (std::size_t i = blockIdx.x; i < rows; i += gridDim.x) {
    const T* row = m + i * cols;
    for (std::size_t p = threadIdx.x; p < R * w; p += blockDim.x)
      lanes[p] = mq_lane(row, qt + (p / w) * cols, cols, p % w);
    __syncthreads();
    for (std::size_t c = threadIdx.x; c < R; c += blockDim.x)
      pt[c * rows + i] = mq_finish(lanes + c * w, row, qt + c * cols, cols);
    __syncthreads();
  }
}

/// One thread per element of Qt: a column of M read down its rows (coalesced across j).
template <class T>
__global__ void __launch_bounds__(block_threads)
    mtp_kernel(T* qt, const T* m, const T* pt, std::size_t rows, std::size_t cols, std::size_t r) {
  for (std::size_t e = thread_index(); e < r * cols; e += thread_count())
    qt[e] = mtp_element(m, pt, rows, cols, e / cols, e % cols);
}

/// One thread per element of M.
template <std::size_t R, class T>
__global__ void __launch_bounds__(block_threads)
    pqt_kernel(T* m, T* residual, const T* pt, const T* qt, const T* qmine_t, std::size_t rows,
               std::size_t cols, T scale) {
  for (std::size_t e = thread_index(); e < rows * cols; e += thread_count())
    pqt_element<R>(m, residual, pt, qt, qmine_t, rows, cols, scale, e / cols, e % cols);
}

/// Gram-Schmidt with the host's sequential sums: one thread (P is thin: r x rows).
template <class T>
__global__ void orthonormalise_kernel(T* pt, std::size_t rows, std::size_t r) {
  if (thread_index() == 0) orthonormalise(pt, rows, r);
}

/// Q's seeded start, element by element (the host's seeded_uniform).
template <class T>
__global__ void __launch_bounds__(block_threads)
    seeded_kernel(T* out, std::size_t count, std::uint64_t seed) {
  for (std::size_t i = thread_index(); i < count; i += thread_count())
    out[i] = seeded_value<T>(seed, i);
}

/// The device twin of kernels::lowrank_mq (with `add`: M += add first, in place).
template <std::size_t R, class T>
void lowrank_mq(T* pt, T* m, const T* add, const T* qt, std::size_t rows, std::size_t cols,
                cudaStream_t stream) {
  if (rows == 0) return;
  if (add) {
    add_into_kernel<T><<<grid_for(rows * cols), block_threads, 0, stream>>>(m, add, rows * cols);
    check_launch("add_into_kernel");
  }
  mq_kernel<R, T>
      <<<grid_for(rows * block_threads), block_threads, 0, stream>>>(pt, m, qt, rows, cols);
  check_launch("mq_kernel");
}
/// The device twin of kernels::lowrank_mtp.
template <std::size_t R, class T>
void lowrank_mtp(T* qt, const T* m, const T* pt, std::size_t rows, std::size_t cols,
                 cudaStream_t stream) {
  if (cols == 0) return;
  mtp_kernel<T><<<grid_for(R * cols), block_threads, 0, stream>>>(qt, m, pt, rows, cols, R);
  check_launch("mtp_kernel");
}
/// The device twin of kernels::lowrank_pqt.
template <std::size_t R, class T>
void lowrank_pqt(T* m, T* residual, const T* pt, const T* qt, const T* qmine_t, std::size_t rows,
                 std::size_t cols, T scale, cudaStream_t stream) {
  if (rows * cols == 0) return;
  pqt_kernel<R, T><<<grid_for(rows * cols), block_threads, 0, stream>>>(m, residual, pt, qt,
                                                                        qmine_t, rows, cols, scale);
  check_launch("pqt_kernel");
}
/// The device twin of kernels::orthonormalise.
template <class T>
void orthonormalise(T* pt, std::size_t rows, std::size_t r, cudaStream_t stream) {
  orthonormalise_kernel<T><<<1, 1, 0, stream>>>(pt, rows, r);
  check_launch("orthonormalise_kernel");
}
/// The device twin of kernels::seeded_uniform.
template <class T>
void seeded_uniform(T* out, std::size_t count, std::uint64_t seed, cudaStream_t stream) {
  if (count == 0) return;
  seeded_kernel<T><<<grid_for(count), block_threads, 0, stream>>>(out, count, seed);
  check_launch("seeded_kernel");
}

}  // namespace gradsync::kernels::device
