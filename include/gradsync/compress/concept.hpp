// SPDX-License-Identifier: Apache-2.0
// What a compression policy is: which element type a tensor of each type travels as.
// The allreducer (detail/allreducer_batch.hpp) converts a bucket to that type before the
// collective and back after it; the policy itself is compile-time data.
#pragma once

#include <concepts>
#include <string_view>

#include "gradsync/core/dtype.hpp"

namespace gradsync::compress {

/// A compression policy: a name, and wire_t<T>, the element type a tensor of T is
/// reduced in (T itself where the policy leaves T alone).
template <class C>
concept compression_policy = requires {
  { C::name } -> std::convertible_to<std::string_view>;  // for logs and stats
  typename C::template wire_t<float>;                    // float's wire type
  requires is_element_type_v<typename C::template wire_t<float>>;
  requires is_element_type_v<typename C::template wire_t<double>>;
};

/// True when C sends tensors of T as another type.
template <class C, class T>
inline constexpr bool compresses_v = !std::same_as<typename C::template wire_t<T>, T>;

}  // namespace gradsync::compress
