// SPDX-License-Identifier: Apache-2.0
// A one-rank compress::channel for codec tests: allreduce leaves the data as it is,
// allgather copies this rank's block, scratch lives until the channel goes, and
// allreduce stays on run()'s thread.
#pragma once

#include <cstddef>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include <gradsync/compress/concept.hpp>

namespace fusion_test {

struct solo_channel {
  std::vector<std::vector<std::byte>> bufs;
  std::vector<gradsync::compress::tensor_part> parts;
  std::size_t ranks() const { return 1; }
  std::size_t rank() const { return 0; }
  template <class W, class Op>
  void allreduce(std::span<W>, Op) {}
  void allgather(std::span<const std::byte> mine, std::span<std::byte> all) {
    std::memcpy(all.data(), mine.data(), mine.size());
  }
  std::span<std::byte> scratch(std::size_t n) {
    bufs.emplace_back(n);
    return bufs.back();
  }
  template <class F>
  void timed(std::string_view, F&& f) {
    f();
  }
  std::span<const gradsync::compress::tensor_part> tensors() const { return parts; }
  bool overlaps_wire() const { return false; }
};
static_assert(gradsync::compress::channel<solo_channel>);

}  // namespace fusion_test
