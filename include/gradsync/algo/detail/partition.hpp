// SPDX-License-Identifier: Apache-2.0
// Balanced splitting of a vector into parts (ring chunks, segments, tree halves).
#pragma once

#include <cstddef>

namespace gradsync::algo::detail {

struct range {
  std::size_t offset = 0;
  std::size_t count = 0;
};

/// Part i of `count` elements split into `parts` near-equal parts (the first
/// count % parts parts get one element more). Identical on every rank.
inline range part(std::size_t count, std::size_t parts, std::size_t i) {
  const std::size_t base = count / parts, extra = count % parts;
  return {i * base + (i < extra ? i : extra), base + (i < extra ? 1 : 0)};
}

/// Number of segments of at most `seg` elements covering `count` elements.
inline std::size_t segments(std::size_t count, std::size_t seg) {
  return (count + seg - 1) / seg;
}

}  // namespace gradsync::algo::detail
