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

// float -> binary16, round to nearest even; overflow becomes inf; NaN becomes CUDA's
// canonical NaN 0x7fff (what __float2half_rn and cvt.rn.f16.f32 give).
GRADSYNC_HOST_DEVICE inline std::uint16_t float_to_half_bits(float f) {
  const std::uint32_t x = float_bits(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN
    return static_cast<std::uint16_t>(abs > 0x7f800000u ? 0x7fffu : (sign | 0x7c00u));
  }
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {  // subnormal half (or zero)
    if (abs < 0x33000000u) return static_cast<std::uint16_t>(sign);  // below half of min subnormal
    const std::uint32_t exp = abs >> 23;
    const std::uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - exp;  // 14 .. 24 (value = mant * 2^(exp-150))
    std::uint32_t h = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (h & 1u))) ++h;
    return static_cast<std::uint16_t>(sign | h);
  }
  std::uint32_t h = ((abs - 0x38000000u) >> 13);  // rebias exponent 127 -> 15
  const std::uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<std::uint16_t>(sign | h);
}

GRADSYNC_HOST_DEVICE inline float half_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) return bits_float(mant ? 0x7fffffffu : (sign | 0x7f800000u));  // CUDA's NaN
  if (exp == 0) {
    if (mant == 0) return bits_float(sign);
    int e = -1;  // normalise the subnormal
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    return bits_float(sign | static_cast<std::uint32_t>(127 - 15 - e) << 23 | ((mant & 0x3ffu) << 13));
  }
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

// float -> bfloat16, round to nearest even; NaN becomes CUDA's canonical NaN 0x7fff.
GRADSYNC_HOST_DEVICE inline std::uint16_t float_to_bf16_bits(float f) {
  const std::uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
  const std::uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>((x + rounding) >> 16);
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
