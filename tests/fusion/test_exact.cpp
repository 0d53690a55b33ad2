// SPDX-License-Identifier: Apache-2.0
// compress::exact (reproducible sums): its codes against an exact reference (a value
// alone in its block comes back bitwise; a sum whose block spans at most 2^27 is the
// correctly rounded exact sum; double's two lanes; rounding to odd before the last
// rounding; denormals, zeros, the block maximum, MaxRanks summands of the largest value),
// and through the allreducer on the local transport: the same bits for every algorithm,
// bucket size, fusion mode, grouped call, rank placement and two-level shape; IEEE
// semantics for NaN and Inf per element; min and max untouched; the wire bytes counted.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <gradsync/compress/exact.hpp>
#include <gradsync/compress/exact_accumulator.hpp>
#include <gradsync/gradsync.hpp>

#include "fusion_helpers.hpp"
#include "solo_channel.hpp"
#include "two_level_ranks.hpp"
#include "watchdog.hpp"

namespace gs = gradsync;
namespace gx = gradsync::kernels::exact;
using local = gs::transport::local;
using gx::i128;

namespace {

std::uint64_t mix(std::uint64_t z) {
  z ^= z >> 31;
  z *= 0x94d049bb133111ebull;
  z ^= z >> 29;
  z *= 0xbf58476d1ce4e5b9ull;
  return z ^ (z >> 32);
}

// Contribution c's value of element i of tensor k: a random 24-bit significand and sign
// at an exponent in [base - spread, base], base fixed per tensor (so a block of one
// tensor spans at most 2^spread, a bucket of several more).
float contribution(std::size_t c, std::size_t k, std::size_t i, int spread) {
  const std::uint64_t z =
      mix(c * 0x9e3779b97f4a7c15ull + i * 0x632be59bd9b4e019ull + k * 0x8cb92ba72f3d8dd7ull + 17);
  const int base = static_cast<int>(mix(k + 99) % 40) - 20;
  const int e = base - static_cast<int>((z >> 8) % static_cast<std::uint64_t>(spread + 1));
  const float m = static_cast<float>((z >> 40) | (1u << 23)) / float(1u << 23);  // [1, 2)
  return std::ldexp((z & 1) ? -m : m, e);
}

// F * 2^e for a finite float, F an integer.
struct fe {
  std::int64_t F;
  int e;
};
fe split(float f) {
  int e = 0;
  const float m = std::frexp(f, &e);
  return {static_cast<std::int64_t>(std::ldexp(m, 24)), e - 24};
}

// |num * 2^k / den - f| compared for two candidates, exactly (num below 2^55).
int closer(i128 num, int k, std::int64_t den, float a, float b) {
  const fe x = split(a), y = split(b);
  const int m = std::min({k, x.e, y.e});
  const i128 v = num << (k - m);
  const i128 da = v - static_cast<i128>(x.F) * den * (i128(1) << (x.e - m));
  const i128 db = v - static_cast<i128>(y.F) * den * (i128(1) << (y.e - m));
  const i128 aa = da < 0 ? -da : da, ab = db < 0 ? -db : db;
  return aa < ab ? -1 : aa > ab ? 1 : 0;
}

// The correctly rounded float of num * 2^k / den (nearest, ties to even), found by exact
// comparison among the neighbours of a long double estimate: independent of the codec.
float reference(i128 num, int k, std::int64_t den) {
  if (num == 0) return 0.0f;
  const long double est = std::ldexp(static_cast<long double>(num), k) / den;
  float best = static_cast<float>(est);
  for (int round = 0; round < 2; ++round) {
    for (float c : {std::nextafter(best, -INFINITY), std::nextafter(best, INFINITY)}) {
      const int cmp = closer(num, k, den, c, best);
      std::uint32_t cb, bb;
      std::memcpy(&cb, &c, 4);
      std::memcpy(&bb, &best, 4);
      if (cmp < 0 || (cmp == 0 && (cb & 1) == 0 && (bb & 1) == 1)) best = c;
    }
  }
  return best;
}

// The exact sum of floats as num * 2^k (k the smallest exponent among them).
std::pair<i128, int> exact_sum(const std::vector<float>& xs) {
  int k = 0;
  bool any = false;
  for (float x : xs) {
    if (x == 0) continue;
    k = any ? std::min(k, split(x).e) : split(x).e;
    any = true;
  }
  i128 s = 0;
  for (float x : xs) {
    if (x == 0) continue;
    const fe v = split(x);
    s += static_cast<i128>(v.F) << (v.e - k);
  }
  return {s, k};
}

using code64 = std::int64_t;
constexpr int K64 = gx::lane_bits<std::int64_t, 4096>;  // 51
constexpr int K32 = gx::lane_bits<std::int32_t, 4096>;  // 19

// The codec's steps for one block shared by `xs[r]` over the ranks, by hand (what the
// allreducer does with a channel): agree the scale, code, add, decode.
template <class T, class Code, int K>
std::vector<T> block_sum(const std::vector<std::vector<T>>& xs, std::uint64_t divisor) {
  const std::size_t n = xs[0].size();
  constexpr std::size_t lanes = gx::layout<T>::lanes;
  int field = 1;
  for (const auto& x : xs) field = std::max(field, gx::scan(x.data(), n).field);
  std::vector<Code> sum(n * lanes, 0), mine(n * lanes);
  bool overflow = false;
  for (const auto& x : xs) {
    gx::encode<T, Code, K>(mine.data(), x.data(), n, field);
    for (std::size_t i = 0; i < sum.size(); ++i)
      overflow |= __builtin_add_overflow(sum[i], mine[i], &sum[i]);
  }
  REQUIRE_FALSE(overflow);
  std::vector<T> out(n);
  gx::decode<T, Code, K>(out.data(), sum.data(), n, field, divisor);
  return out;
}

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, 4) == 0;
}

}  // namespace

TEST_CASE("exact codes: a value alone in its block comes back bitwise (float and double)") {
  std::size_t checked = 0, wrong = 0;
  for (std::uint64_t u = 0; u < (1ull << 32); u += 65537) {  // every exponent, both signs
    const std::uint32_t bits = static_cast<std::uint32_t>(u);
    float x;
    std::memcpy(&x, &bits, 4);
    if (!std::isfinite(x)) continue;
    const auto y = block_sum<float, code64, K64>({{x}}, 1);
    wrong += !(same_bits(y[0], x) || (x == 0 && y[0] == 0));
    ++checked;
  }
  CHECK(checked > 60000);
  CHECK(wrong == 0);
  for (std::uint64_t i = 0; i < 20000; ++i) {
    std::uint64_t bits = mix(i);
    double x;
    std::memcpy(&x, &bits, 8);
    if (!std::isfinite(x) || x == 0) continue;
    const auto y = block_sum<double, code64, K64>({{x}}, 1);
    CHECK(std::memcmp(&y[0], &x, 8) == 0);
  }
}

