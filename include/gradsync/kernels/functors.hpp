// SPDX-License-Identifier: Apache-2.0
// Elementwise math shared by host loops and CUDA kernels. Each functor is
// GRADSYNC_HOST_DEVICE so the CPU tests check the very arithmetic the GPU runs.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "gradsync/config.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/half.hpp"
#include "gradsync/core/op.hpp"

namespace gradsync::kernels {

/// The type arithmetic happens in: float for the 16-bit types, T otherwise.
template <class T>
using compute_t =
    std::conditional_t<std::is_same_v<T, half> || std::is_same_v<T, bfloat16>, float, T>;

template <class T>
GRADSYNC_HOST_DEVICE inline compute_t<T> load(T v) {
  return static_cast<compute_t<T>>(v);
}
template <class T>
GRADSYNC_HOST_DEVICE inline T store(compute_t<T> v) {
  return static_cast<T>(v);
}

#if defined(__CUDACC__)
// On the GPU the 16-bit conversions are single cvt instructions with exactly the IEEE
// round-to-nearest-even and canonical-NaN behaviour of the host code in core/half.hpp
// (bitwise equal: checked on the CPU against CUDA's own host conversions and on a GPU by
// tests/cuda/test_device_kernels.cu). Same math, one instruction instead of ~20.
template <>
GRADSYNC_HOST_DEVICE inline float load<half>(half v) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
  return f;
#else
  return static_cast<float>(v);
#endif
}
template <>
GRADSYNC_HOST_DEVICE inline half store<half>(float v) {
#if defined(__CUDA_ARCH__)
  unsigned short b;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(b) : "f"(v));
  return half::from_bits(b);
#else
  return half(v);
#endif
}
template <>
GRADSYNC_HOST_DEVICE inline bfloat16 store<bfloat16>(float v) {
#if defined(__CUDA_ARCH__)
  unsigned short b;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(v));
  return bfloat16::from_bits(b);
#else
  return bfloat16(v);
#endif
}
#endif

/// r, or the canonical NaN (every exponent and mantissa bit set, sign clear: the pattern
/// core/half.hpp's conversions give) when r is a NaN. Which input's payload x + y keeps
/// when both are NaN depends on the operand order the compiler picked, which differs
/// between the SSE2 and AVX2 builds of a loop (kernels/host.hpp) and between host and
/// device; one canonical pattern keeps every rank's bits equal.
template <class C>
GRADSYNC_HOST_DEVICE inline C canonical_nan_if(C r) {
  if constexpr (std::is_same_v<C, float>) {
    return r == r ? r : gradsync::detail::bits_float(0x7fffffffu);
  } else if constexpr (std::is_same_v<C, double>) {
    const std::uint64_t nan = 0x7fffffffffffffffull;
    double d;
    std::memcpy(&d, &nan, sizeof d);
    return r == r ? r : d;
  } else {
    return r;
  }
}

/// canonical_nan_if for float and double; the 16-bit types' store already gives the
/// canonical NaN, and a second test would keep their loops from vectorizing.
template <class T>
GRADSYNC_HOST_DEVICE inline compute_t<T> canonical(compute_t<T> r) {
  if constexpr (std::is_same_v<T, compute_t<T>>) {
    return canonical_nan_if(r);
  } else {
    return r;
  }
}

/// x + y; for integers modulo 2^bits (two's complement wrap-around, what NCCL and MPI
/// give in practice), computed in the unsigned type because signed overflow is undefined
/// behaviour (the optimizer may assume it never happens).
template <class C>
GRADSYNC_HOST_DEVICE inline C add_wrapping(C x, C y) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::common_type_t<std::make_unsigned_t<C>, unsigned>;  // no promotion to int
    return static_cast<C>(static_cast<U>(x) + static_cast<U>(y));
  } else {
    return x + y;
  }
}

/// x * y; for integers modulo 2^bits, like add_wrapping.
template <class C>
GRADSYNC_HOST_DEVICE inline C mul_wrapping(C x, C y) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::common_type_t<std::make_unsigned_t<C>, unsigned>;  // no promotion to int
    return static_cast<C>(static_cast<U>(x) * static_cast<U>(y));
  } else {
    return x * y;
  }
}

/// Combines two values of T under Op (avg combines as a sum; see finalize_fn). Sums and
/// products that are NaN come out as the canonical NaN (canonical_nan_if); integer sums
/// and products wrap modulo 2^bits (add_wrapping).
template <class T, class Op>
struct combine_fn {
  GRADSYNC_HOST_DEVICE T operator()(T a, T b) const {
    const compute_t<T> x = load(a), y = load(b);
    if constexpr (Op::id == reduce_op::prod) {
      return store<T>(canonical<T>(mul_wrapping(x, y)));
    } else if constexpr (Op::id == reduce_op::min) {
      return store<T>(y < x ? y : x);
    } else if constexpr (Op::id == reduce_op::max) {
      return store<T>(x < y ? y : x);
    } else {
      return store<T>(canonical<T>(add_wrapping(x, y)));
    }
  }
};

/// Turns a fully combined value into the op's result (divides by n for avg).
template <class T, class Op>
struct finalize_fn {
  compute_t<T> n;
  GRADSYNC_HOST_DEVICE T operator()(T a) const {
    if constexpr (Op::id == reduce_op::avg) {
      return store<T>(load(a) / n);
    } else {
      return a;
    }
  }
};

/// Scales a value by a factor (used by compression and by trainers). Floating-point
/// element types only: an integer times a float factor, converted back, is undefined
/// behaviour whenever the product leaves the integer's range.
template <class T>
struct scale_fn {
  static_assert(is_floating_element_v<T>,
                "gradsync::kernels::scale: the element type must be float, double, half or "
                "bfloat16; scale integer tensors with your own integer arithmetic");
  float factor;
  GRADSYNC_HOST_DEVICE T operator()(T a) const {
    return store<T>(static_cast<compute_t<T>>(load(a) * factor));
  }
};

/// Converts between element types through the compute type (float <-> half/bfloat16).
template <class From, class To>
struct cast_fn {
  static_assert(is_floating_element_v<To>,
                "gradsync::kernels::cast: the destination type must be float, double, half or "
                "bfloat16 (a float converted to an integer type it does not fit is undefined "
                "behaviour)");
  GRADSYNC_HOST_DEVICE To operator()(From a) const {
    return store<To>(static_cast<compute_t<To>>(static_cast<float>(load(a))));
  }
};

/// True when finalize_fn does something for this op.
template <class Op>
inline constexpr bool needs_finalize_v = Op::id == reduce_op::avg;

}  // namespace gradsync::kernels
