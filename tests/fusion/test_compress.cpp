// SPDX-License-Identifier: Apache-2.0
// Compression (compress::fp16, compress::bf16) in the allreducer: float and double
// buckets travel as 16-bit floats (half the bytes on the wire, measured), the reduction
// happens in that precision (a value half cannot hold comes back rounded), avg divides
// before converting (no overflow where the average fits), other types pass unchanged,
// results are exact for inputs the wire type holds and bitwise equal on every rank, for
// every fusion mode; the timeline and the summary show the conversions.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include <gradsync/gradsync.hpp>

#include "double_as_float.hpp"
#include "fusion_helpers.hpp"
#include "json_check.hpp"
#include "watchdog.hpp"

namespace gs = gradsync;
using local = gs::transport::local;

namespace {

// Rank r's value of element i: small integers, exact in half and bfloat16, and so are
// their sums over up to 6 ranks (at most 6 * 40 < 256, bfloat16's exact-integer limit).
float value(std::size_t r, std::size_t i) {
  return static_cast<float>((i * 7 + r * 3) % 37 + 1);
}

template <class Compression, class Fusion, class Algo = gs::algo::ring>
void exact_sums(std::size_t n) {
  CAPTURE(n);
  CAPTURE(std::string(Compression::name));
  CAPTURE(std::string(Fusion::name));
  const std::vector<std::size_t> sizes = {1000, 3, 0, 4097, 17, 20000};
  std::vector<std::uint64_t> digest(n);
  std::vector<std::size_t> wrong(n, 1);
  gs::transport::run_local(n, [&](local& t) {
    gs::allreducer<local, Algo, Fusion, Compression> ar(t);
    std::vector<std::vector<float>> own;
    const auto ts = fusion_test::register_model<float>(ar, sizes, own, gs::op::sum);
    std::size_t bad = 0;
    for (int step = 0; step < 2; ++step) {
      for (std::size_t k = 0; k < sizes.size(); ++k) {
        auto s = ts[k];
        for (std::size_t i = 0; i < s.size(); ++i) s[i] = value(t.rank(), i + k * 100000);
      }
      for (std::size_t k = sizes.size(); k-- > 0;) ar.ready(k);
      ar.wait();
      for (std::size_t k = 0; k < sizes.size(); ++k) {
        auto s = ts[k];
        for (std::size_t i = 0; i < s.size(); ++i) {
          float want = 0;
          for (std::size_t r = 0; r < n; ++r) want += value(r, i + k * 100000);
          bad += s[i] != want;
        }
      }
    }
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      auto s = ts[k];
      h = gs::testing::fnv1a64(s.data(), s.size_bytes(), h);
    }
    digest[t.rank()] = h;
    wrong[t.rank()] = bad;
  });
  for (std::size_t r = 0; r < n; ++r) {
    CHECK(wrong[r] == 0);
    CHECK(digest[r] == digest[0]);
  }
}

// One float tensor of `count` elements, every rank contributing `v`; returns rank 0's
// result and the bytes it sent.
template <class Compression, class Op = gs::op::sum_t>
std::pair<std::vector<float>, std::size_t> reduce_constant(std::size_t n, std::size_t count,
                                                           float v, Op op = {}) {
  std::vector<float> out;
  std::size_t wire = 0;
  gs::transport::run_local(n, [&](local& t) {
    gs::allreducer<local, gs::algo::ring, gs::fusion::none, Compression> ar(t);
    std::vector<float> x(count, v);
    ar.allreduce(std::span<float>(x), op);
    if (t.rank() == 0) {
      out = x;
      wire = ar.last_stats().bytes_wire;
    }
  });
  return {out, wire};
}

}  // namespace

TEST_CASE("compression: exact sums, bitwise equal on every rank, for every fusion mode") {
  gs::testbed::watchdog wd(120, "compression exact");
  using packed = gs::fusion::bucket<16384>;
  using zero = gs::fusion::zero_copy<16384>;
  for (std::size_t n : {1, 2, 3, 4}) {
    exact_sums<gs::compress::fp16, packed>(n);
    exact_sums<gs::compress::bf16, packed>(n);
    exact_sums<gs::compress::fp16, zero>(n);
    exact_sums<gs::compress::bf16, gs::fusion::none>(n);
  }
  exact_sums<gs::compress::fp16, packed, gs::algo::auto_select>(3);
  exact_sums<gs::compress::bf16, zero, gs::algo::halving_doubling>(4);
}

