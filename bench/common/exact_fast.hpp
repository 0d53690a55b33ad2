// SPDX-License-Identifier: Apache-2.0
// Fast versions of testing::fill_inputs / count_wrong for large benchmark buffers.
// exact_inputs.hpp's values depend on the element index only through i mod 7, 3, 5, 97,
// 4 and 11, so they repeat with period 7*3*5*97*4*11 = 448140: one period is computed
// with the testing functions themselves, then copied (fill) or compared with memcmp
// (check) at memory speed. Blocks that differ are counted element by element.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <vector>

#include "gradsync/core/op.hpp"
#include "gradsync/testing/exact_inputs.hpp"

namespace gradsync::bench {

/// Period of testing::input_value and testing::expected_value in the element index.
inline constexpr std::size_t exact_period = 7 * 3 * 5 * 97 * 4 * 11;

/// One period of rank `rank`'s inputs and of the expected result, for (T, op, n).
template <class T>
class exact_pattern {
 public:
  exact_pattern(reduce_op o, std::size_t rank, std::size_t n)
      : input_(exact_period), expected_(exact_period), op_(o), n_(n) {
    testing::fill_inputs(std::span<T>(input_), o, rank, n);
    for (std::size_t i = 0; i < exact_period; ++i) {
      expected_[i] = testing::from_double<T>(testing::expected_value(o, n, i));
    }
  }

  /// data[i] = rank's input at global index i.
  void fill(std::span<T> data) const {
    for (std::size_t off = 0; off < data.size(); off += exact_period) {
      const std::size_t len = std::min(exact_period, data.size() - off);
      std::memcpy(data.data() + off, input_.data(), len * sizeof(T));
    }
  }

  /// Elements of data whose bits differ from the exact result.
  std::size_t count_wrong(std::span<const T> data) const {
    std::size_t wrong = 0;
    for (std::size_t off = 0; off < data.size(); off += exact_period) {
      const std::size_t len = std::min(exact_period, data.size() - off);
      if (std::memcmp(data.data() + off, expected_.data(), len * sizeof(T)) == 0) continue;
      wrong += testing::count_wrong<T>(data.subspan(off, len), op_, n_, off);
    }
    return wrong;
  }

 private:
  std::vector<T> input_, expected_;
  reduce_op op_;
  std::size_t n_;
};

}  // namespace gradsync::bench
