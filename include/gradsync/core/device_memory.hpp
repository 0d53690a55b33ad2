// SPDX-License-Identifier: Apache-2.0
// device_span<T>: device memory at compile time. A std::span is host memory and a
// gradsync::device_span is device memory; each transport states which one it moves
// (Tr::memory, transport/concept.hpp), and allreduce.hpp refuses a mix with a message
// naming the transport to use.
#pragma once

#include <cstddef>

namespace gradsync {

/// A contiguous range of T in device memory (cudaMalloc'd, or from a framework tensor).
/// T: the element type (float, double, half, bfloat16, int32_t, int64_t, int8_t).
template <class T>
class device_span {
 public:
  device_span() = default;
  device_span(T* data, std::size_t count) : data_(data), size_(count) {}
  T* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::size_t size_bytes() const { return size_ * sizeof(T); }
  bool empty() const { return size_ == 0; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace gradsync
