// SPDX-License-Identifier: Apache-2.0
// The per-rank heap of transport::shm: a region of the shared segment, owned by one
// rank, from which it allocates registered buffers (shm::allocate). Every peer maps
// the region, so algo::direct_two_shot reads a registered buffer in place instead of
// staging it, and zero-copy fusion arenas placed there skip one copy per byte.
//
// A first-fit free list of [offset, size) ranges; 64-byte aligned blocks; neighbours
// merge on release. Only its owner rank touches its allocator (not shared state); a
// mutex lets an allreducer's threads allocate and release concurrently.
#pragma once

#include <cstddef>
#include <iterator>
#include <map>
#include <mutex>
#include <string>

#include "gradsync/core/error.hpp"

namespace gradsync::transport::detail {

class shm_heap {
 public:
  static constexpr std::size_t alignment = 64;  ///< every block starts on a cache line

  explicit shm_heap(std::size_t bytes) : capacity_(bytes / alignment * alignment) {
    if (capacity_) free_[0] = capacity_;
  }

  std::size_t capacity() const { return capacity_; }
  std::size_t used() const {
    std::lock_guard lk(m_);
    return used_;
  }

  /// Offset of a new block of at least `bytes` (> 0) bytes; throws when none is free.
  std::size_t allocate(std::size_t bytes) {
    const std::size_t want = (bytes + alignment - 1) / alignment * alignment;
    std::lock_guard lk(m_);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < want) continue;
      const std::size_t off = it->first, left = it->second - want;
      free_.erase(it);
      if (left) free_[off + want] = left;
      used_blocks_[off] = want;
      used_ += want;
      return off;
    }
    throw error(errc::invalid_argument, {},
                "shm heap exhausted: " + std::to_string(bytes) + " bytes requested, " +
                    std::to_string(capacity_ - used_) + " of " + std::to_string(capacity_) +
                    " free (fragments included); raise shm_options::heap_bytes "
                    "(GRADSYNC_SHM_HEAP)");
  }

  /// Returns the block at `off` (from allocate) to the free list.
  void release(std::size_t off) {
    std::lock_guard lk(m_);
    const auto u = used_blocks_.find(off);
    if (u == used_blocks_.end()) return;  // not ours: ignore rather than corrupt the list
    std::size_t size = u->second;
    used_ -= size;
    used_blocks_.erase(u);
    auto next = free_.lower_bound(off);
    if (next != free_.end() && off + size == next->first) {
      size += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == off) {
        prev->second += size;
        return;
      }
    }
    free_[off] = size;
  }

 private:
  mutable std::mutex m_;
  std::size_t capacity_;
  std::size_t used_ = 0;
  std::map<std::size_t, std::size_t> free_;         // offset -> bytes
  std::map<std::size_t, std::size_t> used_blocks_;  // offset -> bytes
};

}  // namespace gradsync::transport::detail
