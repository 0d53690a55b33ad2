// SPDX-License-Identifier: Apache-2.0
// compress::topk's kernels for device buffers: the k largest magnitudes (ties to the lower
// index, indices ascending: the host's kernels::topk_indices picks the same), the values
// sent, the residual left behind, and the rank-ordered decode. The selection is a radix
// select over the magnitude keys (kernels/radix_select.hpp, one histogram pass per key
// byte) and a stable compaction (CUB's DeviceScan and DeviceSelect). Every launcher
// enqueues on `stream` without synchronizing (but for topk_buffers' growth).
#pragma once

#if !defined(__CUDACC__)
#error \
    "gradsync/kernels/select.cuh holds CUDA kernels: include it only from a .cu file compiled by nvcc (host code uses gradsync/kernels/select.hpp)"
#endif

#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gradsync/core/cuda_check.hpp"
#include "gradsync/kernels/elementwise.cuh"
#include "gradsync/kernels/magnitude.hpp"
#include "gradsync/kernels/radix_select.hpp"
#include "gradsync/kernels/rounding.hpp"
#include "gradsync/kernels/select.hpp"

namespace gradsync::kernels::device {

/// The device memory of topk_indices for buckets of up to `capacity` elements, kept from
/// call to call (as compress::topk keeps kernels::topk_scratch per bucket).
template <class T>
struct topk_buffers {
  using key = magnitude_key_t<T>;
  unsigned long long* hist = nullptr;  // one pass's histogram
  radix_state<key>* state = nullptr;
  std::uint32_t* flags = nullptr;  // key == kth, then: kept
  std::uint32_t* ranks = nullptr;  // each tie's rank among the ties
  void* temp = nullptr;            // CUB's work space
  std::size_t temp_bytes = 0;
  int* selected = nullptr;  // how many DeviceSelect kept (k)
  std::size_t capacity = 0;

  topk_buffers() = default;
  topk_buffers(const topk_buffers&) = delete;
  topk_buffers& operator=(const topk_buffers&) = delete;
  ~topk_buffers() {
    for (void* p : {static_cast<void*>(hist), static_cast<void*>(state), static_cast<void*>(flags),
                    static_cast<void*>(ranks), temp, static_cast<void*>(selected)}) {
      if (p) (void)cudaFree(p);
    }
  }

  /// Room for `count` elements: allocates (and so synchronizes) only when a bucket is
  /// larger than every one before.
  void reserve(std::size_t count) {
    if (!hist) {
      GRADSYNC_CUDA_CHECK(cudaMalloc(&hist, radix_bins * sizeof(unsigned long long)));
      GRADSYNC_CUDA_CHECK(cudaMalloc(&state, sizeof(radix_state<key>)));
      GRADSYNC_CUDA_CHECK(cudaMalloc(&selected, sizeof(int)));
    }
    if (count <= capacity) return;
    for (void* p : {static_cast<void*>(flags), static_cast<void*>(ranks), temp}) {
      if (p) GRADSYNC_CUDA_CHECK(cudaFree(p));
    }
    GRADSYNC_CUDA_CHECK(cudaMalloc(&flags, count * sizeof(std::uint32_t)));
    GRADSYNC_CUDA_CHECK(cudaMalloc(&ranks, count * sizeof(std::uint32_t)));
    std::size_t scan = 0, select = 0;
    const int n = static_cast<int>(count);
    GRADSYNC_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, scan, flags, ranks, n));
    GRADSYNC_CUDA_CHECK(cub::DeviceSelect::Flagged(
        nullptr, select, thrust::counting_iterator<std::uint32_t>(0), flags, ranks, selected, n));
    temp_bytes = scan > select ? scan : select;
    GRADSYNC_CUDA_CHECK(cudaMalloc(&temp, temp_bytes));
    capacity = count;
  }
};

/// Counts the digits of pass `pass` of the keys still in the running (block-local bins
/// in shared memory, then added to the global histogram).
template <class T>
__global__ void __launch_bounds__(block_threads)
    radix_histogram_kernel(unsigned long long* hist, const T* x, std::size_t count,
                           const radix_state<magnitude_key_t<T>>* state, unsigned pass) {
  __shared__ unsigned bins[radix_bins];
  for (unsigned b = threadIdx.x; b < radix_bins; b += blockDim.x) bins[b] = 0;
  __syncthreads();
  const radix_state<magnitude_key_t<T>> s = *state;
  for (std::size_t i = thread_index(); i < count; i += thread_count()) {
    const auto k = magnitude_key(x[i]);
    if (radix_in_running(k, s)) atomicAdd(&bins[radix_digit(k, pass)], 1u);
  }
  __syncthreads();
  for (unsigned b = threadIdx.x; b < radix_bins; b += blockDim.x) {
    if (bins[b]) atomicAdd(&hist[b], static_cast<unsigned long long>(bins[b]));
  }
}

