// SPDX-License-Identifier: Apache-2.0
// What a compression policy is: which element type a tensor of each type travels as,
// and for each type it changes, a codec that encodes a bucket before the collective and
// decodes it after. The allreducer (detail/allreducer_batch.hpp) calls the codec and
// runs the collective on the wire values; how a policy converts lives in its own file.
#pragma once

#include <concepts>
#include <cstddef>
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

/// C's codec for a bucket of T reduced with Op (compresses_v<C, T>): encode(wire, x,
/// count, ranks) before the collective, the collective on wire_type with wire_op,
/// decode(x, wire, count) after. Every rank decodes the same wire bits the same way.
template <class C, class T, class Op>
concept codec_for = requires(typename C::template codec<T, Op>::wire_type* w, const T* x, T* y,
                             std::size_t n) {
  typename C::template codec<T, Op>::wire_op;  // the op on the wire
  requires is_element_type_v<typename C::template codec<T, Op>::wire_type>;
  C::template codec<T, Op>::encode(w, x, n, n);  // x -> wire (ranks: n)
  C::template codec<T, Op>::decode(y, w, n);     // wire -> x
};

}  // namespace gradsync::compress
