// SPDX-License-Identifier: Apache-2.0
// algo::direct_two_shot on registered buffers: when every rank's vector lies in its
// transport heap (transport::shm::allocate), ranks read each other's vectors in place
// instead of staging them through the segment. Per rank and call that moves
// (3n-1)S/n bytes through memory instead of (5n-1)S/n (docs/performance.md).
//
//   open    every rank publishes where its vector lies in its heap (or npos) with its
//           call header; all ranks see all notes, so they all pick the same path.
//   reduce  rank r combines slice r of every rank's vector in rank order 0..n-1 (in
//           L1-sized blocks) and writes it into its own vector; stage barrier.
//   gather  rank r copies every other slice, already reduced, from its owner's vector
//           into its own; stage barrier (after it no peer reads this rank's vector).
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "gradsync/algo/detail/direct_call.hpp"
#include "gradsync/algo/detail/partition.hpp"
#include "gradsync/core/error.hpp"

namespace gradsync::algo::detail {

/// A peer-memory transport whose ranks can place vectors in a heap every peer maps.
template <class Tr>
concept registered_memory_transport = requires(const Tr& ct, const void* p, std::size_t i,
                                               std::size_t b) {
  { ct.registered_offset(p, b) } -> std::same_as<std::size_t>;  // offset in own heap
  { ct.heap(i) } -> std::same_as<const std::byte*>;             // rank i's heap
  { ct.heap_bytes() } -> std::same_as<std::size_t>;             // each rank's heap size
  { Tr::npos } -> std::convertible_to<std::size_t>;             // "not registered"
};

/// Names the reduce block in the workspace.
struct registered_scratch;

/// The note a rank publishes for [p, p + bytes): its offset in the rank's heap, or
/// not_registered (also on transports without a heap).
inline constexpr std::uint64_t not_registered = ~std::uint64_t{0};
template <class Tr>
std::uint64_t registered_note_of(const Tr& t, const void* p, std::size_t bytes) {
  if constexpr (registered_memory_transport<Tr>) {
    const std::size_t off = t.registered_offset(p, bytes);
    return off == Tr::npos ? not_registered : off;
  } else {
    (void)t, (void)p, (void)bytes;
    return not_registered;
  }
}

/// What each rank publishes in its slot payload: its vector's offset in its heap.
template <class Tr>
std::uint64_t registered_note(direct_call<Tr>& c) {
  return registered_note_of(c.t_, c.data_, c.bytes(c.count_));
}

/// A bad note of rank j (`what` it published): closes the call and throws.
template <class Tr>
[[noreturn]] void bad_note(direct_call<Tr>& c, std::size_t j, const std::string& what) {
  c.close();  // nobody reads through the notes: a later call can reuse the slots
  throw error(errc::mismatch, {c.r_, j, c.ctx_.seq},
              "rank " + std::to_string(j) + " published " + what +
                  " (a corrupt or mismatched peer); the call reads nothing through it");
}

/// After open(): the note rank j published at the start of its payload, checked before
/// anyone reads through it: a registered span of `bytes` must lie inside rank j's heap,
/// aligned to the element's size, its alignment in every element type (a corrupt note
/// would have this rank read another rank's memory out of bounds, or sum the wrong bytes
/// identically on every rank, which no verify can see).
/// Every rank reads the same notes, so on a bad one every rank closes the call and throws
/// errc::mismatch naming rank j.
template <class Tr>
std::uint64_t note_of(direct_call<Tr>& c, std::size_t j, std::size_t bytes) {
  std::uint64_t off;
  std::memcpy(&off, c.payload_bytes(j), sizeof off);
  if (off == not_registered) return off;
  if constexpr (registered_memory_transport<Tr>) {
    const std::uint64_t heap = c.t_.heap_bytes();
    const bool inside = off <= heap && bytes <= heap - off;
    if (inside && off % c.elem_ == 0) return off;
    bad_note(c, j,
             inside ? "a registered buffer at offset " + std::to_string(off) + ", not aligned to " +
                          std::to_string(c.elem_) + " bytes"
                    : "a registered buffer of " + std::to_string(bytes) + " bytes at offset " +
                          std::to_string(off) + ", outside its heap of " + std::to_string(heap) +
                          " bytes");
  } else {
    bad_note(
        c, j,
        "a registered-buffer note (" + std::to_string(off) + ") on a transport without a heap");
  }
}

/// After open(): where rank j's registered buffer of `bytes` lies in this process (its
/// heap, at the offset it published, checked by note_of). Only meaningful when its note
/// is not not_registered; nullptr on transports without a heap.
template <class Tr>
const std::byte* registered_at(direct_call<Tr>& c, std::size_t j, std::size_t bytes) {
  if constexpr (registered_memory_transport<Tr>) {
    return c.t_.heap(j) + note_of(c, j, bytes);
  } else {
    (void)c, (void)j, (void)bytes;
    return nullptr;
  }
}

/// After open(): whether every rank's vector of `bytes` is registered (the same answer
/// everywhere); throws as note_of on a note that does not fit its rank's heap.
template <class Tr>
bool all_registered(direct_call<Tr>& c, std::size_t bytes) {
  bool all = true;
  for (std::size_t j = 0; j < c.n_; ++j) {  // every note checked, registered or not
    if (note_of(c, j, bytes) == not_registered) all = false;
  }
  return all;
}

/// The reduce and gather phases on registered vectors (see the file comment); ends
/// with close(). `stream`: write gathered slices with non-temporal stores.
template <class Tr>
void two_shot_registered(direct_call<Tr>& c, bool stream) {
  if constexpr (registered_memory_transport<Tr>) {
    Tr& t = c.t_;
    const std::size_t n = c.n_, r = c.r_;
    // Through the checked notes (all_registered passed; a check is a few compares).
    auto vec = [&](std::size_t j) -> const std::byte* {
      return j == r ? c.data_ : registered_at(c, j, c.bytes(c.count_));
    };
    const std::size_t blk = std::max<std::size_t>(1, direct_block_bytes / c.elem_);
    auto* tmp = static_cast<std::byte*>(t.scratch().template get<registered_scratch>(c.bytes(blk)));
    const range my = part(c.count_, n, r);
    for (std::size_t off = 0; off < my.count; off += blk) {
      const std::size_t len = std::min(blk, my.count - off);
      const std::size_t at = my.offset + off;
      // Combined into an L1 block first: the own vector is one of the sources.
      c.reduce(
          tmp, [&](std::size_t j) { return c.at(vec(j), at); }, n, len);
      c.finalize(tmp, len);
      std::memcpy(c.at(c.data_, at), tmp, c.bytes(len));
    }
    c.barrier(1);
    for (std::size_t i = 1; i < n; ++i) {  // start after this rank: spread the readers
      const std::size_t owner = (r + i) % n;
      const range s = part(c.count_, n, owner);
      copy_out(c.at(c.data_, s.offset), c.at(vec(owner), s.offset), c.bytes(s.count), stream);
    }
    if (stream) stream_fence();
    c.barrier(2);
    c.close();
  } else {
    (void)c, (void)stream;
  }
}

}  // namespace gradsync::algo::detail
