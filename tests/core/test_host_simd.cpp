// SPDX-License-Identifier: Apache-2.0
// The host reductions' AVX2 build (chosen at run time) against the generic SSE2 build:
// bit-identical results for every element type and op, on random bit patterns (NaN,
// infinities and subnormals included), every length around the 64-byte blocks and
// unaligned pointers; the half and bfloat16 vector loops (kernels/host_16bit.hpp)
// against the portable ones on every 16-bit value. Ranks on CPUs with and without AVX2
// or F16C must agree bit for bit; the same for the compression kernels (int8, top-k).
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gradsync/core/dtype.hpp>
#include <gradsync/core/half.hpp>
#include <gradsync/core/op.hpp>
#include <gradsync/kernels/host.hpp>
#include <gradsync/kernels/quantize.hpp>
#include <gradsync/kernels/select.hpp>

namespace gs = gradsync;
namespace gk = gradsync::kernels;

namespace {

template <class T>
std::vector<T> random_bits(std::size_t n, std::mt19937_64& rng) {
  std::vector<T> v(n);
  for (auto& x : v) {
    const std::uint64_t r = rng();
    std::memcpy(static_cast<void*>(&x), &r, sizeof(T));
  }
  return v;
}

// Whether x and y hold the same bytes (memcmp may not be given the null data() of an
// empty vector).
template <class T>
bool same_bytes(const std::vector<T>& x, const std::vector<T>& y) {
  return x.size() == y.size() &&
         (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(T)) == 0);
}

// Index of the first element whose bytes differ (n when none), and both as hex.
template <class T>
std::string first_difference(const std::vector<T>& x, const std::vector<T>& y) {
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::memcmp(&x[i], &y[i], sizeof(T)) != 0) {
      std::uint64_t p = 0, q = 0;
      std::memcpy(&p, &x[i], sizeof(T));
      std::memcpy(&q, &y[i], sizeof(T));
      return "element " + std::to_string(i) + ": " + std::to_string(p) + " vs " + std::to_string(q);
    }
  }
  return "none";
}

template <class T, class Op>
void compare_builds(Op op, std::mt19937_64& rng) {
#if GRADSYNC_HOST_AVX2
  const gk::combine_fn<T, Op> f{};
  for (std::size_t n : {0ul, 1ul, 15ul, 16ul, 17ul, 63ul, 64ul, 65ul, 1000ul, 4099ul}) {
    for (std::size_t shift : {0ul, 1ul}) {
      const auto a = random_bits<T>(n + shift, rng), b = random_bits<T>(n + shift, rng);
      auto x = a, y = a;
      gk::detail::loop_into_generic(x.data() + shift, b.data() + shift, n, f);
      gk::detail::loop_into_avx2(y.data() + shift, b.data() + shift, n, f);
      CHECK_MESSAGE(same_bytes(x, y), "reduce_into " << gs::dtype_name(gs::dtype_of<T>::value)
                                                     << " " << gs::op_name(Op::id) << " n " << n
                                                     << ", " << first_difference(x, y));
      std::vector<T> p(n + shift), q(n + shift);
      gk::detail::loop_to_generic(p.data() + shift, a.data() + shift, b.data() + shift, n, f);
      gk::detail::loop_to_avx2(q.data() + shift, a.data() + shift, b.data() + shift, n, f);
      CHECK_MESSAGE(same_bytes(p, q), "reduce_to " << gs::dtype_name(gs::dtype_of<T>::value) << " "
                                                   << gs::op_name(Op::id) << " n " << n);
      // The public entry point picks one of the two: same bits as well.
      auto z = a;
      gk::reduce_into(z.data() + shift, b.data() + shift, n, op);
      CHECK(same_bytes(z, x));
    }
  }
#else
  (void)op;
  (void)rng;
#endif
}

template <class T>
void all_ops(std::mt19937_64& rng) {
  compare_builds<T>(gs::op::sum, rng);
  compare_builds<T>(gs::op::prod, rng);
  compare_builds<T>(gs::op::min, rng);
  compare_builds<T>(gs::op::max, rng);
}

}  // namespace

TEST_CASE("AVX2 and generic host reductions give the same bits") {
#if GRADSYNC_HOST_AVX2
  if (!gk::detail::has_avx2()) {
    MESSAGE("this CPU has no AVX2: only the generic build runs here");
    return;
  }
#else
  MESSAGE("no AVX2 dispatch in this build (not x86-64 GCC/Clang)");
  return;
#endif
  std::mt19937_64 rng(20261130);
  all_ops<float>(rng);
  all_ops<double>(rng);
  all_ops<gs::half>(rng);
  all_ops<gs::bfloat16>(rng);
  all_ops<std::int32_t>(rng);
  all_ops<std::int64_t>(rng);
}

