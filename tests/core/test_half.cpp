// SPDX-License-Identifier: Apache-2.0
// gradsync::half's conversions against an independent reference written with double
// arithmetic (frexp/ldexp/nearbyint): every half pattern, the rounding ties around every
// half, a strided sweep of the float patterns, and the vectorized host reduction over
// half against the element-by-element reference. (tests/cuda/test_device_body.cpp checks
// the same conversions against CUDA's own host conversions where CUDA is installed.)
#include <doctest/doctest.h>

#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ios>
#include <limits>
#include <random>
#include <vector>

#include <gradsync/core/half.hpp>
#include <gradsync/kernels/host.hpp>
#include <gradsync/testing/float_probes.hpp>

namespace gs = gradsync;

namespace {

// The bit casts of core/half.hpp (plain memcpy).
std::uint32_t bits_of(float f) {
  return gs::detail::float_bits(f);
}
float float_of(std::uint32_t u) {
  return gs::detail::bits_float(u);
}

// binary16 -> float by its definition: (-1)^s * m * 2^(e-25) (or the subnormal/special
// cases); NaN is CUDA's canonical 0x7fffffff.
float ref_to_float(std::uint16_t h) {
  const bool neg = (h & 0x8000u) != 0;
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  if (e == 31) {
    if (m) return float_of(0x7fffffffu);
    return neg ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  }
  const double v = e == 0 ? std::ldexp(static_cast<double>(m), -24)
                          : std::ldexp(static_cast<double>(m + 1024), e - 25);
  return static_cast<float>(neg ? -v : v);
}

// float -> binary16 rounding |f| to a multiple of its half spacing, ties to even.
std::uint16_t ref_to_half(float f) {
  if (std::isnan(f)) return 0x7fff;
  const std::uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7c00;  // 65520 = max half + half an ulp: ties to inf
  if (a < std::ldexp(1.0, -14)) {          // subnormal range: spacing 2^-24
    const double q = std::nearbyint(std::ldexp(a, 24));
    return static_cast<std::uint16_t>(sign |
                                      static_cast<std::uint16_t>(q));  // q = 1024: min normal
  }
  int e2 = 0;
  std::frexp(a, &e2);  // a = x * 2^e2, x in [0.5, 1): a in [2^(e2-1), 2^e2)
  const int E = e2 - 1;
  const double q = std::nearbyint(std::ldexp(a, 10 - E));  // in [1024, 2048]
  if (q == 2048.0) return static_cast<std::uint16_t>(sign | ((E + 16) << 10));
  return static_cast<std::uint16_t>(sign | ((E + 15) << 10) | (static_cast<int>(q) - 1024));
}

}  // namespace

TEST_CASE("half -> float is exact for all 65536 patterns") {
  REQUIRE(std::fegetround() == FE_TONEAREST);
  std::size_t bad = 0;
  for (std::uint32_t i = 0; i < 0x10000u; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    const float got = static_cast<float>(gs::half::from_bits(h));
    if (bits_of(got) != bits_of(ref_to_float(h)) && bad++ < 5) {
      MESSAGE("half " << std::hex << i << ": got " << bits_of(got) << ", want "
                      << bits_of(ref_to_float(h)));
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("float -> half rounds to nearest even: every half, its ties, a float sweep") {
  const std::vector<float> probe = gs::testing::rounding_probe_floats(997);
  std::size_t bad = 0;
  for (const float f : probe) {
    const std::uint16_t got = gs::half(f).bits, want = ref_to_half(f);
    if (got != want && bad++ < 5) {
      MESSAGE("float " << std::hex << bits_of(f) << ": got " << got << ", want " << want);
    }
  }
  CHECK(bad == 0);
  CHECK(probe.size() > 4000000);
}

TEST_CASE("host reduce_into over half equals the element-by-element reference") {
  std::mt19937 rng(2026);
  for (const std::size_t n : {0ul, 1ul, 31ul, 32ul, 33ul, 1000ul, 65536ul + 17}) {
    std::vector<gs::half> a(n), b(n), want(n);
    for (std::size_t i = 0; i < n; ++i) {
      // Any pattern, NaN, inf and subnormal included.
      a[i] = gs::half::from_bits(static_cast<std::uint16_t>(rng()));
      b[i] = gs::half::from_bits(static_cast<std::uint16_t>(rng()));
      want[i] = gs::half::from_bits(ref_to_half(ref_to_float(a[i].bits) + ref_to_float(b[i].bits)));
    }
    gs::kernels::reduce_into(a.data(), b.data(), n, gs::op::sum);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) bad += a[i].bits != want[i].bits;
    CHECK_MESSAGE(bad == 0, n << " elements");
  }
}
