// SPDX-License-Identifier: Apache-2.0
// libtorch tensors as gradsync sees them: the element type a torch dtype maps to, and a
// tensor's storage as a span. torch's Half and BFloat16 have gradsync::half's and
// bfloat16's bits, so a span over them needs no conversion. Part of the libtorch
// integration (include/gradsync/torch/): only code that links libtorch includes it.
#pragma once

#include <ATen/core/Tensor.h>  // at::Tensor alone: torch/torch.h takes 5x as long to parse

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "gradsync/core/dtype.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/core/half.hpp"

namespace gradsync::torch {

static_assert(sizeof(c10::Half) == sizeof(gradsync::half) &&
                  sizeof(c10::BFloat16) == sizeof(gradsync::bfloat16),
              "gradsync::torch: torch's 16-bit floats must be 2 bytes, as gradsync's");

/// "float32", "bfloat16", ...: how errors name a torch dtype.
inline std::string dtype_text(c10::ScalarType s) {
  return c10::toString(s);
}

/// Calls `f.template operator()<T>()` with the gradsync element type of torch dtype `s`
/// (float, double, half, bfloat16, int32_t, int64_t; int8_t for every other 1-byte type);
/// returns false, calling nothing, for a dtype gradsync has no type for.
template <class F>
bool visit_element_type(c10::ScalarType s, F&& f) {
  switch (s) {
    case c10::kFloat:
      f.template operator()<float>();
      return true;
    case c10::kDouble:
      f.template operator()<double>();
      return true;
    case c10::kHalf:
      f.template operator()<half>();
      return true;
    case c10::kBFloat16:
      f.template operator()<bfloat16>();
      return true;
    case c10::kInt:
      f.template operator()<std::int32_t>();
      return true;
    case c10::kLong:
      f.template operator()<std::int64_t>();
      return true;
    case c10::kBool:
    case c10::kByte:
    case c10::kChar:
      f.template operator()<std::int8_t>();
      return true;
    default:
      return false;
  }
}

/// A contiguous CPU tensor's elements as a span of T (T must match its element size).
template <class T>
std::span<T> span_of(const at::Tensor& x) {
  return {static_cast<T*>(x.data_ptr()), static_cast<std::size_t>(x.numel())};
}

/// Throws invalid_argument naming tensor `name` unless `x` is a dense, contiguous CPU
/// tensor: gradsync's host transports read its storage directly.
inline void require_host_dense(const at::Tensor& x, const std::string& name) {
  auto fail = [&](const std::string& why) {
    throw error(errc::invalid_argument, error_site{}, "tensor '" + name + "' " + why);
  };
  if (!x.defined()) fail("is undefined");
  if (!x.device().is_cpu())
    fail("is on " + x.device().str() + "; gradsync's host transports take CPU tensors");
  if (x.is_sparse()) fail("is sparse; pass a dense tensor (.to_dense())");
  if (!x.is_contiguous()) fail("is not contiguous; pass x.contiguous()");
}

}  // namespace gradsync::torch
