// SPDX-License-Identifier: Apache-2.0
// Floats that probe every rounding boundary of float -> half / bfloat16: specials, the
// subnormal and overflow thresholds, every half value with the floats just below, at and
// just above the tie to its neighbour, a strided sweep of all 2^32 patterns and random
// patterns. Used by the conversion tests (tests/core/test_half.cpp against a reference
// in double arithmetic, tests/cuda/test_device_body.cpp against CUDA's conversions).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace gradsync::testing {

/// The probe set; `stride` thins the sweep of all 2^32 float patterns.
inline std::vector<float> rounding_probe_floats(std::uint64_t stride = 4093) {
  auto from_bits = [](std::uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  };
  auto to_bits = [](float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
  };
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          65504.0f,
                          65519.99f,
                          65520.0f,
                          -65520.0f,
                          5.9604645e-8f,
                          2.9802322e-8f,
                          2.9802326e-8f,
                          8.940697e-8f,
                          6.097555e-5f,
                          6.1035156e-5f,
                          3.3895314e38f,
                          3.4028235e38f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::quiet_NaN(),
                          -std::numeric_limits<float>::quiet_NaN(),
                          from_bits(0x7f800001u),
                          from_bits(0xffc12345u)};
  for (std::uint32_t h = 0; h < 0x7c00u; ++h) {  // every finite half >= 0, by definition
    const int e = static_cast<int>(h >> 10), m = static_cast<int>(h & 0x3ffu);
    const double val = e == 0 ? std::ldexp(m, -24) : std::ldexp(m + 1024, e - 25);
    for (const float s : {1.0f, -1.0f}) {
      const std::uint32_t x = to_bits(s * static_cast<float>(val));
      for (const std::uint32_t d : {0u, 0xfffu, 0x1000u, 0x1001u}) v.push_back(from_bits(x + d));
      if (x & 0x7fffffffu) v.push_back(from_bits(x - 1u));
    }
  }
  for (std::uint64_t x = 0; x < (std::uint64_t{1} << 32); x += stride) {
    v.push_back(from_bits(static_cast<std::uint32_t>(x)));
  }
  std::mt19937 rng(12345);
  for (int i = 0; i < 200000; ++i) v.push_back(from_bits(static_cast<std::uint32_t>(rng())));
  return v;
}

}  // namespace gradsync::testing
