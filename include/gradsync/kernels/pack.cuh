// SPDX-License-Identifier: Apache-2.0
// The batched pack/unpack kernel: one launch copies every piece of a fusion bucket's
// table (see device_pack.hpp for how the table is cut). Enqueued on a stream, no sync.
#pragma once

#if !defined(__CUDACC__)
#error \
    "gradsync/kernels/pack.cuh holds CUDA kernels: include it only from a .cu file compiled by nvcc (the host-side table builder is gradsync/kernels/device_pack.hpp)"
#endif

#include <cuda_runtime.h>

#include <cstddef>

#include "gradsync/core/cuda_check.hpp"
#include "gradsync/kernels/device_pack.hpp"

namespace gradsync::kernels::device {

/// Block b copies pieces b, b + gridDim.x, ... of the table.
__global__ void __launch_bounds__(256)
    copy_pieces_kernel(const copy_piece* table, std::size_t count) {
  for (std::size_t p = blockIdx.x; p < count; p += gridDim.x) {
    body::copy_piece_part(table[p], threadIdx.x, blockDim.x);
  }
}

/// Runs a copy table that lives in device memory (upload it once per bucket plan).
inline void copy_pieces(const copy_piece* device_table, std::size_t count, cudaStream_t stream) {
  if (count == 0) return;
  const std::size_t cap = static_cast<std::size_t>(cuda::sm_count()) * 8;
  const unsigned grid = static_cast<unsigned>(count < cap ? count : cap);
  copy_pieces_kernel<<<grid, 256, 0, stream>>>(device_table, count);
  cuda::check(cudaGetLastError(), "copy_pieces_kernel launch", __FILE__, __LINE__);
}

}  // namespace gradsync::kernels::device
