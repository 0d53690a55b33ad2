// SPDX-License-Identifier: Apache-2.0
// A compression policy that lives outside the library, in one file: double gradients
// travel as float (half the bytes), every other type as itself. test_compress.cpp plugs
// it into the allreducer, which only calls its codec.
#pragma once

#include <cstddef>
#include <string_view>
#include <type_traits>

#include <gradsync/core/op.hpp>

namespace compress_test {

struct double_as_float {
  static constexpr std::string_view name = "double_as_float";
  template <class T>
  using wire_t = std::conditional_t<std::is_same_v<T, double>, float, T>;

  template <class T, class Op>
  struct codec {
    using wire_type = float;
    using wire_op = std::conditional_t<Op::id == gradsync::reduce_op::avg, gradsync::op::sum_t, Op>;
    static void encode(float* wire, const double* x, std::size_t count, std::size_t ranks) {
      const double scale = Op::id == gradsync::reduce_op::avg ? 1.0 / double(ranks) : 1.0;
      for (std::size_t i = 0; i < count; ++i) wire[i] = static_cast<float>(x[i] * scale);
    }
    static void decode(double* x, const float* wire, std::size_t count) {
      for (std::size_t i = 0; i < count; ++i) x[i] = wire[i];
    }
  };
};

}  // namespace compress_test
