// SPDX-License-Identifier: Apache-2.0
// Persistent scratch memory owned by a transport: algorithms ask for a slot of at
// least N bytes and get the same buffer back on the next call (grown, never shrunk),
// so no collective allocates per call once warmed up.
#pragma once

#include <array>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>

#include "gradsync/core/error.hpp"

namespace gradsync {

class workspace {
 public:
  static constexpr std::size_t slots = 8;       ///< independent buffers per transport
  static constexpr std::size_t alignment = 64;  ///< cache line; enough for any vector load

  /// A buffer of at least `bytes` bytes for slot `slot`, reused across calls.
  void* get(std::size_t slot, std::size_t bytes) {
    if (slot >= slots) {
      throw error(errc::invalid_argument, {},
                  "workspace slot " + std::to_string(slot) + " out of range (max " +
                      std::to_string(slots - 1) + ")");
    }
    auto& b = bufs_[slot];
    if (b.bytes < bytes) {
      const std::size_t want = (bytes + alignment - 1) / alignment * alignment;
      void* p = std::aligned_alloc(alignment, want);
      if (!p) throw std::bad_alloc();
      b.ptr.reset(static_cast<std::byte*>(p));
      b.bytes = want;
    }
    return b.ptr.get();
  }

  /// Bytes currently held across all slots (for statistics and tests).
  std::size_t held_bytes() const {
    std::size_t s = 0;
    for (const auto& b : bufs_) s += b.bytes;
    return s;
  }

 private:
  struct free_deleter {
    void operator()(std::byte* p) const { std::free(p); }
  };
  struct buffer {
    std::unique_ptr<std::byte, free_deleter> ptr;
    std::size_t bytes = 0;
  };
  std::array<buffer, slots> bufs_{};
};

}  // namespace gradsync
