// SPDX-License-Identifier: Apache-2.0
// Huge-page staging for transport::mpi's large sends. On one host both Open MPI (vader)
// and MPICH (UCX) move a large message with one copy that the receiver makes through
// the kernel (process_vm_readv, "CMA"), and the kernel pins the sender's pages for it
// one page at a time. From ordinary 4 KiB pages that pinning costs more than the copy
// (2 MiB: ~130 us against ~35 us for memcpy on the 2-core CI VM, kernel 6.18); from a
// transparent huge page it is one step per 2 MiB and the read runs at memcpy speed. So
// a send of [min_bytes, page] bytes is first copied into a block of huge-page memory
// this pool keeps, and MPI sends from there: one memcpy by the sender buys a 3-4x
// faster read by the receiver (docs/performance.md has the measurements).
//
// Slabs are 2 MiB-aligned mappings of one huge page each, advised MADV_HUGEPAGE and
// carved into blocks of one power-of-two size class. Blocks are reused; slabs are kept
// until the pool is destroyed, up to `limit_bytes` in all (beyond that a send goes
// from the caller's memory, as without the pool). Where the kernel has transparent
// huge pages off ("never"), or off Linux, the pool stays empty and sends are unstaged.
// A slab holding a block given up while MPI could still read it (abandon(): a send
// freed unfinished after a timeout or abort) is never unmapped, not even by the
// destructor: MPI completes such a send in the background, and reading an unmapped page
// would crash it. The pool logs what it leaves mapped.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "gradsync/core/log.hpp"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace gradsync::transport::detail {

/// Whether the kernel hands out transparent huge pages for memory advised
/// MADV_HUGEPAGE (its setting is "always" or "madvise", not "never").
inline bool thp_available() {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string s;
  if (!std::getline(f, s)) return false;
  return s.find("[never]") == std::string::npos;
#else
  return false;
#endif
}

class mpi_stage_pool {
 public:
  /// One transparent huge page on x86-64 and (4 KiB-page) arm64: the slab size and the
  /// largest send staged.
  static constexpr std::size_t page = std::size_t{2} << 20;
  /// The smallest block (size class 0); classes double up to `page`.
  static constexpr std::size_t min_block = std::size_t{16} << 10;
  static constexpr std::size_t classes = 8;  // 16 KiB .. 2 MiB
  static_assert(min_block << (classes - 1) == page);

  /// A block handed out by acquire(); `ptr == nullptr` when none was.
  struct block {
    std::byte* ptr = nullptr;
    std::size_t cls = 0;
  };

  /// A pool of at most `limit_bytes` of slabs; `enabled` false (or a zero limit) makes
  /// every acquire() come back empty. `rank` names the owner in the log.
  mpi_stage_pool(std::size_t limit_bytes, bool enabled, std::size_t rank = 0)
      : limit_slabs_(enabled ? limit_bytes / page : 0), rank_(rank) {}
  mpi_stage_pool(const mpi_stage_pool&) = delete;
  mpi_stage_pool& operator=(const mpi_stage_pool&) = delete;
  /// Unmaps every slab but those with abandoned blocks, which stay mapped for good.
  ~mpi_stage_pool() {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < slabs_.size(); ++i) {
      if (held_[i] == 0) {
        unmap(slabs_[i]);
      } else {
        ++kept;
      }
    }
    if (kept) {
      log(log_level::warn, rank_,
          "transport::mpi: leaving %zu staging slab(s) of %zu bytes mapped: they hold %zu "
          "send block(s) given up unfinished (a timeout or abort) that MPI may still read, "
          "and %zu not released",
          kept, page, abandoned_, in_use_);
    }
  }

  /// A block of at least `bytes` (<= page) bytes, or an empty one when the pool is
  /// full or disabled.
  block acquire(std::size_t bytes) {
    if (bytes == 0 || bytes > page) return {};
    std::size_t cls = 0;
    while ((min_block << cls) < bytes) ++cls;
    std::lock_guard lk(m_);
    auto& list = free_[cls];
    if (list.empty() && !grow(cls)) return {};
    block b{list.back(), cls};
    list.pop_back();
    ++in_use_;
    ++held_[slab_of(b.ptr)];
    return b;
  }

  /// Returns a block from acquire() for reuse.
  void release(block b) {
    if (!b.ptr) return;
    std::lock_guard lk(m_);
    free_[b.cls].push_back(b.ptr);
    --in_use_;
    --held_[slab_of(b.ptr)];
  }

  /// Gives up a block MPI may still read (a send freed before it completed): it is
  /// never handed out again, and its slab is never unmapped (it stays held).
  void abandon(block b) {
    if (!b.ptr) return;
    std::lock_guard lk(m_);
    --in_use_;
    ++abandoned_;
  }

  /// Slabs mapped so far (each `page` bytes).
  std::size_t slabs() const {
    std::lock_guard lk(m_);
    return slabs_.size();
  }
  /// Blocks handed out and not yet released or abandoned.
  std::size_t in_use() const {
    std::lock_guard lk(m_);
    return in_use_;
  }
  /// Blocks abandoned so far.
  std::size_t abandoned() const {
    std::lock_guard lk(m_);
    return abandoned_;
  }
  /// Whether acquire() can ever hand out a block.
  bool enabled() const {
    std::lock_guard lk(m_);
    return limit_slabs_ > 0;
  }

 private:
  // Maps one more slab and carves it into blocks of class `cls` (lock held).
  bool grow(std::size_t cls) {
    if (slabs_.size() >= limit_slabs_) return false;
    std::byte* s = map_slab();
    if (!s) {
      limit_slabs_ = slabs_.size();  // the kernel said no: stop asking
      return false;
    }
    slabs_.push_back(s);
    held_.push_back(0);
    const std::size_t bytes = min_block << cls;
    for (std::size_t off = page; off >= bytes; off -= bytes) free_[cls].push_back(s + off - bytes);
    return true;
  }

  // The index of the slab `p` lies in (lock held; a handful of slabs).
  std::size_t slab_of(const std::byte* p) const {
    std::size_t i = 0;
    while (i + 1 < slabs_.size() && !(p >= slabs_[i] && p < slabs_[i] + page)) ++i;
    return i;
  }

  // A page-sized mapping aligned to `page` (so the kernel can back it by one huge page).
  static std::byte* map_slab() {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    void* p = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    auto* raw = static_cast<std::byte*>(p);
    const auto addr = reinterpret_cast<std::uintptr_t>(raw);
    const std::size_t lead = (page - addr % page) % page;
    if (lead) munmap(raw, lead);
    if (page - lead) munmap(raw + lead + page, page - lead);
    std::byte* s = raw + lead;
    madvise(s, page, MADV_HUGEPAGE);
    return s;
#else
    return nullptr;
#endif
  }
  static void unmap(std::byte* s) {
#if defined(__linux__)
    munmap(s, page);
#else
    (void)s;
#endif
  }

  mutable std::mutex m_;
  std::size_t limit_slabs_;
  std::size_t rank_;
  std::vector<std::byte*> slabs_;
  std::vector<std::size_t> held_;  // per slab: blocks handed out and not released
  std::array<std::vector<std::byte*>, classes> free_{};
  std::size_t in_use_ = 0, abandoned_ = 0;
};

}  // namespace gradsync::transport::detail
