// SPDX-License-Identifier: Apache-2.0
// The per-thread phases of cuda_ipc's one-shot and two-shot kernels (kernels/ipc.cuh),
// as GRADSYNC_HOST_DEVICE functions: the CPU tests run every rank's phases one after
// another (what the barriers order on the GPU) and check exact, bitwise-identical results.
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

}  // namespace gradsync::kernels::body