TEST_CASE("exact codes: float's branch-free encode equals the encode from the bits") {
  // Every 4099th bit pattern (NaN and Inf included) at fields from its own up to far above
  // it, in both lane widths: the loop the CPU vectorises codes what encode_bits codes.
  std::vector<float> xs;
  for (std::uint64_t u = 0; u < (1ull << 32); u += 4099) {
    const std::uint32_t bits = static_cast<std::uint32_t>(u);
    float x;
    std::memcpy(&x, &bits, 4);
    xs.push_back(x);
  }
  std::size_t wrong64 = 0, wrong32 = 0;
  std::vector<std::int64_t> a64(1), b64(1);
  std::vector<std::int32_t> a32(1), b32(1);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const int own =
        std::max(1, static_cast<int>((std::bit_cast<std::uint32_t>(xs[i]) >> 23) & 255));
    const int field = std::min(254, own + static_cast<int>(mix(i) % 70));
    if (own == 255) continue;  // a NaN or Inf: scanned as field 0, coded as 0 (below)
    gx::encode<float, std::int64_t, K64>(a64.data(), &xs[i], 1, field);
    gx::encode_bits<float, std::int64_t, K64>(b64.data(), &xs[i], 1, field);
    gx::encode<float, std::int32_t, K32>(a32.data(), &xs[i], 1, field);
    gx::encode_bits<float, std::int32_t, K32>(b32.data(), &xs[i], 1, field);
    wrong64 += a64[0] != b64[0];
    wrong32 += a32[0] != b32[0];
  }
  CHECK(wrong64 == 0);
  CHECK(wrong32 == 0);
  for (float v : {NAN, INFINITY, -INFINITY}) {
    gx::encode<float, std::int64_t, K64>(a64.data(), &v, 1, 200);
    CHECK(a64[0] == 0);
  }
  // A whole block at once (the vectorised path), against the reference.
  std::vector<std::int64_t> blk(xs.size()), ref(xs.size());
  std::vector<float> finite;
  for (float x : xs)
    if (std::isfinite(x)) finite.push_back(x);
  const int field = gx::scan(finite.data(), finite.size()).field;
  gx::encode<float, std::int64_t, K64>(blk.data(), finite.data(), finite.size(), field);
  gx::encode_bits<float, std::int64_t, K64>(ref.data(), finite.data(), finite.size(), field);
  CHECK(std::equal(blk.begin(), blk.begin() + finite.size(), ref.begin()));
  // The accumulator's one pass: adding into a sum gives the same codes, and the scan's
  // field and flag (NaN and Inf included, coded as 0).
  std::vector<std::int64_t> acc(xs.size(), 7);
  const auto sc = gx::encode_add<std::int64_t, K64>(acc.data(), xs.data(), xs.size(), 254);
  gx::encode_bits<float, std::int64_t, K64>(ref.data(), xs.data(), xs.size(), 254);
  const auto plain = gx::scan(xs.data(), xs.size());
  CHECK(sc.field == plain.field);
  CHECK(sc.non_finite == plain.non_finite);
  std::size_t diff = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) diff += acc[i] != ref[i] + 7;
  CHECK(diff == 0);
}

TEST_CASE("exact codes: sums over a block spanning at most 2^27 are correctly rounded") {
  for (std::size_t n : {2, 3, 5, 8}) {
    CAPTURE(n);
    for (std::uint64_t divisor : {std::uint64_t{1}, std::uint64_t{n}}) {
      CAPTURE(divisor);
      std::size_t wrong = 0;
      for (std::size_t blk = 0; blk < 200; ++blk) {
        std::vector<std::vector<float>> xs(n, std::vector<float>(256));
        for (std::size_t r = 0; r < n; ++r)
          for (std::size_t i = 0; i < 256; ++i)
            xs[r][i] = contribution(r, blk, i, blk % 2 ? 27 : 3);
        const auto got = block_sum<float, code64, K64>(xs, divisor);
        for (std::size_t i = 0; i < 256; ++i) {
          std::vector<float> col;
          for (std::size_t r = 0; r < n; ++r) col.push_back(xs[r][i]);
          const auto [num, k] = exact_sum(col);
          wrong += !same_bits(got[i], reference(num, k, static_cast<std::int64_t>(divisor)));
        }
      }
      CHECK(wrong == 0);
    }
  }
}

TEST_CASE("exact codes: beyond 2^27 within a block, each element is within the bound") {
  // 64-bit mode: each summand loses at most half a code unit 2^(E + 1 - 51); the result
  // then rounds once more (half an ulp of itself).
  const std::size_t n = 4;
  std::size_t exact_ones = 0, total = 0;
  for (std::size_t blk = 0; blk < 100; ++blk) {
    std::vector<std::vector<float>> xs(n, std::vector<float>(256));
    for (std::size_t r = 0; r < n; ++r)
      for (std::size_t i = 0; i < 256; ++i) xs[r][i] = contribution(r, blk, i, 60);
    const auto got = block_sum<float, code64, K64>(xs, 1);
    int field = 1;
    for (const auto& x : xs) field = std::max(field, gx::scan(x.data(), 256).field);
    const long double unit = std::ldexp(1.0L, field - 127 + 1 - K64);
    for (std::size_t i = 0; i < 256; ++i) {
      long double want = 0;
      for (std::size_t r = 0; r < n; ++r) want += xs[r][i];  // exact: spans < 64 bits here
      const long double err = std::fabs(static_cast<long double>(got[i]) - want);
      const long double ulp_half = std::fabs(want) * std::ldexp(1.0L, -24);
      CHECK(err <= n * unit / 2 + ulp_half);
      exact_ones +=
          static_cast<long double>(got[i]) == static_cast<long double>(static_cast<float>(want));
      ++total;
    }
  }
  CHECK(exact_ones > total / 2);  // most elements are still the rounded exact sum
}