TEST_CASE("NaN sums and products come out as the canonical NaN, whatever the payloads") {
  const std::uint32_t fin[] = {0x7fc00001u, 0xffd00002u, 0x7f800003u, 0x3f800000u};
  const std::uint32_t fnan = 0x7fffffffu;
  for (std::size_t n : {1ul, 64ul, 1001ul}) {  // the scalar tail and the vector body
    std::vector<float> a(n), b(n), p(n);
    for (std::size_t i = 0; i < n; ++i) {
      std::memcpy(&a[i], &fin[i % 3], 4);        // always a NaN
      std::memcpy(&b[i], &fin[(i + 1) % 4], 4);  // a NaN or 1.0
    }
    auto s = a;
    gk::reduce_into(s.data(), b.data(), n, gs::op::sum);
    gk::reduce_to(p.data(), a.data(), b.data(), n, gs::op::prod);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) {
      bad += std::memcmp(&s[i], &fnan, 4) != 0;
      bad += std::memcmp(&p[i], &fnan, 4) != 0;
    }
    CHECK_MESSAGE(bad == 0, n << " floats");
  }
  const std::uint64_t dnan = 0x7fffffffffffffffull, d1 = 0xfff0000000000123ull,
                      d2 = 0x7ff8000000000456ull;
  std::vector<double> x(100), y(100);
  for (std::size_t i = 0; i < x.size(); ++i) {
    std::memcpy(&x[i], i % 2 ? &d1 : &d2, 8);
    std::memcpy(&y[i], i % 2 ? &d2 : &d1, 8);
  }
  gk::reduce_into(x.data(), y.data(), x.size(), gs::op::sum);
  std::size_t bad = 0;
  for (double v : x) bad += std::memcmp(&v, &dnan, 8) != 0;
  CHECK(bad == 0);
  // NaN in a half sum: the 16-bit canonical NaN.
  std::vector<gs::half> h(40, gs::half::from_bits(0x7e01)), g(40, gs::half::from_bits(0xfc05));
  gk::reduce_into(h.data(), g.data(), h.size(), gs::op::sum);
  for (const auto v : h) CHECK(v.bits == 0x7fffu);
}

#if GRADSYNC_HOST_AVX2
namespace {
// Every value of T against every value shifted by `rot` (mod 2^16): all numbers, all NaN
// payloads, infinities, subnormals and signed zeros appear on both sides.
template <class T, class Op>
void compare_16bit_op(Op op, std::uint16_t rot) {
  constexpr std::size_t n = 1 << 16;
  std::vector<T> a(n), b(n);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = T::from_bits(static_cast<std::uint16_t>(i));
    b[i] = T::from_bits(static_cast<std::uint16_t>(i + rot));
  }
  const auto name = gs::dtype_name(gs::dtype_of<T>::value);
  const gk::combine_fn<T, Op> f{};
  auto want = a, got = a;
  gk::detail::loop_into_generic(want.data(), b.data(), n, f);
  gk::reduce_into(got.data(), b.data(), n, op);
  CHECK_MESSAGE(same_bytes(want, got), "reduce_into " << name << " " << gs::op_name(Op::id)
                                                      << " rot " << rot << ", "
                                                      << first_difference(want, got));
  std::vector<T> to(n);
  gk::reduce_to(to.data(), a.data(), b.data(), n, op);
  CHECK_MESSAGE(same_bytes(want, to), "reduce_to " << name << " " << gs::op_name(Op::id) << " rot "
                                                   << rot << ", " << first_difference(want, to));
}