TEST_CASE("compression: the wire carries 16-bit values (half the bytes, half's rounding)") {
  gs::testbed::watchdog wd(60, "compression wire");
  constexpr std::size_t count = 10000;
  const auto [plain, plain_wire] = reduce_constant<gs::compress::none>(2, count, 1.0f);
  const auto [h, h_wire] = reduce_constant<gs::compress::fp16>(2, count, 1.0f);
  const auto [b, b_wire] = reduce_constant<gs::compress::bf16>(2, count, 1.0f);
  CHECK(plain[0] == 2.0f);
  CHECK(h[0] == 2.0f);
  CHECK(b[0] == 2.0f);
  // Both rings send 2(n-1)/n of the payload plus the same call header.
  REQUIRE(plain_wire > count * 2);
  CHECK(plain_wire - h_wire == count * 2);  // 4 -> 2 bytes per element
  CHECK(plain_wire - b_wire == count * 2);
  // 1 + 2^-12 is a float; half keeps 10 fraction bits, bfloat16 7: both round it to 1.
  const float v = 1.0f + std::ldexp(1.0f, -12);
  CHECK(reduce_constant<gs::compress::none>(2, 64, v).first[0] == 2 * v);
  CHECK(reduce_constant<gs::compress::fp16>(2, 64, v).first[0] == 2.0f);
  CHECK(reduce_constant<gs::compress::bf16>(2, 64, v).first[0] == 2.0f);
  // 1 + 2^-9 is a half but not a bfloat16.
  const float u = 1.0f + std::ldexp(1.0f, -9);
  CHECK(reduce_constant<gs::compress::fp16>(2, 64, u).first[0] == 2 * u);
  CHECK(reduce_constant<gs::compress::bf16>(2, 64, u).first[0] == 2.0f);
}

TEST_CASE("compression: avg divides before converting, so the wire does not overflow") {
  gs::testbed::watchdog wd(60, "compression avg");
  // Four ranks of 40000: the sum (160000) is past half's 65504, the average is not.
  const auto [avg, w1] = reduce_constant<gs::compress::fp16>(4, 100, 40000.0f, gs::op::avg);
  CHECK(avg[0] == 40000.0f);
  CHECK(avg[99] == 40000.0f);
  const auto [sum, w2] = reduce_constant<gs::compress::fp16>(4, 100, 40000.0f, gs::op::sum);
  CHECK(std::isinf(sum[0]));  // what a sum on a 16-bit wire does: documented
  // Three ranks: rank r contributes 3(r + 1); divided first: 1 + 2 + 3 = 6 = the average.
  std::vector<float> got(3);
  gs::transport::run_local(3, [&](local& t) {
    gs::allreducer<local, gs::algo::tree, gs::fusion::none, gs::compress::bf16> ar(t);
    std::vector<float> x(50, 3.0f * static_cast<float>(t.rank() + 1));
    ar.allreduce(std::span<float>(x), gs::op::avg);
    got[t.rank()] = x[49];
  });
  CHECK(got == std::vector<float>{6.0f, 6.0f, 6.0f});
}

TEST_CASE("compression: double travels as 16 bits, integers and halves unchanged") {
  gs::testbed::watchdog wd(60, "compression types");
  std::vector<std::size_t> int_wire(2), dbl_wire(2), half_wire(2), bad(2, 1);
  gs::transport::run_local(2, [&](local& t) {
    gs::allreducer<local, gs::algo::ring, gs::fusion::none, gs::compress::fp16> ar(t);
    const std::int32_t big = 1 << 24;  // no 16-bit float holds 2^24 + 1
    std::vector<std::int32_t> i(1000, big + 1);
    ar.allreduce(std::span<std::int32_t>(i), gs::op::sum);
    int_wire[t.rank()] = ar.last_stats().bytes_wire;
    std::vector<double> d(1000, 1.0 + std::ldexp(1.0, -12));
    ar.allreduce(std::span<double>(d), gs::op::sum);
    dbl_wire[t.rank()] = ar.last_stats().bytes_wire;
    std::vector<gs::half> h(1000, gs::half(3.0f));
    ar.allreduce(std::span<gs::half>(h), gs::op::sum);
    half_wire[t.rank()] = ar.last_stats().bytes_wire;
    bad[t.rank()] = (i[0] != 2 * (big + 1)) + (i[999] != 2 * (big + 1)) + (d[0] != 2.0) +
                    (d[999] != 2.0) + !(h[0] == gs::half(6.0f));
  });
  CHECK(bad == std::vector<std::size_t>{0, 0});
  // 2 ranks: a ring sends the payload once plus the same call header.
  CHECK(int_wire[0] - dbl_wire[0] == 1000 * (4 - 2));  // int32 as is, double as half
  CHECK(dbl_wire[0] == half_wire[0]);                  // both 2 bytes per element
}

