// arena: one flat, cache-line aligned, zero-initialised buffer owned by gradsync. It is
// the home of the gradients in zero-copy mode and the staging area of packed buckets.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <span>

#include "gradsync/fusion/plan.hpp"

namespace gradsync::fusion {

class arena {
 public:
  arena() = default;
  /// Allocates `bytes` (rounded up to the bucket alignment), zeroed.
  explicit arena(std::size_t bytes) { resize(bytes); }

  void resize(std::size_t bytes) {
    const std::size_t want = (bytes + bucket_alignment - 1) / bucket_alignment * bucket_alignment;
    if (want == bytes_ && ptr_) return;
    ptr_.reset();
    bytes_ = 0;
    if (want == 0) return;
    void* p = std::aligned_alloc(bucket_alignment, want);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, want);
    ptr_.reset(static_cast<std::byte*>(p));
    bytes_ = want;
  }

  std::byte* data() { return ptr_.get(); }
  const std::byte* data() const { return ptr_.get(); }
  std::size_t size() const { return bytes_; }

  /// `count` elements of T starting `offset` bytes in.
  template <class T>
  std::span<T> view(std::size_t offset, std::size_t count) {
    return {reinterpret_cast<T*>(ptr_.get() + offset), count};
  }

 private:
  struct free_deleter {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, free_deleter> ptr_;
  std::size_t bytes_ = 0;
};

}  // namespace gradsync::fusion