template <class T>
void compare_16bit_type() {
  for (std::uint16_t rot : {0, 1, 0x3c00, 0x3f80, 0x7c00, 0x7f80, 0x7fc0, 0x8000, 0x0400, 12345}) {
    compare_16bit_op<T>(gs::op::sum, rot);
    compare_16bit_op<T>(gs::op::prod, rot);
    compare_16bit_op<T>(gs::op::min, rot);
    compare_16bit_op<T>(gs::op::max, rot);
  }
  const auto name = gs::dtype_name(gs::dtype_of<T>::value);
  // finalize (avg): multiply by the exact reciprocal (power-of-two ranks) or divide.
  constexpr std::size_t n = 1 << 16;
  std::vector<T> all(n);
  for (std::size_t i = 0; i < n; ++i) all[i] = T::from_bits(static_cast<std::uint16_t>(i));
  for (std::size_t ranks : {1ul, 2ul, 3ul, 4ul, 6ul, 7ul, 8ul, 64ul}) {
    auto want = all, got = all;
    const bool pow2 = (ranks & (ranks - 1)) == 0;
    for (auto& v : want) {
      v = pow2 ? gk::store<T>(gk::load(v) * (1.0f / static_cast<float>(ranks)))
               : gk::finalize_fn<T, gs::op::avg_t>{static_cast<float>(ranks)}(v);
    }
    gk::finalize(got.data(), n, ranks, gs::op::avg);
    CHECK_MESSAGE(same_bytes(want, got), "finalize avg " << name << " ranks " << ranks << ", "
                                                         << first_difference(want, got));
  }
  // Lengths around the 16-element body and unaligned pointers.
  std::mt19937_64 rng(7);
  for (std::size_t len : {16ul, 17ul, 31ul, 32ul, 33ul, 1001ul}) {
    for (std::size_t shift : {0ul, 1ul, 3ul}) {
      const auto a = random_bits<T>(len + shift, rng), b = random_bits<T>(len + shift, rng);
      auto want = a, got = a;
      gk::detail::loop_into_generic(want.data() + shift, b.data() + shift, len,
                                    gk::combine_fn<T, gs::op::sum_t>{});
      gk::reduce_into(got.data() + shift, b.data() + shift, len, gs::op::sum);
      CHECK_MESSAGE(same_bytes(want, got), name << " len " << len << " shift " << shift);
      auto fw = a, fg = a;
      for (std::size_t i = 0; i < len; ++i) {
        fw[shift + i] = gk::finalize_fn<T, gs::op::avg_t>{3.0f}(fw[shift + i]);
      }
      gk::finalize(fg.data() + shift, len, 3, gs::op::avg);
      CHECK_MESSAGE(same_bytes(fw, fg), name << " finalize len " << len << " shift " << shift);
    }
  }
}
}  // namespace

// Casts from and to float: every 16-bit value to float, and floats of every exponent with
// random mantissas (plus NaN payloads, infinities, zeros, subnormals) to 16 bits.
template <class T>
void compare_16bit_casts() {
  const auto name = gs::dtype_name(gs::dtype_of<T>::value);
  constexpr std::size_t n = 1 << 16;
  std::vector<T> all(n);
  for (std::size_t i = 0; i < n; ++i) all[i] = T::from_bits(static_cast<std::uint16_t>(i));
  std::vector<float> want(n), got(n);
  const gk::cast_fn<T, float> up{};
  for (std::size_t i = 0; i < n; ++i) want[i] = up(all[i]);
  gk::cast(got.data(), all.data(), n);
  CHECK_MESSAGE(same_bytes(want, got), name << " -> float, " << first_difference(want, got));

  std::mt19937_64 rng(11);
  std::vector<float> f(1 << 20);
  for (std::size_t i = 0; i < f.size(); ++i) {
    // exponent = i % 256 (every one, NaN/inf included), sign and mantissa random
    const std::uint32_t r = static_cast<std::uint32_t>(rng());
    const std::uint32_t bits = (r & 0x807fffffu) | (static_cast<std::uint32_t>(i % 256) << 23);
    std::memcpy(&f[i], &bits, 4);
  }
  const gk::cast_fn<float, T> down{};
  std::vector<T> w(f.size()), g(f.size());
  for (std::size_t i = 0; i < f.size(); ++i) w[i] = down(f[i]);
  gk::cast(g.data(), f.data(), f.size());
  CHECK_MESSAGE(same_bytes(w, g), "float -> " << name << ", " << first_difference(w, g));
  // finalize_cast (avg's division fused into the conversion) == finalize, then cast.
  for (std::size_t ranks : {1ul, 2ul, 3ul, 4ul, 6ul, 7ul, 8ul}) {
    for (std::size_t len : {f.size(), std::size_t{16}, std::size_t{37}}) {
      std::vector<float> div(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(len));
      gk::finalize(div.data(), len, ranks, gs::op::avg);
      std::vector<T> w2(len), g2(len);
      gk::cast(w2.data(), div.data(), len);
      gk::finalize_cast(g2.data(), f.data(), len, ranks, gs::op::avg);
      CHECK_MESSAGE(same_bytes(w2, g2), "finalize_cast float -> " << name << " ranks " << ranks
                                                                  << " len " << len << ", "
                                                                  << first_difference(w2, g2));
    }
    std::vector<double> d(1000);  // the portable path: double -> T
    for (std::size_t i = 0; i < d.size(); ++i) d[i] = static_cast<double>(f[i]) * 1.000001;
    auto dd = d;
    gk::finalize(dd.data(), dd.size(), ranks, gs::op::avg);
    std::vector<T> w3(d.size()), g3(d.size());
    gk::cast(w3.data(), dd.data(), dd.size());
    gk::finalize_cast(g3.data(), d.data(), d.size(), ranks, gs::op::avg);
    CHECK_MESSAGE(same_bytes(w3, g3), "finalize_cast double -> " << name << " ranks " << ranks);
  }
  for (std::size_t len : {16ul, 17ul, 31ul, 33ul}) {  // tails and unaligned starts
    for (std::size_t shift : {0ul, 1ul, 5ul}) {
      std::vector<T> b(len + shift), ref(len + shift);
      gk::cast(b.data() + shift, f.data() + 3, len);
      for (std::size_t i = 0; i < len; ++i) ref[shift + i] = down(f[3 + i]);
      CHECK_MESSAGE(same_bytes(ref, b), name << " len " << len << " shift " << shift);
      std::vector<float> back(len + shift), bref(len + shift);
      gk::cast(back.data() + shift, ref.data() + shift, len);
      for (std::size_t i = 0; i < len; ++i) bref[shift + i] = up(ref[shift + i]);
      CHECK_MESSAGE(same_bytes(bref, back), name << " back len " << len << " shift " << shift);
    }
  }
}

