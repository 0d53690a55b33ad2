// SPDX-License-Identifier: Apache-2.0
// Kernels of transport::cuda_ipc: one-shot and two-shot allreduce, broadcast, allgather
// and reduce_scatter, reading the peers' staging buffers directly (cudaIpc-mapped device
// memory), with the cross-process barrier built from flags in device memory.
//
// Memory model (PTX ISA, "Memory Consistency Model"): each rank owns a flag array that
// every rank can write: flags[src][block]. A barrier is
//   1. every thread: fence.sc.sys (__threadfence_system) then bar.sync - all of the
//      block's earlier writes (its reduced slice; and the copy-in, which stream order
//      made happen-before the kernel) are ordered before what follows;
//   2. thread k < nranks: st.release.sys flags_of_rank_k[me][block] = epoch - a release
//      at SYSTEM scope, because the reader is another process (possibly another GPU);
//   3. threads poll ld.acquire.sys on this rank's flags[src][b] for every src and every
//      block b of the grid until >= epoch (a grid-wide barrier across ranks: every
//      element a peer wrote is visible whichever of its blocks wrote it);
//   4. bar.sync - extends the acquire to every thread of the block, whose following
//      plain loads of peer memory are then ordered after the peers' writes.
// Epochs only grow (the host counts barriers, identically on every rank), so flags are
// never reset and a fast peer's newer epoch still satisfies ">= epoch". A rank waits for
// every block of every peer, so the grid must be resident at once: the host caps it at
// 4 blocks per multiprocessor, and every rank must compute the same grid (same GPU model).
// Each poll loop gives up at a deadline read from %globaltimer, sets *status = 1 and the
// kernel exits; the host turns that into errc::timeout at synchronize().
#pragma once

#if !defined(__CUDACC__)
#error \
    "gradsync/kernels/ipc.cuh holds CUDA kernels: include it only from a .cu file compiled by nvcc (transport::cuda_ipc's allreduce needs nvcc)"
#endif

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "gradsync/kernels/device_body.hpp"
#include "gradsync/kernels/device_ipc_body.hpp"
#include "gradsync/kernels/functors.hpp"

namespace gradsync::kernels::ipc {

/// Most ranks (processes) of one cuda_ipc group, and most blocks of one launch.
inline constexpr std::size_t max_ranks = body::max_sources;
inline constexpr std::size_t max_blocks = 1024;
/// Bytes of one rank's flag array: flags[src][block].
inline constexpr std::size_t flag_bytes = max_ranks * max_blocks * sizeof(unsigned);

/// Everything one launch needs, passed by value.
template <class T>
struct args {
  T* data[max_ranks];          ///< every rank's staging half for this chunk ([rank] = own)
  unsigned* flags[max_ranks];  ///< every rank's flag array
  T* out;                      ///< this rank's output (the caller's buffer)
  std::size_t count;           ///< elements in this chunk
  unsigned rank, nranks;
  unsigned epoch;                 ///< epoch of the first barrier (two-shot uses epoch + 1 too)
  unsigned long long timeout_ns;  ///< per-barrier budget
  int* status;                    ///< set to 1 on timeout
};

__device__ inline unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/// A broadcast, allgather or reduce_scatter launch: one chunk, every rank's staging as
/// bytes (reduce_scatter reads them as T).
struct coll_args {
  unsigned char* data[max_ranks];  ///< every rank's staging half for this chunk
  unsigned* flags[max_ranks];      ///< every rank's flag array
  unsigned char* out;              ///< where this rank's result of the chunk goes
  std::size_t len;     ///< bytes (broadcast, allgather) or output elements (reduce_scatter)
  std::size_t block;   ///< allgather: bytes of one rank's block in `out`
  std::size_t offset;  ///< allgather: the chunk's offset inside each block
  std::size_t stride;  ///< reduce_scatter: elements between the staged pieces
  unsigned rank, nranks, root;
  unsigned epoch;  ///< epoch of the barrier
  unsigned long long timeout_ns;
  int* status;
};

/// Grid-wide barrier across all ranks; false if it timed out (then *status == 1).
/// A: args<T> or coll_args.
template <class A>
__device__ bool barrier(const A& a, unsigned epoch) {
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x < a.nranks) {
    unsigned* slot = a.flags[threadIdx.x] + a.rank * max_blocks + blockIdx.x;
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(slot), "r"(epoch) : "memory");
  }
  const unsigned long long until = global_ns() + a.timeout_ns;
  bool ok = true;
  const unsigned* mine = a.flags[a.rank];
  for (unsigned i = threadIdx.x; ok && i < a.nranks * gridDim.x; i += blockDim.x) {
    const unsigned* f = mine + (i / gridDim.x) * max_blocks + (i % gridDim.x);
    for (unsigned spins = 0;; ++spins) {
      unsigned v;
      asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(f) : "memory");
      if (static_cast<int>(v - epoch) >= 0) break;
      if ((spins & 255u) == 255u && global_ns() > until) {
        atomicExch(a.status, 1);
        ok = false;
        break;
      }
    }
  }
  return __syncthreads_and(ok) != 0;
}

