// SPDX-License-Identifier: Apache-2.0
// tensor_ref: a type-erased view of one gradient tensor (pointer, count, element type),
// the currency of registration and grouped calls.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <type_traits>

#include "gradsync/core/dtype.hpp"

namespace gradsync {

/// One tensor the caller hands to gradsync: where it is, how many elements, which type.
struct tensor_ref {
  void* data = nullptr;
  std::size_t count = 0;
  dtype type = dtype::f32;

  tensor_ref() = default;
  /// From a span of writable elements (float, double, half, bfloat16, int32_t, int64_t, int8_t).
  template <class T>
  requires(!std::is_const_v<T> && is_element_type_v<T>)
      tensor_ref(std::span<T> s)  // NOLINT: implicit on purpose, so lists of spans convert
      : data(s.data()), count(s.size()), type(dtype_of<T>::value) {}
  tensor_ref(void* p, std::size_t n, dtype t) : data(p), count(n), type(t) {}

  std::size_t bytes() const { return count * dtype_size(type); }
};

/// A registered tensor's shape as a row-major matrix (rows x cols == its count), for
/// compression that works on matrices (compress::powersgd); {0, 0}: no shape.
struct matrix_shape {
  std::size_t rows = 0;
  std::size_t cols = 0;
};

}  // namespace gradsync

namespace gradsync::fusion {

/// What the plan needs to know about a registered tensor (its data pointer excluded:
/// the plan must be the same on every rank).
struct tensor_desc {
  std::size_t count = 0;
  dtype type = dtype::f32;
  std::string name;      // optional; used in logs and mismatch errors
  matrix_shape shape{};  // optional; rows * cols == count when set

  std::size_t bytes() const { return count * dtype_size(type); }
};

}  // namespace gradsync::fusion