TEST_CASE("exact codes: rounding to odd keeps a sticky bit below a tie") {
  // 1 + 2^-53 is halfway between two doubles; 2^-100 more rounds it up. Double's codes
  // span 102 bits, so the sum reaches the last rounding through 64 bits rounded to odd.
  const auto d = block_sum<double, code64, K64>({{1.0}, {0x1p-53}, {0x1p-100}}, 1);
  CHECK(d[0] == 1.0 + 0x1p-52);
  const auto tie = block_sum<double, code64, K64>({{1.0}, {0x1p-53}, {0.0}}, 1);
  CHECK(tie[0] == 1.0);  // a true tie goes to even
  // The same at the kernel: 2^100 + 2^76 + 1 is a float tie plus a sticky bit.
  const i128 s = (i128(1) << 100) + (i128(1) << 76) + 1;
  CHECK(gx::value_of<float>(s, -100, 1) == 1.0f + 0x1p-23f);
  CHECK(gx::value_of<float>(s - 1, -100, 1) == 1.0f);
  // Float's codes decode through double (53 bits): 2^54 + 2^30 + 1 units of 2^-50 is
  // 16 + 2^-20 (a tie at float's precision) + 2^-50, which rounds up; so does the mean
  // of three times it plus 1. Both paths, the double one and the one from the bits.
  for (const auto& [sum, ranks] :
       {std::pair<std::int64_t, std::uint64_t>{(1ll << 54) + (1ll << 30) + 1, 1},
        {3 * ((1ll << 54) + (1ll << 30)) + 1, 3}}) {
    CAPTURE(ranks);
    float via_double = 0, via_bits = 0;
    gx::decode<float, std::int64_t, K64>(&via_double, &sum, 1, 127, ranks);
    gx::decode_bits<float, std::int64_t, K64>(&via_bits, &sum, 1, 127, ranks);
    CHECK(via_double == 16.0f + 0x1p-19f);
    CHECK(via_bits == 16.0f + 0x1p-19f);
    const std::int64_t tie = sum - 1;  // the exact tie goes to even
    gx::decode<float, std::int64_t, K64>(&via_double, &tie, 1, 127, ranks);
    CHECK(via_double == 16.0f);
  }
  // An average whose quotient is a tie plus a remainder: (3 * (2^25 + 2) + 1) / 3.
  const i128 q = 3 * ((i128(1) << 25) + 2) + 1;
  CHECK(gx::value_of<float>(q, 0, 3) == 33554436.0f);
  CHECK(gx::value_of<float>(q - 1, 0, 3) == 33554432.0f);
}

TEST_CASE("exact codes: float's decode through double equals the decode from the bits") {
  // Random sums of every size up to 2^63, at scales from the denormal range to overflow,
  // summed and averaged: the double path (vectorised where the CPU can) and its fallbacks
  // give the bits value_of gives.
  std::size_t wrong = 0, checked = 0;
  std::vector<std::int64_t> sums(4096);
  std::vector<float> a(4096), b(4096);
  for (std::uint64_t round = 0; round < 64; ++round) {
    for (std::size_t i = 0; i < sums.size(); ++i) {
      const std::uint64_t z = mix(round * 7919 + i);
      const int width = static_cast<int>(z % 64);  // 0 .. 63 bits
      std::int64_t v = width == 0 ? 0 : static_cast<std::int64_t>(mix(z) >> (64 - width));
      sums[i] = (z >> 7) & 1 ? -v : v;
    }
    const int field = static_cast<int>(mix(round) % 254) + 1;
    for (std::uint64_t ranks : {1, 2, 3, 7, 4096}) {
      gx::decode<float, std::int64_t, K64>(a.data(), sums.data(), sums.size(), field, ranks);
      gx::decode_bits<float, std::int64_t, K64>(b.data(), sums.data(), sums.size(), field, ranks);
      for (std::size_t i = 0; i < a.size(); ++i) wrong += !same_bits(a[i], b[i]);
      checked += a.size();
    }
  }
  CHECK(checked == 64 * 5 * 4096);
  CHECK(wrong == 0);
  std::vector<std::int32_t> small(sums.size());  // 32-bit mode's codes
  for (std::size_t i = 0; i < small.size(); ++i)
    small[i] = static_cast<std::int32_t>(sums[i] >> 32);
  for (std::uint64_t ranks : {1, 3, 4096}) {
    gx::decode<float, std::int32_t, K32>(a.data(), small.data(), small.size(), 100, ranks);
    gx::decode_bits<float, std::int32_t, K32>(b.data(), small.data(), small.size(), 100, ranks);
    std::size_t differ = 0;
    for (std::size_t i = 0; i < a.size(); ++i) differ += !same_bits(a[i], b[i]);
    CHECK(differ == 0);
  }
}

TEST_CASE("exact codes: float's average through double, element by element, equals the bits") {
  // One element per call, so the double path takes each (a block falls back to the bits
  // as a whole when one element needs them, which the test above mostly hits). The sums
  // are ranks times a point halfway between two floats, give or take less than one rank:
  // quotients within a few double ulps of a float tie, where rounding the quotient to odd
  // (below or above it, sticky or not) decides the float. Ranks from 2 to 4096.
  std::size_t wrong = 0, fast_path = 0, checked = 0;
  for (std::uint64_t i = 0; i < 100000; ++i) {
    const std::uint64_t z = mix(i + 4242);
    const std::uint64_t ranks = 2 + mix(z + 2) % 4095;
    const std::uint64_t tie = (mix(z + 5) >> 39) | 1;  // 25 bits, odd: a float tie
    const int shift = static_cast<int>(mix(z + 6) % 25);
    const auto jitter =
        static_cast<std::int64_t>(mix(z + 7) % (2 * ranks + 1)) - static_cast<std::int64_t>(ranks);
    const std::int64_t v = static_cast<std::int64_t>((tie << shift) * ranks) + jitter;
    const std::int64_t sum = (z >> 7) & 1 ? -v : v;
    const int field = 150 + static_cast<int>(mix(z + 3) % 60);
    float a = 0, b = 0, c = 0;
    const int scale = field - gx::layout<float>::bias + 1 - K64;
    if (gx::detail::decode_float_via_double<true>(&a, &sum, 1, scale, static_cast<double>(ranks))) {
      ++fast_path;
      gx::decode_bits<float, std::int64_t, K64>(&b, &sum, 1, field, ranks);
      gx::decode<float, std::int64_t, K64>(&c, &sum, 1, field, ranks);  // AVX-512 where it can
      wrong += !same_bits(a, b) + !same_bits(c, b);
    }
    ++checked;
  }
  CHECK(fast_path == checked);
  CHECK(wrong == 0);
}