/// One-shot: every rank reduces the whole chunk from every rank's staging buffer, in
/// rank order, straight into its output.
template <class T, class Op>
__global__ void __launch_bounds__(256, 4) one_shot_kernel(args<T> a) {
  if (!barrier(a, a.epoch)) return;
  const std::size_t t = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t nt = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  body::one_shot_phase<T, Op>(a.data, a.nranks, a.out, a.count, t, nt);
}

/// Two-shot: rank r reduces slice r from everyone into its own staging buffer, a
/// barrier publishes the slices, and every rank copies every slice to its output.
template <class T, class Op>
__global__ void __launch_bounds__(256, 4) two_shot_kernel(args<T> a) {
  if (!barrier(a, a.epoch)) return;
  const std::size_t t = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t nt = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  body::two_shot_reduce_phase<T, Op>(a.data, a.nranks, a.rank, a.count, t, nt);
  if (!barrier(a, a.epoch + 1)) return;
  body::two_shot_gather_phase<T>(a.data, a.nranks, a.out, a.count, t, nt);
}

__device__ inline std::size_t thread_index() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline std::size_t thread_count() {
  return static_cast<std::size_t>(gridDim.x) * blockDim.x;
}

/// Broadcast, one chunk: after the barrier every rank but the root copies the root's
/// staging. (A template, like every kernel here: the header is included by many units.)
template <int = 0>
__global__ void __launch_bounds__(256, 4) broadcast_kernel(coll_args a) {
  if (!barrier(a, a.epoch) || a.rank == a.root) return;
  body::broadcast_phase(a.data[a.root], a.out, a.len, thread_index(), thread_count());
}

/// Allgather, one chunk: every rank's staged piece to its block of the output.
template <int = 0>
__global__ void __launch_bounds__(256, 4) allgather_kernel(coll_args a) {
  if (!barrier(a, a.epoch)) return;
  body::allgather_phase(a.data, a.nranks, a.out, a.block, a.offset, a.len, thread_index(),
                        thread_count());
}

/// Reduce-scatter, one chunk: this rank's piece of every rank's staging, reduced in rank
/// order.
template <class T, class Op>
__global__ void __launch_bounds__(256, 4) reduce_scatter_kernel(coll_args a) {
  if (!barrier(a, a.epoch)) return;
  T* data[max_ranks];
  for (unsigned k = 0; k < max_ranks; ++k) data[k] = reinterpret_cast<T*>(a.data[k]);
  body::reduce_scatter_phase<T, Op>(data, a.nranks, a.rank, a.stride, reinterpret_cast<T*>(a.out),
                                    a.len, thread_index(), thread_count());
}

}  // namespace gradsync::kernels::ipc
