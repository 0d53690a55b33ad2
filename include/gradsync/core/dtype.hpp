// SPDX-License-Identifier: Apache-2.0
// The element types gradsync reduces, and their run-time tags (for cross-rank checks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "gradsync/core/half.hpp"

namespace gradsync {

/// Run-time tag of an element type; travels in the cross-rank consistency header.
enum class dtype : std::uint8_t { f32 = 1, f64, f16, bf16, i32, i64, i8 };

/// "float32", "float64", "float16", "bfloat16", "int32", "int64" or "int8".
inline constexpr std::string_view dtype_name(dtype d) {
  switch (d) {
    // clang-format off
    case dtype::f32: return "float32";
    case dtype::f64: return "float64";
    case dtype::f16: return "float16";
    case dtype::bf16: return "bfloat16";
    case dtype::i32: return "int32";
    case dtype::i64: return "int64";
    case dtype::i8: return "int8";
      // clang-format on
  }
  return "unknown";
}

/// Bytes per element of d.
inline constexpr std::size_t dtype_size(dtype d) {
  switch (d) {
    // clang-format off
    case dtype::f32: case dtype::i32: return 4;
    case dtype::f64: case dtype::i64: return 8;
    case dtype::f16: case dtype::bf16: return 2;
    case dtype::i8: return 1;
      // clang-format on
  }
  return 0;
}

template <class T>
struct dtype_of;  // no definition: T is not an element type
// clang-format off
template <> struct dtype_of<float> : std::integral_constant<dtype, dtype::f32> {};
template <> struct dtype_of<double> : std::integral_constant<dtype, dtype::f64> {};
template <> struct dtype_of<half> : std::integral_constant<dtype, dtype::f16> {};
template <> struct dtype_of<bfloat16> : std::integral_constant<dtype, dtype::bf16> {};
template <> struct dtype_of<std::int32_t> : std::integral_constant<dtype, dtype::i32> {};
template <> struct dtype_of<std::int64_t> : std::integral_constant<dtype, dtype::i64> {};
template <> struct dtype_of<std::int8_t> : std::integral_constant<dtype, dtype::i8> {};
// clang-format on

/// True for the seven element types gradsync reduces.
template <class T>
inline constexpr bool is_element_type_v = requires {
  dtype_of<std::remove_cv_t<T>>::value;
};

/// An element type: float, double, half, bfloat16, int32_t, int64_t or int8_t.
template <class T>
concept element_type = is_element_type_v<T>;

/// A list of element types, for allreducer::commit(op, element_types<float>{}): only the
/// listed types are instantiated (each one costs the build every algorithm step again).
template <class... Ts>  ///< gradsync element types (float, double, half, ...), no repeats
struct element_types {
  static_assert(sizeof...(Ts) > 0 && (is_element_type_v<Ts> && ...),
                "gradsync::element_types<Ts...>: list one or more of float, double, "
                "gradsync::half, gradsync::bfloat16, int32_t, int64_t");
  /// Whether the list holds d.
  static constexpr bool holds(dtype d) { return ((dtype_of<Ts>::value == d) || ...); }
};

/// Floating-point element types (the ones `op::avg` accepts).
template <class T>
inline constexpr bool is_floating_element_v =
    std::is_floating_point_v<T> || std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;

/// Whether d is a floating-point type (float32, float64, float16, bfloat16).
inline constexpr bool is_floating_dtype(dtype d) {
  return d == dtype::f32 || d == dtype::f64 || d == dtype::f16 || d == dtype::bf16;
}

/// Checks an element type and explains how to fix it; called by every entry point.
template <class T>
constexpr void check_element_type() {
  static_assert(std::is_trivially_copyable_v<T>,
                "gradsync: the element type is not trivially copyable, so its bytes cannot be "
                "sent between ranks; use float, double, gradsync::half, gradsync::bfloat16, "
                "int32_t, int64_t or int8_t");
  static_assert(!std::is_trivially_copyable_v<T> || is_element_type_v<T>,
                "gradsync: unsupported element type; use float, double, gradsync::half, "
                "gradsync::bfloat16, int32_t, int64_t or int8_t");
}

/// Calls f(T{}) with the C++ type matching a run-time dtype (for benches and tools).
template <class F>
decltype(auto) visit_dtype(dtype d, F&& f) {
  switch (d) {
    // clang-format off
    case dtype::f64: return f(double{});
    case dtype::f16: return f(half{});
    case dtype::bf16: return f(bfloat16{});
    case dtype::i32: return f(std::int32_t{});
    case dtype::i64: return f(std::int64_t{});
    case dtype::i8: return f(std::int8_t{});
    case dtype::f32: break;
      // clang-format on
  }
  return f(float{});
}

}  // namespace gradsync