TEST_CASE("exact codes: denormals, signed zeros, the block maximum, MaxRanks summands") {
  const float tiny = std::numeric_limits<float>::denorm_min();
  const auto dn = block_sum<float, code64, K64>({{tiny, 3 * tiny, -tiny}, {tiny, tiny, 0.0f}}, 1);
  CHECK(dn[0] == 2 * tiny);
  CHECK(dn[1] == 4 * tiny);
  CHECK(dn[2] == -tiny);
  // A zero sum is +0 whatever the zeros' signs (IEEE gives -0 only when all are -0).
  const auto z = block_sum<float, code64, K64>({{-0.0f, 1.0f}, {-0.0f, -1.0f}}, 1);
  CHECK(same_bits(z[0], 0.0f));
  CHECK(same_bits(z[1], 0.0f));
  // Half the smallest denormal after an average rounds to even (zero), a bit more up.
  const auto half = block_sum<float, code64, K64>({{tiny, 3 * tiny}, {0.0f, 0.0f}}, 2);
  CHECK(same_bits(half[0], 0.0f));
  CHECK(half[1] == 2 * tiny);
  // MaxRanks (4096) summands of the block's largest value: no lane overflows (block_sum
  // checks every addition), and the float sum overflows to Inf as IEEE's would.
  const float top = std::numeric_limits<float>::max();
  const float near2 = std::nextafter(2.0f, 0.0f);  // rounds up to 2^P in 32-bit mode
  std::vector<std::vector<float>> giants(4096, std::vector<float>{top, -top / 4096});
  const auto g = block_sum<float, code64, K64>(giants, 1);
  CHECK(g[0] == INFINITY);
  CHECK(g[1] == -top);
  std::vector<std::vector<float>> many(4096, std::vector<float>{near2, near2, -near2, 1.0f});
  const auto s64 = block_sum<float, code64, K64>(many, 1);
  CHECK(s64[1] == 4096 * near2);
  CHECK(s64[2] == -4096 * near2);
  CHECK(s64[3] == 4096.0f);
  std::vector<std::vector<float>> many2(4096, std::vector<float>{near2, -near2, 1.0f});
  const auto s32 = block_sum<float, std::int32_t, K32>(many2, 1);
  CHECK(s32[0] == doctest::Approx(8192.0).epsilon(1e-5));  // clamped below 2^P: no wrap
  CHECK(s32[0] > 0);
  CHECK(s32[1] == -s32[0]);
  CHECK(s32[2] == 4096.0f);
  const auto avg = block_sum<float, code64, K64>(many, 4096);
  CHECK(avg[1] == near2);
  CHECK(avg[3] == 1.0f);
}

namespace {

struct run_out {
  std::vector<float> result;  // rank 0's tensors, concatenated
  bool ranks_agree = false;
  std::size_t wire = 0;  // rank 0's bytes_wire
  std::string error;
};

const std::vector<std::size_t>& sizes() {
  static const std::vector<std::size_t> s = {1000, 257, 3, 300001, 5000, 0, 70001, 1, 4100};
  return s;
}

// Every rank fills its tensors with contribution `placement[rank]`, runs one step of the
// registered plan (or one grouped call) through allreducer<local, Algo, Fusion, C> and
// returns rank 0's result.
template <class Algo, class Fusion, class C = gs::compress::exact<>, class Op = gs::op::sum_t>
run_out run_exact(const std::vector<std::size_t>& placement, int spread, bool grouped = false) {
  const std::size_t n = placement.size();
  std::vector<std::uint64_t> digest(n);
  run_out out;
  gs::transport::run_local(n, [&](local& t) {
    gs::allreducer<local, Algo, Fusion, C> ar(t);
    std::vector<std::vector<float>> own;
    std::vector<std::span<float>> ts;
    if (grouped) {
      own.resize(sizes().size());
      for (std::size_t k = 0; k < sizes().size(); ++k) {
        own[k].resize(sizes()[k]);
        ts.push_back(own[k]);
      }
    } else {
      ts = fusion_test::register_model<float>(ar, sizes(), own, Op{});
    }
    for (std::size_t k = 0; k < ts.size(); ++k)
      for (std::size_t i = 0; i < ts[k].size(); ++i)
        ts[k][i] = contribution(placement[t.rank()], k, i, spread);
    if (grouped) {
      std::vector<gs::tensor_ref> list;
      for (auto& s : ts) list.push_back(gs::tensor_ref(s));
      ar.allreduce(std::span<const gs::tensor_ref>(list), Op{});
    } else {
      for (std::size_t k = ts.size(); k-- > 0;) ar.ready(k);
      ar.wait();
    }
    digest[t.rank()] = fusion_test::digest_model(ts);
    if (t.rank() == 0) {
      for (auto& s : ts) out.result.insert(out.result.end(), s.begin(), s.end());
      out.wire = ar.last_stats().bytes_wire;
    }
  });
  out.ranks_agree =
      std::all_of(digest.begin(), digest.end(), [&](auto d) { return d == digest[0]; });
  return out;
}

std::size_t differing(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  std::size_t d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d += !same_bits(a[i], b[i]);
  return d;
}

}  // namespace

TEST_CASE("exact: the same bits for every algorithm, bucket size, fusion mode and placement") {
  gs::testbed::watchdog wd(240, "exact invariance");
  using namespace gs::algo;
  using b64k = gs::fusion::bucket<64 << 10>;
  const std::vector<std::size_t> id = {0, 1, 2, 3};
  for (int spread : {27, 60}) {  // 60: blocks span more than the codes' bits
    CAPTURE(spread);
    const run_out ref = run_exact<ring, gs::fusion::none>(id, spread);
    REQUIRE(ref.ranks_agree);
    auto same = [&](const run_out& o) {
      CHECK(o.ranks_agree);
      CHECK(differing(o.result, ref.result) == 0);
    };
    same(run_exact<tree, b64k>(id, spread));
    same(run_exact<halving_doubling, b64k>(id, spread));
    same(run_exact<auto_select, b64k>(id, spread));
    same(run_exact<ring, b64k>(id, spread));
    same(run_exact<ring, gs::fusion::bucket<1 << 20>>(id, spread));
    same(run_exact<ring, gs::fusion::bucket<25 << 20>>(id, spread));
    same(run_exact<ring, gs::fusion::zero_copy<1 << 20>>(id, spread));
    same(run_exact<ring, gs::fusion::bucket<1 << 20>>(id, spread, true));  // grouped call
    same(run_exact<ring, gs::fusion::bucket<25 << 20>>(id, spread, true));
    for (std::uint64_t seed : {1, 2, 3}) {
      same(run_exact<ring, gs::fusion::bucket<1 << 20>>(fusion_test::shuffled(4, seed), spread));
    }
    if (spread == 27) {  // every element is the correctly rounded exact sum
      std::size_t wrong = 0, at = 0;
      for (std::size_t k = 0; k < sizes().size(); ++k) {
        for (std::size_t i = 0; i < sizes()[k]; ++i, ++at) {
          std::vector<float> col;
          for (std::size_t c = 0; c < 4; ++c) col.push_back(contribution(c, k, i, spread));
          const auto [num, e] = exact_sum(col);
          wrong += !same_bits(ref.result[at], reference(num, e, 1));
        }
      }
      CHECK(wrong == 0);
    }
  }
}

