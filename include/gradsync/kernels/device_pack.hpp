// SPDX-License-Identifier: Apache-2.0
// Batched pack/unpack of many small tensors into one flat buffer in ONE kernel launch
// (what fusion needs on the GPU: a bucket of 500 gradients is one launch, not 500
// cudaMemcpyAsync calls). The host cuts every tensor into pieces of at most
// `piece_bytes`; each thread block copies whole pieces with the widest access (16, 8, 4,
// 2 or 1 bytes) that the piece's two addresses and length allow. The table is built once
// per bucket plan and uploaded once; pack.cuh launches it.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "gradsync/config.hpp"

namespace gradsync::kernels {

/// One contiguous copy done by one thread block.
struct copy_piece {
  const void* src;
  void* dst;
  std::size_t bytes;
};

/// A tensor in a fused bucket: where it lives and where it goes in the flat buffer.
struct tensor_slot {
  void* ptr;           ///< the tensor's own (device) memory
  std::size_t bytes;   ///< its size
  std::size_t offset;  ///< its byte offset inside the flat buffer
};

/// Pieces small enough that blocks share big tensors and many small ones balance out.
inline constexpr std::size_t piece_bytes = 64 << 10;

/// The copy table for packing `tensors` into `flat` (or, with unpack, the reverse).
inline std::vector<copy_piece> make_pack_pieces(std::span<const tensor_slot> tensors, void* flat,
                                                bool unpack) {
  std::vector<copy_piece> out;
  auto* base = static_cast<std::byte*>(flat);
  for (const tensor_slot& t : tensors) {
    for (std::size_t off = 0; off < t.bytes; off += piece_bytes) {
      const std::size_t len = t.bytes - off < piece_bytes ? t.bytes - off : piece_bytes;
      std::byte* tp = static_cast<std::byte*>(t.ptr) + off;
      std::byte* fp = base + t.offset + off;
      out.push_back(unpack ? copy_piece{fp, tp, len} : copy_piece{tp, fp, len});
    }
  }
  return out;
}

namespace body {

struct alignas(16) unit16 {
  std::uint32_t w[4];
};

/// Copies unit i of type U (typed access on the GPU, memcpy on the host: no aliasing UB).
template <class U>
GRADSYNC_HOST_DEVICE inline void copy_unit(unsigned char* dst, const unsigned char* src,
                                           std::size_t i) {
#if defined(__CUDA_ARCH__)
  reinterpret_cast<U*>(dst)[i] = reinterpret_cast<const U*>(src)[i];
#else
  assert(reinterpret_cast<std::uintptr_t>(dst + i * sizeof(U)) % alignof(U) == 0 &&
         reinterpret_cast<std::uintptr_t>(src + i * sizeof(U)) % alignof(U) == 0 &&
         "a GPU access of U bytes must be aligned to U");
  std::memcpy(dst + i * sizeof(U), src + i * sizeof(U), sizeof(U));
#endif
}

template <class U>
GRADSYNC_HOST_DEVICE inline void copy_units(const copy_piece& p, std::size_t t, std::size_t nt) {
  const auto* src = static_cast<const unsigned char*>(p.src);
  auto* dst = static_cast<unsigned char*>(p.dst);
  for (std::size_t i = t; i < p.bytes / sizeof(U); i += nt) copy_unit<U>(dst, src, i);
}

/// Thread `t` of `nt` threads of one block copies its share of piece `p`, with the widest
/// unit that divides both addresses and the length (one branch per piece).
GRADSYNC_HOST_DEVICE inline void copy_piece_part(const copy_piece& p, std::size_t t,
                                                 std::size_t nt) {
  const std::uintptr_t any = reinterpret_cast<std::uintptr_t>(p.src) |
                             reinterpret_cast<std::uintptr_t>(p.dst) |
                             static_cast<std::uintptr_t>(p.bytes);
  if ((any & 15u) == 0) {
    copy_units<unit16>(p, t, nt);
  } else if ((any & 7u) == 0) {
    copy_units<std::uint64_t>(p, t, nt);
  } else if ((any & 3u) == 0) {
    copy_units<std::uint32_t>(p, t, nt);
  } else if ((any & 1u) == 0) {
    copy_units<std::uint16_t>(p, t, nt);
  } else {
    copy_units<unsigned char>(p, t, nt);
  }
}

}  // namespace body
}  // namespace gradsync::kernels
