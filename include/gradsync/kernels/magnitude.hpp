// SPDX-License-Identifier: Apache-2.0
// |x| as an unsigned integer key: ordering keys orders magnitudes, and integer max and
// compare vectorise where float ones with NaN rules do not. Shared by int8's block
// scales and top-k's selection.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "gradsync/config.hpp"

namespace gradsync::kernels {

/// The key type of T (float: 32 bits, double: 64).
template <class T>
using magnitude_key_t = std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>;

/// The bits of x with the sign cleared: keys order as |x| does, and a NaN sorts above Inf.
template <class T>
GRADSYNC_HOST_DEVICE inline magnitude_key_t<T> magnitude_key(T v) {
  static_assert(std::is_floating_point_v<T>, "magnitude_key: float or double");
  magnitude_key_t<T> k;
  std::memcpy(&k, &v, sizeof k);
  return k & (~magnitude_key_t<T>{0} >> 1);
}

}  // namespace gradsync::kernels