TEST_CASE("exact: ordinary float sums do change with the algorithm (what exact fixes)") {
  gs::testbed::watchdog wd(120, "exact baseline");
  using namespace gs::algo;
  const std::vector<std::size_t> id = {0, 1, 2, 3};
  const run_out a = run_exact<ring, gs::fusion::none, gs::compress::none>(id, 60);
  const run_out b = run_exact<tree, gs::fusion::none, gs::compress::none>(id, 60);
  CHECK(differing(a.result, b.result) > 0);
}

TEST_CASE("exact: over two levels (hierarchical), the same bits as one level") {
  gs::testbed::watchdog wd(120, "exact two levels");
  using two_level = gs::transport::two_level<local, local>;
  const std::vector<std::size_t> id = {0, 1, 2, 3};
  const run_out ref = run_exact<gs::algo::ring, gs::fusion::none>(id, 60);
  for (auto [nodes, per] : {std::pair<std::size_t, std::size_t>{2, 2}, {4, 1}, {1, 4}}) {
    CAPTURE(nodes);
    std::vector<std::vector<float>> got(4);
    const auto errors = gs::testbed::run_two_level_shape(nodes, per, [&](local a, local b) {
      two_level t(std::move(a), std::move(b));
      gs::allreducer<two_level, gs::algo::hierarchical<>, gs::fusion::bucket<1 << 20>,
                     gs::compress::exact<>>
          ar(t);
      std::vector<std::vector<float>> own;
      auto ts = fusion_test::register_model<float>(ar, sizes(), own, gs::op::sum);
      for (std::size_t k = 0; k < ts.size(); ++k)
        for (std::size_t i = 0; i < ts[k].size(); ++i) ts[k][i] = contribution(t.rank(), k, i, 60);
      for (std::size_t k = 0; k < ts.size(); ++k) ar.ready(k);
      ar.wait();
      for (auto& s : ts) got[t.rank()].insert(got[t.rank()].end(), s.begin(), s.end());
    });
    for (std::size_t r = 0; r < 4; ++r) {
      CAPTURE(r);
      CHECK(errors[r] == "");
      CHECK(differing(got[r], ref.result) == 0);
    }
  }
}

TEST_CASE("exact: avg is the correctly rounded exact mean; min and max pass unchanged") {
  gs::testbed::watchdog wd(120, "exact avg");
  using namespace gs::algo;
  const std::vector<std::size_t> id = {0, 1, 2};
  const run_out avg =
      run_exact<ring, gs::fusion::bucket<1 << 20>, gs::compress::exact<>, gs::op::avg_t>(id, 20);
  const run_out avg2 =
      run_exact<tree, gs::fusion::none, gs::compress::exact<>, gs::op::avg_t>({2, 0, 1}, 20);
  CHECK(avg.ranks_agree);
  CHECK(differing(avg.result, avg2.result) == 0);
  std::size_t wrong = 0, at = 0;
  for (std::size_t k = 0; k < sizes().size(); ++k) {
    for (std::size_t i = 0; i < sizes()[k]; ++i, ++at) {
      std::vector<float> col;
      for (std::size_t c = 0; c < 3; ++c) col.push_back(contribution(c, k, i, 20));
      const auto [num, e] = exact_sum(col);
      wrong += !same_bits(avg.result[at], reference(num, e, 3));
    }
  }
  CHECK(wrong == 0);
  const run_out mx =
      run_exact<ring, gs::fusion::bucket<1 << 20>, gs::compress::exact<>, gs::op::max_t>(id, 60);
  const run_out mx0 =
      run_exact<ring, gs::fusion::bucket<1 << 20>, gs::compress::none, gs::op::max_t>(id, 60);
  CHECK(differing(mx.result, mx0.result) == 0);
  CHECK(mx.wire == mx0.wire);
}

TEST_CASE("exact: NaN and Inf get IEEE sums per element; the rest of the block is exact") {
  gs::testbed::watchdog wd(120, "exact non-finite");
  const std::size_t n = 3, count = 1000;
  std::vector<std::vector<float>> out(n);
  gs::transport::run_local(n, [&](local& t) {
    gs::allreducer<local, gs::algo::ring, gs::fusion::none, gs::compress::exact<>> ar(t);
    const std::size_t r = t.rank();
    for (int step = 0; step < 2; ++step) {
      std::vector<float> x(count);
      for (std::size_t i = 0; i < count; ++i) x[i] = static_cast<float>(i % 7 + r);
      if (step == 0) {
        if (r == 1) x[10] = NAN;       // NaN anywhere: NaN
        if (r == 0) x[20] = INFINITY;  // +Inf and -Inf: NaN
        if (r == 2) x[20] = -INFINITY;
        if (r != 1) x[30] = INFINITY;   // +Inf twice: +Inf
        if (r == 2) x[40] = -INFINITY;  // -Inf once: -Inf
      }
      ar.allreduce(std::span<float>(x), gs::op::sum);
      if (step == 1) out[r] = x;
      if (step == 0) {
        CHECK(std::isnan(x[10]));
        CHECK(std::isnan(x[20]));
        CHECK(x[30] == INFINITY);
        CHECK(x[40] == -INFINITY);
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < count; ++i) {
          if (i == 10 || i == 20 || i == 30 || i == 40) continue;
          float want = 0;
          for (std::size_t q = 0; q < n; ++q) want += static_cast<float>(i % 7 + q);
          wrong += x[i] != want;
        }
        CHECK(wrong == 0);
      }
    }
  });
  for (std::size_t i = 0; i < count; ++i) {  // the next step carries nothing over
    const float want = static_cast<float>(3 * (i % 7) + 3);
    if (out[0][i] != want) FAIL_CHECK("element " << i << " is " << out[0][i]);
  }
  CHECK(out[1] == out[0]);
}