/// One thread: narrows the state by the pass's histogram and clears it for the next.
template <class K>
__global__ void radix_narrow_kernel(radix_state<K>* state, unsigned long long* hist,
                                    unsigned pass) {
  if (thread_index() != 0) return;
  radix_narrow(*state, hist, pass);
  for (unsigned b = 0; b < radix_bins; ++b) hist[b] = 0;
}

template <class K>
__global__ void radix_start_kernel(radix_state<K>* state, std::size_t k) {
  if (thread_index() == 0) *state = radix_state<K>{0, 0, k};
}

/// flags[i] = 1 where x[i]'s key equals the k-th largest.
template <class T>
__global__ void __launch_bounds__(block_threads)
    tie_flags_kernel(std::uint32_t* flags, const T* x, std::size_t count,
                     const radix_state<magnitude_key_t<T>>* state) {
  const auto kth = state->prefix;
  for (std::size_t i = thread_index(); i < count; i += thread_count())
    flags[i] = magnitude_key(x[i]) == kth ? 1u : 0u;
}

/// flags[i] = 1 where top-k keeps x[i] (ranks: each tie's rank among the ties).
template <class T>
__global__ void __launch_bounds__(block_threads)
    keep_flags_kernel(std::uint32_t* flags, const std::uint32_t* ranks, const T* x,
                      std::size_t count, const radix_state<magnitude_key_t<T>>* state) {
  const radix_state<magnitude_key_t<T>> s = *state;
  for (std::size_t i = thread_index(); i < count; i += thread_count())
    flags[i] = topk_keeps(magnitude_key(x[i]), s.prefix, ranks[i], s.want) ? 1u : 0u;
}

template <class T>
__global__ void __launch_bounds__(block_threads)
    add_in_kernel(T* x, const T* add, std::size_t count) {
  for (std::size_t i = thread_index(); i < count; i += thread_count()) x[i] = add_rn(x[i], add[i]);
}

template <class I>
__global__ void __launch_bounds__(block_threads) iota_kernel(I* idx, std::size_t k) {
  for (std::size_t i = thread_index(); i < k; i += thread_count()) idx[i] = static_cast<I>(i);
}

/// idx[0..k) := the indices of the k largest |v[i]| (ties: lower index), ascending, where
/// v = x, or with `add`: v = x + add, left in x. Needs k <= count < 2^31.
template <class T>
void topk_indices(std::uint32_t* idx, T* x, std::size_t count, std::size_t k, topk_buffers<T>& buf,
                  const T* add, cudaStream_t stream) {
  using K = magnitude_key_t<T>;
  if (add && count) {
    add_in_kernel<T><<<grid_for(count), block_threads, 0, stream>>>(x, add, count);
    check_launch("add_in_kernel");
  }
  if (k >= count || k == 0) {
    if (k) {
      iota_kernel<std::uint32_t><<<grid_for(k), block_threads, 0, stream>>>(idx, k);
      check_launch("iota_kernel");
    }
    return;
  }
  buf.reserve(count);
  GRADSYNC_CUDA_CHECK(
      cudaMemsetAsync(buf.hist, 0, radix_bins * sizeof(unsigned long long), stream));
  radix_start_kernel<K><<<1, 1, 0, stream>>>(buf.state, k);
  for (unsigned pass = 0; pass < radix_passes<K>; ++pass) {
    radix_histogram_kernel<T>
        <<<grid_for(count), block_threads, 0, stream>>>(buf.hist, x, count, buf.state, pass);
    check_launch("radix_histogram_kernel");
    radix_narrow_kernel<K><<<1, 1, 0, stream>>>(buf.state, buf.hist, pass);
    check_launch("radix_narrow_kernel");
  }
  const int n = static_cast<int>(count);
  tie_flags_kernel<T>
      <<<grid_for(count), block_threads, 0, stream>>>(buf.flags, x, count, buf.state);
  check_launch("tie_flags_kernel");
  std::size_t bytes = buf.temp_bytes;
  GRADSYNC_CUDA_CHECK(
      cub::DeviceScan::ExclusiveSum(buf.temp, bytes, buf.flags, buf.ranks, n, stream));
  keep_flags_kernel<T>
      <<<grid_for(count), block_threads, 0, stream>>>(buf.flags, buf.ranks, x, count, buf.state);
  check_launch("keep_flags_kernel");
  bytes = buf.temp_bytes;
  GRADSYNC_CUDA_CHECK(cub::DeviceSelect::Flagged(buf.temp, bytes,
                                                 thrust::counting_iterator<std::uint32_t>(0),
                                                 buf.flags, idx, buf.selected, n, stream));
}

