// SPDX-License-Identifier: Apache-2.0
// arena: one flat, cache-line aligned, zero-initialised buffer owned by gradsync. It is
// the home of the gradients in zero-copy mode and the staging area of packed buckets.
// Its memory is private, or adopted from the transport (allreducer/arena_placement.hpp puts
// it in transport::shm's heap, where peers read buckets in place).
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

  /// Rounds `bytes` up to the bucket alignment (what resize and adopt hold).
  static std::size_t rounded(std::size_t bytes) {
    return (bytes + bucket_alignment - 1) / bucket_alignment * bucket_alignment;
  }

  /// Holds `bytes` of private memory (rounded up), zeroed; keeps the current memory if
  /// it already has exactly that size.
  void resize(std::size_t bytes) {
    const std::size_t want = rounded(bytes);
    if (want == bytes_ && mem_) return;
    mem_.reset();
    bytes_ = 0;
    if (want == 0) return;
    void* p = std::aligned_alloc(bucket_alignment, want);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, want);
    mem_ =
        std::shared_ptr<std::byte>(static_cast<std::byte*>(p), [](std::byte* q) { std::free(q); });
    bytes_ = want;
  }

  /// Holds `bytes` at `p` instead (zeroed here), kept alive by `owner`: memory some
  /// transport handed out, such as a registered shm buffer (transport::shm::allocate).
  /// `p` must be aligned to bucket_alignment and `bytes` a multiple of it.
  void adopt(std::byte* p, std::size_t bytes, std::shared_ptr<void> owner) {
    std::memset(p, 0, bytes);
    mem_ = std::shared_ptr<std::byte>(std::move(owner), p);
    bytes_ = bytes;
  }

  std::byte* data() { return mem_.get(); }
  const std::byte* data() const { return mem_.get(); }
  std::size_t size() const { return bytes_; }

  /// `count` elements of T starting `offset` bytes in.
  template <class T>
  std::span<T> view(std::size_t offset, std::size_t count) {
    return {reinterpret_cast<T*>(mem_.get() + offset), count};
  }

 private:
  std::shared_ptr<std::byte> mem_;
  std::size_t bytes_ = 0;
};

}  // namespace gradsync::fusion