TEST_CASE("exact: wire bytes are the codes' (1.00x none for 32-bit, 2.00x for 64-bit)") {
  gs::testbed::watchdog wd(120, "exact wire");
  using namespace gs::algo;
  const std::vector<std::size_t> id = {0, 1, 2, 3};
  using fus = gs::fusion::bucket<1 << 20>;
  const run_out none = run_exact<ring, fus, gs::compress::none>(id, 20);
  const run_out e64 = run_exact<ring, fus, gs::compress::exact<64>>(id, 20);
  const run_out e32 = run_exact<ring, fus, gs::compress::exact<32>>(id, 20);
  const double r64 = double(e64.wire) / double(none.wire),
               r32 = double(e32.wire) / double(none.wire);
  MESSAGE("wire bytes: none " << none.wire << ", exact64 " << r64 << "x, exact32 " << r32 << "x");
  CHECK(r64 >= 2.0);
  CHECK(r64 <= 2.01);
  CHECK(r32 >= 1.0);
  CHECK(r32 <= 1.01);
  // 32-bit mode: the same bits everywhere too (fewer of them exact).
  const run_out e32b = run_exact<tree, gs::fusion::none, gs::compress::exact<32>>({3, 1, 0, 2}, 20);
  CHECK(differing(e32.result, e32b.result) == 0);
}

TEST_CASE("exact: a group larger than MaxRanks is refused, naming the fix") {
  gs::testbed::watchdog wd(60, "exact max ranks");
  std::vector<std::string> errors(3);
  gs::transport::run_local(3, [&](local& t) {
    gs::allreducer<local, gs::algo::ring, gs::fusion::none, gs::compress::exact<64, 256, 2>> ar(t);
    std::vector<float> x(100, 1.0f);
    try {
      ar.allreduce(std::span<float>(x), gs::op::sum);
    } catch (const gs::error& e) {
      errors[t.rank()] = e.what();
    }
  });
  for (const auto& e : errors) {
    CHECK(e.find("MaxRanks = 2") != std::string::npos);
    CHECK(e.find("this group has 3") != std::string::npos);
    CHECK(e.find("raise MaxRanks") != std::string::npos);
  }
}

namespace {

// Contribution c (of 8) of a three-tensor layout: float "micro-batch gradients".
std::vector<float> micro_batch(std::size_t c, const std::vector<std::size_t>& counts, int spread,
                               float scale = 1.0f) {
  std::vector<float> x;
  for (std::size_t k = 0; k < counts.size(); ++k)
    for (std::size_t i = 0; i < counts[k]; ++i) x.push_back(scale * contribution(c, k, i, spread));
  return x;
}

using accumulator = gs::compress::exact_accumulator<>;

// n ranks share the 8 contributions (rank r adds those that `owner` gives it), for two
// steps (the second's contributions 4x the first's); returns rank 0's sums per step, the
// redo count and whether every rank agreed.
struct acc_out {
  std::vector<std::vector<float>> sums;
  std::size_t redos = 0;
  bool agree = true;
};
template <class Algo>
acc_out accumulate(std::size_t n, const std::vector<std::size_t>& owner, int spread) {
  const std::vector<std::size_t> counts = {1000, 3, 70001};
  acc_out out;
  std::vector<std::vector<std::vector<float>>> got(n);
  std::vector<std::size_t> redos(n);
  gs::transport::run_local(n, [&](local& t) {
    accumulator acc(counts);
    for (float scale : {1.0f, 4.0f}) {
      for (int attempt = 0;; ++attempt) {
        acc.begin();
        for (std::size_t c = 0; c < 8; ++c)
          if (owner[c] % n == t.rank()) acc.add(micro_batch(c, counts, spread, scale));
        gs::allreduce<Algo>(t, acc.fields(), gs::op::max);
        if (!acc.needs_redo()) break;
        REQUIRE(attempt == 0);  // the redo's exponents are the agreed ones: it fits
        ++redos[t.rank()];
      }
      gs::allreduce<Algo>(t, acc.codes(), gs::op::sum);
      std::vector<float> sum(acc.size());
      acc.decode(sum);
      got[t.rank()].push_back(sum);
    }
  });
  out.sums = got[0];
  out.redos = redos[0];
  for (std::size_t r = 0; r < n; ++r)
    out.agree = out.agree && got[r] == got[0] && redos[r] == redos[0];
  return out;
}

}  // namespace

TEST_CASE("exact_accumulator: 1, 2, 3, 4 and 8 ranks sharing 8 contributions, the same bits") {
  gs::testbed::watchdog wd(240, "exact accumulator");
  const std::vector<std::size_t> plain = {0, 1, 2, 3, 4, 5, 6, 7};
  for (int spread : {20, 60}) {
    CAPTURE(spread);
    const acc_out one = accumulate<gs::algo::ring>(1, plain, spread);
    CHECK(one.redos == 1);  // the first step: exponents start at the bottom
    for (std::size_t n : {2, 3, 4, 8}) {
      CAPTURE(n);
      const acc_out o = accumulate<gs::algo::ring>(n, plain, spread);
      CHECK(o.agree);
      CHECK(o.redos == one.redos);
      REQUIRE(o.sums.size() == 2);
      CHECK(differing(o.sums[0], one.sums[0]) == 0);
      CHECK(differing(o.sums[1], one.sums[1]) == 0);
    }
    const acc_out tree = accumulate<gs::algo::tree>(3, {5, 2, 7, 0, 1, 6, 3, 4}, spread);
    CHECK(differing(tree.sums[1], one.sums[1]) == 0);
    if (spread == 20) {  // within 2^27 per block: the correctly rounded exact sum
      const std::vector<std::size_t> counts = {1000, 3, 70001};
      std::vector<std::vector<float>> mbs;
      for (std::size_t c = 0; c < 8; ++c) mbs.push_back(micro_batch(c, counts, spread));
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < mbs[0].size(); ++i) {
        std::vector<float> col;
        for (const auto& m : mbs) col.push_back(m[i]);
        const auto [num, e] = exact_sum(col);
        wrong += !same_bits(one.sums[0][i], reference(num, e, 1));
      }
      CHECK(wrong == 0);
    }
  }
}