TEST_CASE("compression: grouped and async calls, the summary and the timeline show it") {
  gs::testbed::watchdog wd(60, "compression observe");
  const char* dir = std::getenv("TMPDIR");
  const std::string path = std::string(dir && *dir ? dir : "/tmp") + "/gradsync_compress_" +
                           std::to_string(::getpid()) + ".json";
  std::vector<std::string> summary(2);
  std::vector<std::size_t> bad(2, 1);
  gs::transport::run_local(2, [&](local& t) {
    gs::allreducer_options o;
    o.timeline = path;
    gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<1 << 20>, gs::compress::bf16> ar(t, o);
    std::vector<float> a(3000, 1.5f), b(70, -2.0f);
    ar.allreduce(std::vector<std::span<float>>{std::span<float>(a), std::span<float>(b)},
                 gs::op::sum);
    std::vector<float> c(5000, 0.25f);
    ar.allreduce_async(std::span<float>(c), gs::op::max).wait();
    bad[t.rank()] = (a[0] != 3.0f) + (a[2999] != 3.0f) + (b[69] != -4.0f) + (c[4999] != 0.25f);
    summary[t.rank()] = ar.summary();
    CHECK(ar.total_stats().compress_seconds > 0);
  });
  CHECK(bad == std::vector<std::size_t>{0, 0});
  CAPTURE(summary[0]);
  CHECK(summary[0].find("ring+bucket+bf16") != std::string::npos);
  CHECK(summary[0].find("compress ") != std::string::npos);
  const std::string text = gs::testbed::read_file(gs::observe::timeline::path_for(path, 0));
  CHECK(gs::testbed::json_checker(text).valid());
  const auto names = gs::testbed::event_names(text);
  CHECK(names.count("compress") == 1);
  CHECK(names.count("decompress") == 1);
  std::remove(gs::observe::timeline::path_for(path, 0).c_str());
  std::remove(gs::observe::timeline::path_for(path, 1).c_str());
}

TEST_CASE("compression: ranks with different policies disagree at commit, naming it") {
  // fp16 and bf16 send the same bytes per element: without the check the sums would be
  // of mixed encodings, with no error anywhere.
  gs::testbed::watchdog wd(60, "compression mismatch");
  std::vector<std::string> errors(2);
  gs::transport::run_local(2, [&](local& t) {
    std::vector<float> g(1000, 1.0f);
    auto commit = [&](auto& ar) {
      ar.add(std::span<float>(g));
      try {
        ar.commit(gs::op::sum);
      } catch (const gs::error& e) {
        errors[t.rank()] = e.what();
      }
    };
    if (t.rank() == 0) {
      gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<1 << 20>, gs::compress::fp16> ar(t);
      commit(ar);
    } else {
      gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<1 << 20>, gs::compress::bf16> ar(t);
      commit(ar);
    }
  });
  for (const auto& e : errors) {
    CAPTURE(e);
    CHECK(e.find("different plan parameters") != std::string::npos);
    CHECK(e.find("compression policy") != std::string::npos);
  }
}

TEST_CASE("compression: a policy outside the library is one file (its codec)") {
  gs::testbed::watchdog wd(60, "compression: double_as_float");
  static_assert(gs::compress::compression_policy<compress_test::double_as_float>);
  static_assert(gs::compress::codec_for<compress_test::double_as_float, double, gs::op::sum_t>);
  constexpr std::size_t ranks = 3, count = 5000;
  std::vector<std::vector<double>> got(ranks);
  std::vector<std::size_t> wire(ranks), plain_wire(ranks);
  std::mutex m;
  gs::transport::run_local(ranks, [&](local& t) {
    std::vector<double> x(count), y(count);
    for (std::size_t i = 0; i < count; ++i) x[i] = y[i] = double(value(t.rank(), i));
    gs::allreducer<local, gs::algo::ring, gs::fusion::none, compress_test::double_as_float> ar(t);
    gs::allreducer<local, gs::algo::ring> plain(t);
    ar.allreduce(std::span<double>(x), gs::op::sum);
    plain.allreduce(std::span<double>(y), gs::op::sum);
    std::lock_guard lk(m);
    got[t.rank()] = x;
    wire[t.rank()] = ar.last_stats().bytes_wire;
    plain_wire[t.rank()] = plain.last_stats().bytes_wire;
    CHECK(ar.last_stats().compression == "double_as_float");
  });
  for (std::size_t r = 0; r < ranks; ++r) {
    CAPTURE(r);
    CHECK(got[r] == got[0]);  // bitwise: the same wire bits decoded the same way
    // The same ring chunks at 4 instead of 8 bytes per element, plus the same call
    // headers (3 ranks: two Bruck rounds of one 48-byte header): plain = 2 * payload + h,
    // compressed = payload + h.
    CHECK(2 * wire[r] - plain_wire[r] == 2 * sizeof(gs::call_header));
  }
  for (std::size_t i = 0; i < count; ++i) {
    double want = 0;
    for (std::size_t r = 0; r < ranks; ++r) want += double(value(r, i));
    CHECK(got[0][i] == want);  // small integers: exact in float
  }
}
