// SPDX-License-Identifier: Apache-2.0
// compress::int8's kernels for device buffers: block scales, codes (with the error-feedback
// residual) and decoding, over the element functors of kernels/quantize.hpp (quant_code,
// dequant, magnitude_key), so a GPU computes the bits the CPU tests check. Every launcher
// enqueues on `stream` without synchronizing. (The allreducer compresses host buffers
// only; these are the pieces a device codec is built from.)
#pragma once

#if !defined(__CUDACC__)
#error \
    "gradsync/kernels/quantize.cuh holds CUDA kernels: include it only from a .cu file compiled by nvcc (host code uses gradsync/kernels/quantize.hpp)"
#endif

#include <cuda_runtime.h>

#include <cfloat>
#include <cstddef>
#include <cstdint>

#include "gradsync/core/cuda_check.hpp"
#include "gradsync/kernels/elementwise.cuh"
#include "gradsync/kernels/magnitude.hpp"
#include "gradsync/kernels/quantize.hpp"

namespace gradsync::kernels::device {

/// One thread block per quantisation block (grid-stride over blocks): the largest
/// magnitude key, then the host's rule for the float scale (rounded up; Inf for NaN/Inf).
template <class T>
__global__ void __launch_bounds__(block_threads)
    absmax_kernel(float* scales, const T* x, std::size_t count, std::size_t block) {
  using K = magnitude_key_t<T>;
  __shared__ K part[block_threads];
  const std::size_t blocks = (count + block - 1) / block;
  for (std::size_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const std::size_t i0 = b * block, end = i0 + block < count ? i0 + block : count;
    K m = 0;
    for (std::size_t i = i0 + threadIdx.x; i < end; i += blockDim.x) {
      const K k = magnitude_key(x[i]);
      m = k > m ? k : m;
    }
    part[threadIdx.x] = m;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
      if (threadIdx.x < s && part[threadIdx.x + s] > part[threadIdx.x])
        part[threadIdx.x] = part[threadIdx.x + s];
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      const K top = part[0];
      T a;
      memcpy(&a, &top, sizeof a);
      float s = static_cast<float>(a);
      if (!(a <= static_cast<T>(FLT_MAX))) {
        s = INFINITY;
      } else if (static_cast<T>(s) < a) {
        s = nextafterf(s, INFINITY);
      }
      scales[b] = s;
    }
    __syncthreads();
  }
}

template <class T>
__global__ void __launch_bounds__(block_threads)
    quantize_kernel(std::int8_t* codes, T* residual, const T* x, const float* scales,
                    std::size_t count, std::size_t block, int levels) {
  const T lv = static_cast<T>(levels);
  for (std::size_t i = thread_index(); i < count; i += thread_count()) {
    const T s = static_cast<T>(scales[i / block]);
    const bool finite = s <= static_cast<T>(FLT_MAX);
    const bool coded = s > 0 && finite && lv / s <= static_cast<T>(FLT_MAX);
    const std::int8_t c = coded ? quant_code(x[i], lv / s, levels) : std::int8_t{0};
    codes[i] = c;
    // As the host's: what was not coded stays in the residual, unless the block is not
    // finite.
    if (residual) residual[i] = coded ? x[i] - dequant(c, s / lv) : finite ? x[i] : T(0);
  }
}

template <class T>
__global__ void __launch_bounds__(block_threads)
    dequantize_kernel(T* x, const std::int8_t* sums, const float* scales, std::size_t count,
                      std::size_t block, int levels, std::size_t divide) {
  const T den = static_cast<T>(levels) * static_cast<T>(divide);
  for (std::size_t i = thread_index(); i < count; i += thread_count()) {
    x[i] = dequant(sums[i], static_cast<T>(scales[i / block]) / den);
  }
}

/// The device twins of kernels::block_absmax, quantize_blocks and dequantize_blocks.
template <class T>
void block_absmax(float* scales, const T* x, std::size_t count, std::size_t block,
                  cudaStream_t stream) {
  if (count == 0) return;
  absmax_kernel<T>
      <<<grid_for((count + block - 1) / block * block_threads), block_threads, 0, stream>>>(
          scales, x, count, block);
  check_launch("absmax_kernel");
}
template <class T>
void quantize_blocks(std::int8_t* codes, T* residual, const T* x, const float* scales,
                     std::size_t count, std::size_t block, int levels, cudaStream_t stream) {
  if (count == 0) return;
  quantize_kernel<T><<<grid_for(count), block_threads, 0, stream>>>(codes, residual, x, scales,
                                                                    count, block, levels);
  check_launch("quantize_kernel");
}
template <class T>
void dequantize_blocks(T* x, const std::int8_t* sums, const float* scales, std::size_t count,
                       std::size_t block, int levels, std::size_t divide, cudaStream_t stream) {
  if (count == 0) return;
  dequantize_kernel<T><<<grid_for(count), block_threads, 0, stream>>>(x, sums, scales, count, block,
                                                                      levels, divide);
  check_launch("dequantize_kernel");
}

}  // namespace gradsync::kernels::device