TEST_CASE("exact_accumulator: a step that grows redoes once; NaN marks its block; limits") {
  const std::vector<std::size_t> counts = {300};
  accumulator acc(counts);
  auto step = [&](float v, std::size_t contributions) {
    std::size_t redos = 0;
    for (;;) {
      acc.begin();
      for (std::size_t c = 0; c < contributions; ++c) {
        std::vector<float> x(300, v);
        x[299] = c == 0 ? 0.5f : 0.0f;
        acc.add(x);
      }
      if (!acc.needs_redo()) break;  // one rank: fields() is already the maximum
      ++redos;
    }
    std::vector<float> out(300);
    acc.decode(out);
    return std::pair{redos, out};
  };
  auto [r0, s0] = step(1.0f, 3);
  CHECK(r0 == 1);
  CHECK(s0[0] == 3.0f);
  CHECK(s0[299] == 0.5f);
  CHECK(s0[256] == 3.0f);          // the second block (tensor-aligned: 256 + 44)
  auto [r1, s1] = step(12.0f, 3);  // within the headroom (4 bits): no redo
  CHECK(r1 == 0);
  CHECK(s1[0] == 36.0f);
  auto [r2, s2] = step(1000.0f, 2);  // above it: one redo, then exact
  CHECK(r2 == 1);
  CHECK(s2[0] == 2000.0f);
  // A block of zeros keeps an exponent at most Span (8 here) below the step's largest:
  // when it wakes up below that, no redo.
  const std::vector<std::size_t> two = {512};
  gs::compress::exact_accumulator<64, 256, 256, 4, 8> z(two);
  for (int s = 0; s < 3; ++s) {
    std::vector<float> x(512, 0.0f);
    std::fill(x.begin(), x.begin() + 256, 1.0f);
    if (s == 2) std::fill(x.begin() + 256, x.end(), 0x1p-8f);
    z.begin();
    z.add(x);
    CHECK(z.needs_redo() == (s == 0));
    std::vector<float> o(512);
    z.decode(o);
    CHECK(o[300] == (s == 2 ? 0x1p-8f : 0.0f));
  }
  acc.begin();
  std::vector<float> bad(300, 1.0f);
  bad[5] = NAN;
  acc.add(bad);
  CHECK_FALSE(acc.needs_redo());
  std::vector<float> out(300);
  acc.decode(out);
  CHECK(std::isnan(out[0]));  // the NaN's block
  CHECK(out[256] == 1.0f);    // the next block is untouched
  std::vector<float> wrong_size(299);
  CHECK_THROWS_WITH_AS(acc.add(wrong_size), doctest::Contains("a contribution of 299 floats"),
                       gs::error);
  gs::compress::exact_accumulator<64, 256, 4> small(counts);
  small.begin();
  std::vector<float> one(300, 1.0f);
  for (int c = 0; c < 4; ++c) small.add(one);
  CHECK_THROWS_WITH_AS(small.add(one), doctest::Contains("raise MaxContributions"), gs::error);
}

TEST_CASE("exact: double tensors (two lanes) through the allreducer, the same bits everywhere") {
  gs::testbed::watchdog wd(120, "exact double");
  using namespace gs::algo;
  const std::vector<std::size_t> dsizes = {1000, 70001, 3};
  // Float values widened, times (1 + 2^-40): 53-bit significands whose sum of 3 is exact
  // in long double (64 bits) when a tensor spans 2^8.
  auto value = [](std::size_t c, std::size_t k, std::size_t i) {
    return static_cast<double>(contribution(c, k, i, 8)) * (1.0 + 0x1p-40);
  };
  auto run = [&]<class Algo, class Fusion, class Op>(Op) {
    std::vector<std::vector<double>> out(3);
    gs::transport::run_local(3, [&](local& t) {
      gs::allreducer<local, Algo, Fusion, gs::compress::exact<>> ar(t);
      std::vector<std::vector<double>> own;
      auto ts = fusion_test::register_model<double>(ar, dsizes, own, Op{});
      for (std::size_t k = 0; k < ts.size(); ++k)
        for (std::size_t i = 0; i < ts[k].size(); ++i) ts[k][i] = value(t.rank(), k, i);
      for (std::size_t k = 0; k < ts.size(); ++k) ar.ready(k);
      ar.wait();
      for (auto& s : ts) out[t.rank()].insert(out[t.rank()].end(), s.begin(), s.end());
    });
    CHECK(out[1] == out[0]);
    CHECK(out[2] == out[0]);
    return out[0];
  };
  const auto a = run.operator()<ring, gs::fusion::none>(gs::op::sum);
  const auto b = run.operator()<tree, gs::fusion::bucket<64 << 10>>(gs::op::sum);
  const auto c = run.operator()<halving_doubling, gs::fusion::zero_copy<1 << 20>>(gs::op::sum);
  CHECK(std::memcmp(a.data(), b.data(), a.size() * 8) == 0);
  CHECK(std::memcmp(a.data(), c.data(), a.size() * 8) == 0);
  std::size_t wrong = 0, at = 0;
  for (std::size_t k = 0; k < dsizes.size(); ++k) {
    for (std::size_t i = 0; i < dsizes[k]; ++i, ++at) {
      long double want = 0;
      for (std::size_t q = 0; q < 3; ++q) want += value(q, k, i);
      wrong += a[at] != static_cast<double>(want);
    }
  }
  CHECK(wrong == 0);
  const auto avg1 = run.operator()<ring, gs::fusion::none>(gs::op::avg);
  const auto avg2 = run.operator()<tree, gs::fusion::bucket<64 << 10>>(gs::op::avg);
  CHECK(std::memcmp(avg1.data(), avg2.data(), avg1.size() * 8) == 0);
}

TEST_CASE("exact: ranks with different parameters are refused, naming them (not a wrong sum)") {
  gs::testbed::watchdog wd(60, "exact parameters");
  std::vector<std::string> errors(2);
  gs::transport::run_local(2, [&](local& t) {
    std::vector<float> x(1000, 1.0f);
    try {
      if (t.rank() == 0) {
        gs::allreducer<local, gs::algo::ring, gs::fusion::none, gs::compress::exact<64, 256, 4096>>
            ar(t);
        ar.allreduce(std::span<float>(x), gs::op::sum);
      } else {  // the same message sizes, codes at half the scale
        gs::allreducer<local, gs::algo::ring, gs::fusion::none, gs::compress::exact<64, 256, 2048>>
            ar(t);
        ar.allreduce(std::span<float>(x), gs::op::sum);
      }
    } catch (const gs::error& e) {
      errors[t.rank()] = e.what();
    }
  });
  CHECK(errors[0].find("the ranks code with different parameters") != std::string::npos);
  CHECK(errors[0].find("compress::exact<64, 256, 4096> on float") != std::string::npos);
  CHECK(errors[1].find("compress::exact<64, 256, 2048> on float") != std::string::npos);
}

