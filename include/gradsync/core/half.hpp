// SPDX-License-Identifier: Apache-2.0
// Host-side IEEE binary16 and bfloat16 storage types, bit-compatible with CUDA's
// __half and __nv_bfloat16 (2 bytes, same bit layout), usable without CUDA.
#pragma once

#include <cstdint>
#include <cstring>

#include "gradsync/config.hpp"

namespace gradsync {

namespace detail {
GRADSYNC_HOST_DEVICE inline std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
GRADSYNC_HOST_DEVICE inline float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Branch-free conversions: every path is computed and the result picked with masks, so
// the host loops over half (kernels/host.hpp) vectorize. Bit-exact with the IEEE
// round-to-nearest-even conversions (checked against CUDA's host conversions by
// tests/cuda/test_device_body.cpp and by tests/core/test_half.cpp; equal to the
// previous branchy code on all 2^32 floats and all 65536 halves).

/// a where c, else b (no branch).
GRADSYNC_HOST_DEVICE inline std::uint32_t select_bits(bool c, std::uint32_t a, std::uint32_t b) {
  const std::uint32_t m = 0u - static_cast<std::uint32_t>(c);
  return (a & m) | (b & ~m);
}

// float -> binary16, round to nearest even; overflow becomes inf; NaN becomes CUDA's
// canonical NaN 0x7fff (what __float2half_rn and cvt.rn.f16.f32 give).
//  - normal halves: rebias the exponent and round the 13 dropped bits to nearest even
//    (adding 0xfff plus the kept lsb carries into the exponent exactly when needed);
//  - subnormal halves (|f| < 2^-14): adding 0.5f makes the FPU round |f| to a multiple of
//    2^-24 (the half subnormal step), nearest even; the low bits are then the half's.
//    Flush-to-zero modes do not change it: a float subnormal rounds to half 0 anyway.
GRADSYNC_HOST_DEVICE inline std::uint16_t float_to_half_bits(float f) {
  const std::uint32_t x = float_bits(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t abs = x & 0x7fffffffu;
  const std::uint32_t normal = (abs - 0x38000000u + 0xfffu + ((abs >> 13) & 1u)) >> 13;
  const std::uint32_t subnormal = float_bits(bits_float(abs) + 0.5f) - 0x3f000000u;
  std::uint32_t h = select_bits(abs < 0x38800000u, subnormal, normal);
  h = select_bits(abs >= 0x477ff000u, 0x7c00u, h) | sign;  // rounds to inf (or is inf)
  return static_cast<std::uint16_t>(select_bits(abs > 0x7f800000u, 0x7fffu, h));
}

// binary16 -> float, exact; NaN becomes CUDA's canonical NaN 0x7fffffff. A subnormal
// half m * 2^-24 is (2^-14 + m * 2^-24) - 2^-14, computed exactly in float.
GRADSYNC_HOST_DEVICE inline float half_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t em = h & 0x7fffu;  // exponent and mantissa
  const std::uint32_t normal = (em << 13) + 0x38000000u;
  const std::uint32_t subnormal =
      float_bits(bits_float((em << 13) + 0x38800000u) - bits_float(0x38800000u));
  const std::uint32_t special = select_bits(em > 0x7c00u, 0x7fffffffu, sign | 0x7f800000u);
  return bits_float(
      select_bits(em >= 0x7c00u, special, select_bits(em < 0x400u, subnormal, normal) | sign));
}

// float -> bfloat16, round to nearest even; NaN becomes CUDA's canonical NaN 0x7fff.
GRADSYNC_HOST_DEVICE inline std::uint16_t float_to_bf16_bits(float f) {
  const std::uint32_t x = float_bits(f);
  const std::uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>(
      select_bits((x & 0x7fffffffu) > 0x7f800000u, 0x7fffu, (x + rounding) >> 16));
}
GRADSYNC_HOST_DEVICE inline float bf16_bits_to_float(std::uint16_t b) {
  return bits_float(static_cast<std::uint32_t>(b) << 16);
}
}  // namespace detail

/// IEEE 754 binary16 value; layout-identical to CUDA's __half.
struct alignas(2) half {
  std::uint16_t bits = 0;
  half() = default;
  GRADSYNC_HOST_DEVICE explicit half(float f) : bits(detail::float_to_half_bits(f)) {}
  GRADSYNC_HOST_DEVICE explicit operator float() const { return detail::half_bits_to_float(bits); }
  GRADSYNC_HOST_DEVICE static half from_bits(std::uint16_t b) {
    half h;
    h.bits = b;
    return h;
  }
  friend GRADSYNC_HOST_DEVICE bool operator==(half a, half b) { return a.bits == b.bits; }
};

/// bfloat16 value (8-bit exponent, 7-bit mantissa); layout-identical to __nv_bfloat16.
struct alignas(2) bfloat16 {
  std::uint16_t bits = 0;
  bfloat16() = default;
  GRADSYNC_HOST_DEVICE explicit bfloat16(float f) : bits(detail::float_to_bf16_bits(f)) {}
  GRADSYNC_HOST_DEVICE explicit operator float() const { return detail::bf16_bits_to_float(bits); }
  GRADSYNC_HOST_DEVICE static bfloat16 from_bits(std::uint16_t b) {
    bfloat16 h;
    h.bits = b;
    return h;
  }
  friend GRADSYNC_HOST_DEVICE bool operator==(bfloat16 a, bfloat16 b) { return a.bits == b.bits; }
};

static_assert(sizeof(half) == 2 && alignof(half) == 2, "half must match __half's layout");
static_assert(sizeof(bfloat16) == 2 && alignof(bfloat16) == 2,
              "bfloat16 must match __nv_bfloat16's layout");

}  // namespace gradsync
