// SPDX-License-Identifier: Apache-2.0
// Persistent scratch memory owned by a transport: an algorithm asks for its buffer of at
// least N bytes and gets the same buffer back on the next call (grown, never shrunk), so
// no collective allocates per call once warmed up. Buffers are keyed by a type (the
// algorithm, or a tag of its own), not numbered: two users cannot pick the same one.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

namespace gradsync {

class workspace {
 public:
  static constexpr std::size_t alignment = 64;  ///< cache line; enough for any vector load

  /// The buffer of user Key (any type: an algorithm, or a tag naming one of its buffers),
  /// of at least `bytes` bytes, reused across calls. Users that are never active in the
  /// same call may share a key to share the memory.
  template <class Key>  ///< whose buffer: each distinct type gets its own
  void* get(std::size_t bytes) {
    return get(&key_of<Key>, bytes);
  }

  /// Bytes currently held across all buffers (for statistics and tests).
  std::size_t held_bytes() const {
    std::size_t s = 0;
    for (const auto& b : bufs_) s += b.bytes;
    return s;
  }

 private:
  // Its address names Key (a few keys per transport: a linear search is cheapest).
  template <class Key>
  static constexpr char key_of = 0;

  void* get(const void* key, std::size_t bytes) {
    buffer* b = nullptr;
    for (auto& x : bufs_)
      if (x.key == key) b = &x;
    if (!b) b = &bufs_.emplace_back(buffer{key, nullptr, 0});
    if (b->bytes < bytes) {
      const std::size_t want = (bytes + alignment - 1) / alignment * alignment;
      void* p = std::aligned_alloc(alignment, want);
      if (!p) throw std::bad_alloc();
      b->ptr.reset(static_cast<std::byte*>(p));
      b->bytes = want;
    }
    return b->ptr.get();
  }

  struct free_deleter {
    void operator()(std::byte* p) const { std::free(p); }
  };
  struct buffer {
    const void* key = nullptr;
    std::unique_ptr<std::byte, free_deleter> ptr;
    std::size_t bytes = 0;
  };
  std::vector<buffer> bufs_;
};

}  // namespace gradsync