TEST_CASE("exact: error_feedback<exact<32>> carries what 32-bit codes drop") {
  // A block of 1.0 and a value of 0.3 code units (u = 2^-18 at 19 fraction bits): alone
  // each step codes it as 0; with error feedback the residual grows until it is sent, so
  // over 8 steps the sum of the results is within one unit per rank of the true total.
  gs::testbed::watchdog wd(60, "exact error feedback");
  const float u = 0x1p-18f, small = 0.3f * u;
  auto total_of = [&]<class C>() {
    std::vector<double> totals(2);
    std::vector<std::vector<float>> last(2);
    gs::transport::run_local(2, [&](local& t) {
      gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<1 << 20>, C> ar(t);
      std::vector<float> x(256);
      ar.add(std::span<float>(x));
      ar.commit(gs::op::sum);
      for (int step = 0; step < 8; ++step) {
        std::fill(x.begin(), x.end(), 1.0f);
        x[1] = small;
        ar.ready(0);
        ar.wait();
        totals[t.rank()] += x[1];
      }
      last[t.rank()] = x;
    });
    CHECK(last[1] == last[0]);
    CHECK(totals[1] == totals[0]);
    return totals[0];
  };
  const double plain = total_of.operator()<gs::compress::exact<32>>();
  const double fed = total_of.operator()<gs::compress::error_feedback<gs::compress::exact<32>>>();
  const double truth = 8 * 2 * double(small);
  CHECK(plain == 0.0);  // each step alone drops it
  CHECK(std::fabs(fed - truth) <= 2 * double(u));
  CHECK(fed > 0.5 * truth);
}

namespace {

// The one-rank channel, recording its allreduces: the bytes each summed, where they
// start, and whether run()'s own thread made the call. overlaps_wire() says what the
// test sets.
struct piece_channel : fusion_test::solo_channel {
  bool helper = false;
  struct call {
    const std::byte* at;
    std::size_t bytes;
    bool own_thread;
  };
  std::vector<call> calls;
  std::thread::id owner = std::this_thread::get_id();
  bool overlaps_wire() const { return helper; }
  template <class W, class Op>
  void allreduce(std::span<W> s, Op) {
    calls.push_back({reinterpret_cast<const std::byte*>(s.data()), s.size_bytes(),
                     std::this_thread::get_id() == owner});
  }
};
static_assert(gs::compress::channel<piece_channel>);

}  // namespace

TEST_CASE("exact: a large bucket is summed in pieces of whole blocks, on a helper thread") {
  // 5 tensors of odd lengths, 3150001 floats: 24.03 MiB of 64-bit codes, 3 pieces.
  const std::vector<std::size_t> lens = {1300001, 17, 1000000, 3, 849980};
  std::vector<gs::compress::tensor_part> parts;
  std::vector<float> x0;
  for (std::size_t k = 0, at = 0; k < lens.size(); at += lens[k], ++k) {
    parts.push_back({at, lens[k], 0, 0});
    for (std::size_t i = 0; i < lens[k]; ++i) x0.push_back(contribution(0, k, i, 20));
  }
  const std::size_t pieces = gs::algo::tuning::codec_pieces(x0.size() * sizeof(std::int64_t));
  REQUIRE(pieces == 3);
  std::vector<std::vector<float>> out;
  for (bool helper : {false, true}) {
    CAPTURE(helper);
    piece_channel ch;
    ch.helper = helper;
    ch.parts = parts;
    std::vector<float> x = x0;
    gs::compress::no_state st;
    gs::compress::run_codec<gs::compress::exact<64>, float, gs::op::sum_t>(ch, std::span<float>(x),
                                                                           st, nullptr);
    // One call agrees the exponents, then the pieces: contiguous, covering every code
    // once, each a whole number of blocks (a piece edge on a block start).
    REQUIRE(ch.calls.size() == 1 + pieces);
    CHECK(ch.calls[0].own_thread);
    std::size_t bytes = 0;
    for (std::size_t i = 1; i <= pieces; ++i) {
      CHECK(ch.calls[i].at == ch.calls[1].at + bytes);
      CHECK(ch.calls[i].own_thread == !helper);
      const std::size_t first = bytes / sizeof(std::int64_t);
      bool on_edge = first == 0;
      for (const auto& p : parts) on_edge |= first >= p.offset && (first - p.offset) % 256 == 0;
      CHECK(on_edge);
      bytes += ch.calls[i].bytes;
    }
    CHECK(bytes == x0.size() * sizeof(std::int64_t));
    // One rank: each value comes back bitwise (a tensor's blocks span at most 2^20).
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < x.size(); ++i) wrong += !same_bits(x[i], x0[i]);
    CHECK(wrong == 0);
    out.push_back(std::move(x));
  }
  CHECK(differing(out[0], out[1]) == 0);  // on the helper thread or not: the same bits
}

TEST_CASE("exact: error feedback over a bucket in pieces equals it over small buckets") {
  // The residual is written per block as each piece is coded: three steps of
  // error_feedback<exact<64>> (blocks spanning 2^60, so the codes drop bits) give the
  // same bits in one bucket (16.1 MiB of codes: 2 pieces) as in 64 KiB buckets (one
  // piece each).
  gs::testbed::watchdog wd(120, "exact pieces, error feedback");
  using C = gs::compress::error_feedback<gs::compress::exact<64>>;
  const std::vector<std::size_t> big = {1000, 257, 3, 1500001, 5000, 0, 600001, 1, 4100};
  auto run = [&]<class Fusion>() {
    std::vector<std::vector<float>> res(2);
    gs::transport::run_local(2, [&](local& t) {
      gs::allreducer<local, gs::algo::ring, Fusion, C> ar(t);
      std::vector<std::vector<float>> own;
      auto ts = fusion_test::register_model<float>(ar, big, own, gs::op::sum_t{});
      for (int step = 0; step < 3; ++step) {
        for (std::size_t k = 0; k < ts.size(); ++k)
          for (std::size_t i = 0; i < ts[k].size(); ++i)
            ts[k][i] = contribution(t.rank() + 2 * step, k, i, 60);
        for (std::size_t k = ts.size(); k-- > 0;) ar.ready(k);
        ar.wait();
        for (auto& s : ts) res[t.rank()].insert(res[t.rank()].end(), s.begin(), s.end());
      }
    });
    CHECK(differing(res[0], res[1]) == 0);
    return res[0];
  };
  const auto one = run.operator()<gs::fusion::bucket<25 << 20>>();
  const auto small = run.operator()<gs::fusion::bucket<64 << 10>>();
  REQUIRE(gs::algo::tuning::codec_pieces(2110363 * sizeof(std::int64_t)) == 2);
  CHECK(differing(one, small) == 0);
}
