// SPDX-License-Identifier: Apache-2.0
// CUDA kernels for the elementwise work of an allreduce on device memory: reduce-into,
// multi-source reduce, finalize (avg), scale and cast. Each kernel is a thin __global__
// wrapper over a thread body in device_body.hpp (the same code the CPU tests run) and
// every launcher enqueues on the given stream without synchronizing.
#pragma once

#if !defined(__CUDACC__)
#error \
    "gradsync/kernels/elementwise.cuh holds CUDA kernels: include it only from a .cu file compiled by nvcc (host code uses gradsync/kernels/host.hpp, or transport::nccl with algo::native)"
#endif

#include <cuda_runtime.h>

#include <cstddef>

#include "gradsync/core/cuda_check.hpp"
#include "gradsync/kernels/device_body.hpp"
#include "gradsync/kernels/functors.hpp"

namespace gradsync::kernels::device {

/// Threads per block for the elementwise kernels (memory-bound: 256 keeps 8 blocks/SM).
inline constexpr unsigned block_threads = 256;

__device__ inline std::size_t thread_index() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline std::size_t thread_count() {
  return static_cast<std::size_t>(gridDim.x) * blockDim.x;
}

/// A grid that covers `work` items once but never more blocks than can be resident
/// (8 per multiprocessor at 256 threads): the grid-stride loop does the rest.
inline unsigned grid_for(std::size_t work) {
  const std::size_t want = (work + block_threads - 1) / block_threads;
  const std::size_t cap = static_cast<std::size_t>(cuda::sm_count()) * 8;
  const std::size_t g = want < cap ? want : cap;
  return static_cast<unsigned>(g ? g : 1);
}

template <class T, class Op, bool Finalize>
__global__ void __launch_bounds__(block_threads)
    reduce_into_kernel(T* dst, const T* src, std::size_t n, compute_t<T> ranks) {
  body::reduce_into<T, Op, Finalize>(dst, src, n, ranks, thread_index(), thread_count());
}

template <class T, class G>
__global__ void __launch_bounds__(block_threads) map_kernel(T* data, std::size_t n, G g) {
  body::map_in_place(data, n, g, thread_index(), thread_count());
}

template <class From, class To>
__global__ void __launch_bounds__(block_threads)
    cast_kernel(To* dst, const From* src, std::size_t n) {
  body::cast<From, To>(dst, src, n, thread_index(), thread_count());
}

template <class T, class Op>
__global__ void __launch_bounds__(block_threads)
    reduce_sources_kernel(T* dst, body::sources<T> in, std::size_t n) {
  body::reduce_sources<T, Op>(dst, in, n, thread_index(), thread_count());
}

inline void check_launch(const char* what) {
  cuda::check(cudaGetLastError(), what, __FILE__, __LINE__);
}

/// dst[i] = combine(dst[i], src[i]) on `stream`; with `finalize_ranks` > 0 the op's final
/// step (avg: divide by that many ranks) is fused into the same pass.
template <class T, class Op>
void reduce_into(T* dst, const T* src, std::size_t n, Op, cudaStream_t stream,
                 std::size_t finalize_ranks = 0) {
  if (n == 0) return;
  const unsigned grid = grid_for(n / (16 / sizeof(T)) + 1);
  bool fused = false;
  if constexpr (needs_finalize_v<Op>) {
    if (finalize_ranks > 0) {
      reduce_into_kernel<T, Op, true><<<grid, block_threads, 0, stream>>>(
          dst, src, n, static_cast<compute_t<T>>(finalize_ranks));
      fused = true;
    }
  }
  if (!fused) {
    reduce_into_kernel<T, Op, false>
        <<<grid, block_threads, 0, stream>>>(dst, src, n, compute_t<T>{1});
  }
  check_launch("reduce_into_kernel launch");
}

/// The op's final step in place (avg: divide by `ranks`); nothing for the other ops.
template <class T, class Op>
void finalize(T* data, std::size_t n, std::size_t ranks, Op, cudaStream_t stream) {
  if constexpr (needs_finalize_v<Op>) {
    if (n == 0) return;
    const finalize_fn<T, Op> f{static_cast<compute_t<T>>(ranks)};
    map_kernel<<<grid_for(n / (16 / sizeof(T)) + 1), block_threads, 0, stream>>>(data, n, f);
    check_launch("finalize kernel launch");
  }
}

/// data[i] *= factor.
template <class T>
void scale(T* data, std::size_t n, float factor, cudaStream_t stream) {
  if (n == 0) return;
  map_kernel<<<grid_for(n / (16 / sizeof(T)) + 1), block_threads, 0, stream>>>(data, n,
                                                                               scale_fn<T>{factor});
  check_launch("scale kernel launch");
}

/// dst[i] = To(src[i]) (float <-> half / bfloat16; To a floating element type).
template <class From, class To>
void cast(To* dst, const From* src, std::size_t n, cudaStream_t stream) {
  if (n == 0) return;
  constexpr std::size_t w = 16 / (sizeof(From) < sizeof(To) ? sizeof(From) : sizeof(To));
  cast_kernel<From, To><<<grid_for(n / w + 1), block_threads, 0, stream>>>(dst, src, n);
  check_launch("cast kernel launch");
}

/// dst[i] = finalize(in.p[0][i] op ... op in.p[count-1][i]) in source order.
template <class T, class Op>
void reduce_sources(T* dst, const body::sources<T>& in, std::size_t n, Op, cudaStream_t stream,
                    unsigned grid = 0) {
  if (n == 0) return;
  if (grid == 0) grid = grid_for(n / (16 / sizeof(T)) + 1);
  reduce_sources_kernel<T, Op><<<grid, block_threads, 0, stream>>>(dst, in, n);
  check_launch("reduce_sources_kernel launch");
}

}  // namespace gradsync::kernels::device
