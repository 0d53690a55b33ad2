// SPDX-License-Identifier: Apache-2.0
// The per-thread phases of cuda_ipc's kernels (kernels/ipc.cuh: the one-shot and two-shot
// allreduce, broadcast, allgather, reduce_scatter), as GRADSYNC_HOST_DEVICE functions: the
// CPU tests run every rank's phases one after another (what the barriers order on the
// GPU) and check exact, bitwise-identical results.
#pragma once

#include <cstddef>

#include "gradsync/config.hpp"
#include "gradsync/kernels/device_body.hpp"
#include "gradsync/kernels/device_pack.hpp"

namespace gradsync::kernels::body {

/// Two-shot slice k of `count`: a multiple of 16 bytes long (the last takes the rest), so
/// every slice starts 16-byte aligned and the reduce and the copies use 16-byte accesses.
struct slice {
  std::size_t offset, count;
};
template <class T>
GRADSYNC_HOST_DEVICE inline slice slice_of(std::size_t count, std::size_t n, std::size_t k) {
  constexpr std::size_t w = 16 / sizeof(T);
  const std::size_t per = (count + n * w - 1) / (n * w) * w;
  const std::size_t off = k * per < count ? k * per : count;
  return {off, count - off < per ? count - off : per};
}

/// One-shot: out = data[0] (+) ... (+) data[n-1] over the whole chunk, in rank order.
template <class T, class Op>
GRADSYNC_HOST_DEVICE inline void one_shot_phase(T* const* data, std::size_t nranks, T* out,
                                                std::size_t count, std::size_t t, std::size_t nt) {
  sources<T> in{};
  in.count = nranks;
  for (std::size_t k = 0; k < max_sources; ++k) in.p[k] = k < nranks ? data[k] : nullptr;
  reduce_sources<T, Op>(out, in, count, t, nt);
}

/// Two-shot phase 1: rank `rank` reduces its slice from every rank into its own staging.
template <class T, class Op>
GRADSYNC_HOST_DEVICE inline void two_shot_reduce_phase(T* const* data, std::size_t nranks,
                                                       std::size_t rank, std::size_t count,
                                                       std::size_t t, std::size_t nt) {
  const slice mine = slice_of<T>(count, nranks, rank);
  sources<T> in{};
  in.count = nranks;
  for (std::size_t k = 0; k < max_sources; ++k)
    in.p[k] = k < nranks ? data[k] + mine.offset : nullptr;
  reduce_sources<T, Op>(data[rank] + mine.offset, in, mine.count, t, nt);
}

/// Two-shot phase 2: every slice k, from its owner's staging, into this rank's output.
template <class T>
GRADSYNC_HOST_DEVICE inline void two_shot_gather_phase(T* const* data, std::size_t nranks, T* out,
                                                       std::size_t count, std::size_t t,
                                                       std::size_t nt) {
  for (std::size_t k = 0; k < nranks; ++k) {
    const slice s = slice_of<T>(count, nranks, k);
    copy_piece_part(copy_piece{data[k] + s.offset, out + s.offset, s.count * sizeof(T)}, t, nt);
  }
}

/// Broadcast, one chunk: every rank but the root copies the root's staging to `out`.
GRADSYNC_HOST_DEVICE inline void broadcast_phase(const void* root_staging, void* out,
                                                 std::size_t bytes, std::size_t t, std::size_t nt) {
  copy_piece_part(copy_piece{root_staging, out, bytes}, t, nt);
}

/// Allgather, one chunk: bytes [offset, offset + len) of every rank's block, staged at the
/// start of each rank's staging, to out[r * block + offset ...].
GRADSYNC_HOST_DEVICE inline void allgather_phase(const unsigned char* const* data,
                                                 std::size_t nranks, unsigned char* out,
                                                 std::size_t block, std::size_t offset,
                                                 std::size_t len, std::size_t t, std::size_t nt) {
  for (std::size_t r = 0; r < nranks; ++r) {
    copy_piece_part(copy_piece{data[r], out + r * block + offset, len}, t, nt);
  }
}

/// Reduce-scatter: how many output elements one chunk takes when every rank stages its
/// n pieces of it, each piece starting 16-byte aligned (`stride` elements apart).
template <class T>
GRADSYNC_HOST_DEVICE inline std::size_t scatter_chunk(std::size_t staging_bytes, std::size_t n) {
  constexpr std::size_t w = 16 / sizeof(T);
  return staging_bytes / (n * sizeof(T)) / w * w;
}
template <class T>
GRADSYNC_HOST_DEVICE inline std::size_t scatter_stride(std::size_t len) {
  constexpr std::size_t w = 16 / sizeof(T);
  return (len + w - 1) / w * w;
}

/// Reduce-scatter, one chunk of `len` output elements: rank `rank` reduces piece `rank`
/// of every rank's staging (at rank * stride) into `out`, in rank order.
template <class T, class Op>
GRADSYNC_HOST_DEVICE inline void reduce_scatter_phase(T* const* data, std::size_t nranks,
                                                      std::size_t rank, std::size_t stride, T* out,
                                                      std::size_t len, std::size_t t,
                                                      std::size_t nt) {
  sources<T> in{};
  in.count = nranks;
  for (std::size_t k = 0; k < max_sources; ++k)
    in.p[k] = k < nranks ? data[k] + rank * stride : nullptr;
  reduce_sources<T, Op>(out, in, len, t, nt);
}

}  // namespace gradsync::kernels::body
