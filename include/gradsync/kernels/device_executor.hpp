// SPDX-License-Identifier: Apache-2.0
// The executor of the device transports (nccl, cuda_ipc): reductions, the op's final
// step and copies, all enqueued on one CUDA stream, never synchronizing the host.
// This header compiles with a plain host compiler; the reductions are CUDA kernels, so a
// translation unit that runs them must be compiled by nvcc (a .cu file): otherwise the
// call fails to compile with a message saying so. Copies work from host code too.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <type_traits>

#include "gradsync/core/cuda_check.hpp"
#include "gradsync/kernels/functors.hpp"

#if defined(__CUDACC__)
#include "gradsync/kernels/elementwise.cuh"
#endif

namespace gradsync::kernels {

template <class T>
inline constexpr bool needs_nvcc_v = false;  // dependent false for the static_asserts below

/// Stream-ordered reduce/finalize/copy on device memory.
struct device_executor {
  cudaStream_t stream = nullptr;

  template <class T, class Op>
  void reduce_into(T* dst, const T* src, std::size_t n, Op op) const {
#if defined(__CUDACC__)
    device::reduce_into(dst, src, n, op, stream);
#else
    (void)dst, (void)src, (void)n, (void)op;
    static_assert(needs_nvcc_v<T>,
                  "gradsync: reductions on device memory are CUDA kernels; compile this "
                  "translation unit with nvcc (a .cu file), or use algo::native with "
                  "transport::nccl from host code");
#endif
  }
  template <class T, class Op>
  void finalize(T* data, std::size_t n, std::size_t ranks, Op op) const {
#if defined(__CUDACC__)
    device::finalize(data, n, ranks, op, stream);
#else
    (void)data, (void)n, (void)ranks, (void)op;
    if constexpr (needs_finalize_v<Op>) {
      static_assert(needs_nvcc_v<T>,
                    "gradsync: the avg finalize on device memory is a CUDA kernel; compile "
                    "this translation unit with nvcc (a .cu file)");
    }
#endif
  }
  void copy(void* dst, const void* src, std::size_t bytes) const {
    if (bytes && dst != src) {
      GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
    }
  }
};

}  // namespace gradsync::kernels
