// SPDX-License-Identifier: Apache-2.0
// Inputs on which the lossy codecs are exact whatever the bucket layout and rank count,
// so that the tests over every transport can compare with exact sums.
#pragma once

#include <cstddef>

namespace fusion_test {

/// compress::int8 with n ranks: every value is 0 or +-L/16 (L = 127 / n), so each block's
/// agreed scale is L/16 (or 0), every code is exactly +-L or 0, and the step L/16 / L =
/// 1/16 decodes the summed codes exactly.
inline float int8_exact_value(std::size_t r, std::size_t i, std::size_t n) {
  const float top = static_cast<float>(127 / n) / 16.0f;
  switch ((i * 7 + r * 3) % 3) {
    case 0:
      return 0.0f;
    case 1:
      return top;
    default:
      return -top;
  }
}

/// compress::topk<10> (1 %): at most one value in 200 of a tensor is non-zero, fewer than
/// a bucket keeps, so every non-zero value is sent (and ties among the zeros add zeros).
inline float sparse_value(std::size_t r, std::size_t i) {
  return (i + r) % 200 == 0 ? static_cast<float>(i % 23 + 1) : 0.0f;
}

}  // namespace fusion_test