TEST_CASE("half and bfloat16 vector loops give the portable code's bits on every value") {
  if (gk::detail::has_16bit_loops<gs::half>()) {
    compare_16bit_type<gs::half>();
    compare_16bit_casts<gs::half>();
  } else {
    MESSAGE("this CPU has no AVX2 + F16C: only the portable half loops run here");
  }
  if (gk::detail::has_16bit_loops<gs::bfloat16>()) {
    compare_16bit_type<gs::bfloat16>();
    compare_16bit_casts<gs::bfloat16>();
  } else {
    MESSAGE("this CPU has no AVX2: only the portable bfloat16 loops run here");
  }
}
#endif

TEST_CASE("compression kernels: the AVX2 and generic builds give the same codes, scales, picks") {
#if GRADSYNC_HOST_AVX2
  if (!gk::detail::has_avx2()) {
    MESSAGE("this CPU has no AVX2: only the generic build runs here");
    return;
  }
  std::mt19937_64 rng(20261201);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (std::size_t n : {std::size_t{1}, std::size_t{63}, std::size_t{256}, std::size_t{1000},
                        std::size_t{4097}, std::size_t{100003}}) {
    CAPTURE(n);
    constexpr std::size_t block = 256;
    const std::size_t blocks = (n + block - 1) / block;
    std::vector<float> x(n), add(n);
    for (auto& v : x) v = normal(rng);
    for (auto& v : add) v = normal(rng) * 0.01f;
    if (n > 10) {  // a zero and a tie of magnitudes
      x[7] = 0.0f;
      x[9] = -x[8];
    }
    // absmax with the residual added, both builds.
    std::vector<float> xa = x, xb = x, sa(blocks), sb(blocks);
    gk::detail::absmax<true>(sa.data(), xa.data(), add.data(), n, block);
    gk::detail::absmax_avx2<true>(sb.data(), xb.data(), add.data(), n, block);
    CHECK(std::memcmp(xa.data(), xb.data(), n * sizeof(float)) == 0);
    CHECK(std::memcmp(sa.data(), sb.data(), blocks * sizeof(float)) == 0);
    // codes and residuals, then the decode.
    std::vector<std::int8_t> ca(n), cb(n);
    std::vector<float> ra(n), rb(n), da(n), db(n);
    gk::detail::quantize(ca.data(), ra.data(), xa.data(), sa.data(), n, block, 42);
    gk::detail::quantize_avx2(cb.data(), rb.data(), xa.data(), sa.data(), n, block, 42);
    CHECK(ca == cb);
    CHECK(std::memcmp(ra.data(), rb.data(), n * sizeof(float)) == 0);
    gk::detail::dequantize(da.data(), ca.data(), sa.data(), n, block, 42, 3);
    gk::detail::dequantize_avx2(db.data(), ca.data(), sa.data(), n, block, 42, 3);
    CHECK(std::memcmp(da.data(), db.data(), n * sizeof(float)) == 0);
    // top-k's candidate pass at a threshold near the 1 % point, and at 0 (everything).
    for (std::uint32_t threshold : {gk::magnitude_key(2.3f), std::uint32_t{0}}) {
      std::vector<std::pair<std::uint32_t, std::uint32_t>> pa, pb;
      std::vector<float> ya = x, yb = x;
      gk::detail::collect_generic(pa, ya.data(), add.data(), n, threshold);
      gk::detail::collect_avx2(pb, yb.data(), add.data(), n, threshold);
      CHECK(pa == pb);
      CHECK(std::memcmp(ya.data(), yb.data(), n * sizeof(float)) == 0);
      std::size_t want = 0;
      for (std::size_t i = 0; i < n; ++i) want += gk::magnitude_key(ya[i]) >= threshold;
      CHECK(pa.size() == want);
    }
  }
#else
  MESSAGE("no AVX2 dispatch in this build (not x86-64 GCC/Clang)");
#endif
}