/// val[j] = v[idx[j]] * scale; with `residual`: residual[idx[j]] = 0 (it was sent).
template <class T>
__global__ void __launch_bounds__(block_threads)
    gather_values_kernel(T* val, T* residual, const T* v, const std::uint32_t* idx, std::size_t k,
                         T scale) {
  for (std::size_t j = thread_index(); j < k; j += thread_count()) {
    val[j] = mul_rn(v[idx[j]], scale);
    if (residual) residual[idx[j]] = T(0);
  }
}

/// x[idx[j]] += val[j]: one rank's block of the decode (indices distinct within a block).
/// An index outside x's `count` elements is not written; the lowest such position is kept
/// in *fault as (position << 32 | index) (positions < k < 2^31).
template <class T>
__global__ void __launch_bounds__(block_threads)
    scatter_add_kernel(T* x, std::size_t count, const T* val, const std::uint32_t* idx,
                       std::size_t k, unsigned long long* fault) {
  for (std::size_t j = thread_index(); j < k; j += thread_count()) {
    const std::uint32_t i = idx[j];
    if (i < count) {
      x[i] = add_rn(x[i], val[j]);
    } else if (fault) {
      atomicMin(fault, (static_cast<unsigned long long>(j) << 32) | i);
    }
  }
}

/// The values sent for the picked indices (and the residual's sent entries cleared).
template <class T>
void topk_gather(T* val, T* residual, const T* v, const std::uint32_t* idx, std::size_t k, T scale,
                 cudaStream_t stream) {
  if (k == 0) return;
  gather_values_kernel<T>
      <<<grid_for(k), block_threads, 0, stream>>>(val, residual, v, idx, k, scale);
  check_launch("gather_values_kernel");
}
/// Where a decode met an index outside its bucket: one word per peer, in device memory.
/// topk_clear_faults before the decode, topk_raise_faults after it.
inline constexpr unsigned long long topk_no_fault = ~0ull;

/// Sets faults[0..n) to topk_no_fault.
inline void topk_clear_faults(unsigned long long* faults, std::size_t n, cudaStream_t stream) {
  GRADSYNC_CUDA_CHECK(cudaMemsetAsync(faults, 0xff, n * sizeof(unsigned long long), stream));
}

/// Adds one rank's (values, indices) block into x (`count` elements); call it for the ranks
/// in rank order (into a zeroed x) for the host decode's bits. Indices come from a peer:
/// one outside x is never written, and `fault` (that peer's word of topk_clear_faults'
/// array; null: not reported) keeps the first such position for topk_raise_faults.
template <class T>
void topk_scatter_add(T* x, std::size_t count, const T* val, const std::uint32_t* idx,
                      std::size_t k, unsigned long long* fault, cudaStream_t stream) {
  if (k == 0) return;
  scatter_add_kernel<T><<<grid_for(k), block_threads, 0, stream>>>(x, count, val, idx, k, fault);
  check_launch("scatter_add_kernel");
}

/// After the decode of n peers' blocks into a bucket of `count` elements: waits for
/// `stream` and throws kernels::topk_index_error (errc::mismatch on `rank`, naming the
/// lowest peer whose block held an index outside the bucket, and the index) if any did.
inline void topk_raise_faults(const unsigned long long* faults, std::size_t n, std::size_t count,
                              std::size_t rank, cudaStream_t stream) {
  std::vector<unsigned long long> host(n);
  GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(host.data(), faults, n * sizeof(unsigned long long),
                                      cudaMemcpyDeviceToHost, stream));
  GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (std::size_t peer = 0; peer < n; ++peer) {
    if (host[peer] != topk_no_fault) {
      throw topk_index_error(rank, peer, static_cast<std::size_t>(host[peer] >> 32),
                             static_cast<std::uint32_t>(host[peer] & 0xffffffffu), count);
    }
  }
}

}  // namespace gradsync::kernels::device
