// SPDX-License-Identifier: Apache-2.0
// The lossy codecs (compress::int8, compress::topk) and error feedback: their kernels
// exact where the scheme is exact (int8 of values on its grid, top-k's picks and
// tie-breaks against a full sort), the residual equal to input minus what was sent,
// carried to the next step and started afresh with a new plan, after a non-finite step
// and on reset_compression_state(); through the allreducer
// on the local transport the results are bitwise equal on every rank and the wire bytes
// are the ones the messages carried.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include <gradsync/gradsync.hpp>
#include <gradsync/kernels/lowrank.hpp>
#include <gradsync/kernels/radix_select.hpp>
#include <gradsync/testing/exact_inputs.hpp>

#include "solo_channel.hpp"
#include "watchdog.hpp"

namespace gs = gradsync;
using local = gs::transport::local;

namespace {

using fusion_test::solo_channel;

// A deterministic pseudo-random float in [-1, 1) from (seed, i).
float noise(std::uint64_t seed, std::size_t i) {
  std::uint64_t z = seed * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull;
  z ^= z >> 31;
  z *= 0x94d049bb133111ebull;
  z ^= z >> 29;
  return static_cast<float>(static_cast<double>(z >> 40) / double(1ull << 23) - 1.0);
}

// The top-k reference: a full sort by (|x| descending, index ascending).
std::vector<std::uint32_t> topk_by_sort(const std::vector<float>& x, std::size_t k) {
  std::vector<std::uint32_t> idx(x.size());
  std::iota(idx.begin(), idx.end(), 0u);
  std::stable_sort(idx.begin(), idx.end(), [&](std::uint32_t a, std::uint32_t b) {
    return std::fabs(x[a]) > std::fabs(x[b]);
  });
  idx.resize(k);
  std::sort(idx.begin(), idx.end());
  return idx;
}

template <class C>
struct run_result {
  std::vector<std::vector<float>> out;  // per rank, per step: the bucket after the call
  std::vector<std::uint64_t> digest;
  std::vector<std::size_t> wire;  // bytes_wire of the last call, per rank
};

// `steps` steps of one registered tensor of `count` floats over n local ranks; rank r's
// input at step s is in(r, s, i). Returns each rank's result of the last step.
template <class C, class Fusion = gs::fusion::bucket<1 << 20>, class Op = gs::op::sum_t, class In>
run_result<C> run_steps(std::size_t n, std::size_t count, std::size_t steps, In in, Op op = {}) {
  run_result<C> res;
  res.out.resize(n);
  res.digest.resize(n);
  res.wire.resize(n);
  std::mutex m;
  gs::transport::run_local(n, [&](local& t) {
    gs::allreducer<local, gs::algo::ring, Fusion, C> ar(t);
    std::vector<float> g(count);
    ar.add(std::span<float>(g), "g");
    ar.commit(op);
    for (std::size_t s = 0; s < steps; ++s) {
      for (std::size_t i = 0; i < count; ++i) g[i] = in(t.rank(), s, i);
      ar.ready(0);
      ar.wait();
    }
    std::lock_guard lk(m);
    res.out[t.rank()] = g;
    res.digest[t.rank()] = gs::testing::fnv1a64(g.data(), g.size() * sizeof(float));
    res.wire[t.rank()] = ar.last_stats().bytes_wire;
  });
  return res;
}

}  // namespace

TEST_CASE("int8: values on its grid code and decode exactly; off it the residual is the loss") {
  // 3 ranks: L = 42 levels; scale 42/16 per block, so the step is 1/16 (exact).
  constexpr int levels = 42;
  constexpr std::size_t count = 1000, block = 256;
  std::vector<float> x(count);
  for (std::size_t i = 0; i < count; ++i) {
    const int c = static_cast<int>((i * 13) % (2 * levels + 1)) - levels;
    x[i] = static_cast<float>(c) / 16.0f;
  }
  for (std::size_t b = 0; b < count; b += block) x[b] = levels / 16.0f;  // each block's max
  std::vector<float> scales((count + block - 1) / block);
  gs::kernels::block_absmax(scales.data(), x.data(), count, block);
  for (float s : scales) CHECK(s == levels / 16.0f);
  std::vector<std::int8_t> codes(count);
  std::vector<float> res(count, -1.0f), back(count);
  gs::kernels::quantize_blocks(codes.data(), res.data(), x.data(), scales.data(), count, block,
                               levels);
  gs::kernels::dequantize_blocks(back.data(), codes.data(), scales.data(), count, block, levels, 1);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < count; ++i) {
    bad += codes[i] != static_cast<std::int8_t>(std::lround(x[i] * 16.0f));
    bad += back[i] != x[i] || res[i] != 0.0f;
  }
  CHECK(bad == 0);
  // Off the grid: ties go to even, the residual is exactly x minus the decoded value.
  const float s = 42.0f;  // step 1
  const float y[4] = {0.5f, 1.5f, -2.5f, 42.0f};
  std::int8_t q[4];
  float r[4];
  gs::kernels::quantize_blocks(q, r, y, &s, 4, 8, levels);
  CHECK(q[0] == 0);
  CHECK(q[1] == 2);
  CHECK(q[2] == -2);
  CHECK(q[3] == 42);
  CHECK(r[0] == 0.5f);
  CHECK(r[1] == -0.5f);
  CHECK(r[2] == -0.5f);
  CHECK(r[3] == 0.0f);
  // A NaN poisons its block's scale to Inf (never a silently finite block).
  std::vector<float> z(16, 1.0f);
  z[3] = std::nanf("");
  float sc[2];
  gs::kernels::block_absmax(sc, z.data(), 16, 8);
  CHECK(std::isinf(sc[0]));
  CHECK(sc[1] == 1.0f);
}

TEST_CASE("topk: the k largest magnitudes, ties to the lower index, as a full sort picks") {
  const std::vector<float> x = {0.5f, -3.0f, 2.0f, 3.0f, -2.0f, 0.0f, 3.0f, 1.0f};
  std::vector<std::uint32_t> idx(4);
  gs::kernels::topk_indices(idx.data(), x.data(), x.size(), 4);
  // |3| at 1, 3, 6; then |2| at 2 and 4: the lower index (2) wins the tie.
  CHECK(idx == std::vector<std::uint32_t>{1, 2, 3, 6});
  for (std::size_t count : {2u, 10u, 1000u, 100000u, 300001u}) {
    for (std::size_t levels : {3u, 1000u, 0u}) {  // many ties, some, none
      std::vector<float> v(count);
      for (std::size_t i = 0; i < count; ++i) {
        const float u = noise(count + levels, i);
        v[i] = levels ? std::round(u * static_cast<float>(levels)) : u;
      }
      for (std::size_t k : {std::size_t{1}, count / 100 + 1, count / 3 + 1}) {
        CAPTURE(count);
        CAPTURE(levels);
        CAPTURE(k);
        std::vector<std::uint32_t> got(k);
        gs::kernels::topk_indices(got.data(), v.data(), count, k);
        CHECK(got == topk_by_sort(v, k));
      }
    }
  }
}

namespace {
// kernels/select.cuh's steps run one after another on the CPU: a histogram per key byte of
// the keys still in the running, radix_narrow, then the tie ranks and the keep flags in
// index order (what DeviceScan and DeviceSelect compute).
template <class T>
std::vector<std::uint32_t> topk_as_device(const std::vector<T>& x, std::size_t k) {
  using K = gs::kernels::magnitude_key_t<T>;
  gs::kernels::radix_state<K> s{0, 0, k};
  for (unsigned pass = 0; pass < gs::kernels::radix_passes<K>; ++pass) {
    std::vector<unsigned long long> hist(gs::kernels::radix_bins);
    for (const T v : x) {
      const K key = gs::kernels::magnitude_key(v);
      if (gs::kernels::radix_in_running(key, s)) ++hist[gs::kernels::radix_digit(key, pass)];
    }
    gs::kernels::radix_narrow(s, hist.data(), pass);
  }
  std::vector<std::uint32_t> out;
  std::size_t tie_rank = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const K key = gs::kernels::magnitude_key(x[i]);
    if (gs::kernels::topk_keeps(key, s.prefix, tie_rank, s.want))
      out.push_back(static_cast<std::uint32_t>(i));
    tie_rank += key == s.prefix;
  }
  return out;
}

template <class T>
void check_topk_as_device() {
  for (std::size_t count : {2u, 10u, 1000u, 100000u}) {
    for (std::size_t levels : {3u, 1000u, 0u}) {  // many ties, some, none
      std::vector<T> v(count);
      for (std::size_t i = 0; i < count; ++i) {
        const T u = static_cast<T>(noise(count + levels, i));
        v[i] = levels ? std::round(u * static_cast<T>(levels)) : u;
      }
      for (std::size_t k : {std::size_t{1}, count / 100 + 1, count / 3 + 1, count - 1}) {
        CAPTURE(count);
        CAPTURE(levels);
        CAPTURE(k);
        std::vector<std::uint32_t> host(k);
        gs::kernels::topk_indices(host.data(), v.data(), count, k);
        CHECK(topk_as_device(v, k) == host);
      }
    }
  }
}
}  // namespace

TEST_CASE("topk: the device's radix select picks the host's indices (kernels/select.cuh)") {
  check_topk_as_device<float>();
  check_topk_as_device<double>();
  // Signs, zeros and an Inf: keys order magnitudes, and the tie at |2| goes low.
  const std::vector<float> x = {-0.0f, 2.0f, -INFINITY, -2.0f, 0.0f, 1.0f, 2.0f};
  CHECK(topk_as_device(x, 2) == std::vector<std::uint32_t>{1, 2});
  CHECK(topk_as_device(x, 4) == std::vector<std::uint32_t>{1, 2, 3, 6});
}

namespace {
template <std::size_t R, class T>
void check_lowrank_functors(std::size_t rows, std::size_t cols) {
  CAPTURE(R);
  CAPTURE(rows);
  CAPTURE(cols);
  namespace k = gs::kernels;
  std::vector<T> m(rows * cols), qt(R * cols), qmine(R * cols);
  for (std::size_t i = 0; i < m.size(); ++i) m[i] = static_cast<T>(noise(rows + cols, i));
  k::seeded_uniform(qt.data(), qt.size(), 7);
  for (std::size_t i = 0; i < qmine.size(); ++i) qmine[i] = k::seeded_value<T>(9, i);
  // P = M Q: the host loop against the lanes and their finish, element by element.
  std::vector<T> pt(R * rows), pt_f(R * rows);
  k::lowrank_mq<R>(pt.data(), m.data(), static_cast<const T*>(nullptr), qt.data(), rows, cols);
  constexpr std::size_t w = k::lowrank_lanes<T>;
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t c = 0; c < R; ++c) {
      T lanes[w];
      for (std::size_t l = 0; l < w; ++l)
        lanes[l] = k::mq_lane(&m[i * cols], &qt[c * cols], cols, l);
      pt_f[c * rows + i] = k::mq_finish(lanes, &m[i * cols], &qt[c * cols], cols);
    }
  }
  CHECK(std::memcmp(pt.data(), pt_f.data(), pt.size() * sizeof(T)) == 0);
  k::orthonormalise(pt.data(), rows, R);
  // Q = M^T P.
  std::vector<T> q2(R * cols), q2_f(R * cols);
  k::lowrank_mtp<R>(q2.data(), m.data(), pt.data(), rows, cols);
  for (std::size_t c = 0; c < R; ++c) {
    for (std::size_t j = 0; j < cols; ++j)
      q2_f[c * cols + j] = k::mtp_element(m.data(), pt.data(), rows, cols, c, j);
  }
  CHECK(std::memcmp(q2.data(), q2_f.data(), q2.size() * sizeof(T)) == 0);
  // M = P Q^T * scale, with and without the residual.
  for (bool with_residual : {false, true}) {
    CAPTURE(with_residual);
    std::vector<T> a = m, b = m, ra(m.size()), rb(m.size());
    T* res_a = with_residual ? ra.data() : nullptr;
    T* res_b = with_residual ? rb.data() : nullptr;
    k::lowrank_pqt<R>(a.data(), res_a, pt.data(), q2.data(), qmine.data(), rows, cols, T(1) / T(3));
    for (std::size_t i = 0; i < rows; ++i) {
      for (std::size_t j = 0; j < cols; ++j)
        k::pqt_element<R>(b.data(), res_b, pt.data(), q2.data(), qmine.data(), rows, cols,
                          T(1) / T(3), i, j);
    }
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
    CHECK(std::memcmp(ra.data(), rb.data(), ra.size() * sizeof(T)) == 0);
  }
}
}  // namespace

TEST_CASE("powersgd: the device kernels' per-element functors give the host loops' bits") {
  // Columns with and without a tail past the lanes (8 floats, 4 doubles).
  for (const auto& [rows, cols] :
       std::vector<std::pair<std::size_t, std::size_t>>{{7, 64}, {33, 29}, {100, 37}, {5, 3}}) {
    check_lowrank_functors<1, float>(rows, cols);
    check_lowrank_functors<4, float>(rows, cols);
    check_lowrank_functors<4, double>(rows, cols);
  }
}

TEST_CASE("error feedback: the residual is input minus what was sent, carried, reset") {
  // The codecs alone on one rank: x comes back as what this rank's x decodes to.
  using ef = gs::compress::error_feedback<gs::compress::int8<64>>;
  using codec = ef::codec<float, gs::op::sum_t>;
  solo_channel ch;
  codec::state st;
  std::vector<float> x(200), first(200);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = first[i] = noise(7, i);
  gs::compress::run_codec<ef, float, gs::op::sum_t>(ch, std::span<float>(x), st, nullptr);
  REQUIRE(st.residual.size() == x.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < x.size(); ++i) bad += st.residual[i] != first[i] - x[i];
  CHECK(bad == 0);
  CHECK(std::any_of(st.residual.begin(), st.residual.end(), [](float r) { return r != 0; }));
  // The next step sends gradient + residual: a zero gradient sends the residual.
  const std::vector<float> carried = st.residual;
  std::fill(x.begin(), x.end(), 0.0f);
  gs::compress::run_codec<ef, float, gs::op::sum_t>(ch, std::span<float>(x), st, nullptr);
  for (std::size_t i = 0; i < x.size(); ++i) bad += st.residual[i] != carried[i] - x[i];
  CHECK(bad == 0);

  // A cast through the generic path (encode / decode codecs): the residual is what half
  // rounding lost.
  using ef16 = gs::compress::error_feedback<gs::compress::fp16>;
  ef16::codec<float, gs::op::sum_t>::state st16;
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = first[i] = 1.0f + noise(9, i);
  gs::compress::run_codec<ef16, float, gs::op::sum_t>(ch, std::span<float>(x), st16, nullptr);
  for (std::size_t i = 0; i < x.size(); ++i) {
    bad += x[i] != static_cast<float>(gs::half(first[i]));
    bad += st16.residual[i] != first[i] - x[i];
  }
  CHECK(bad == 0);
  CHECK(ef16::name == "ef_fp16");

  // Through the allreducer, 2 ranks, top-k 1 % of 2000 (k = 20): step 0 sends indices
  // 0..19 (the largest), step 1 (zero gradient) sends what step 0 left: 20..39.
  auto in = [](std::size_t, std::size_t s, std::size_t i) {
    return s == 0 && i < 40 ? static_cast<float>(100 - i) : 0.0f;
  };
  using C = gs::compress::error_feedback<gs::compress::topk<10>>;
  for (std::size_t steps : {1u, 2u, 3u}) {
    CAPTURE(steps);
    const auto r = run_steps<C>(2, 2000, steps, in);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < 2000; ++i) {
      const bool sent = (steps == 1 && i < 20) || (steps == 2 && i >= 20 && i < 40);
      wrong += r.out[0][i] != (sent ? 2.0f * static_cast<float>(100 - i) : 0.0f);
    }
    CHECK(wrong == 0);
    CHECK(r.digest[1] == r.digest[0]);
    // The allgather: one block of 20 values and 20 indices to the other rank.
    CHECK(r.wire[0] == 20 * 8);
  }
  // Without error feedback the second step sends nothing; a new plan (a new allreducer)
  // starts with a zero residual, which the 3-step run above showed as well.
  const auto plain = run_steps<gs::compress::topk<10>>(2, 2000, 2, in);
  CHECK(std::all_of(plain.out[0].begin(), plain.out[0].end(), [](float v) { return v == 0; }));
}

TEST_CASE("int8 and topk through the allreducer: bitwise equal on every rank, bounded error") {
  gs::testbed::watchdog wd(120, "int8/topk allreducer");
  auto in = [](std::size_t r, std::size_t s, std::size_t i) { return noise(r * 31 + s, i); };
  for (std::size_t n : {2u, 3u, 4u}) {
    CAPTURE(n);
    constexpr std::size_t count = 50000;
    const auto q = run_steps<gs::compress::int8<256>>(n, count, 2, in);
    const auto e =
        run_steps<gs::compress::error_feedback<gs::compress::int8<256>>>(n, count, 2, in);
    const auto t = run_steps<gs::compress::topk<10>>(n, count, 1, in, gs::op::avg);
    const auto plain = run_steps<gs::compress::none>(n, count, 1, in);
    for (std::size_t r = 1; r < n; ++r) {
      CHECK(q.digest[r] == q.digest[0]);
      CHECK(e.digest[r] == e.digest[0]);
      CHECK(t.digest[r] == t.digest[0]);
    }
    // int8: each rank's value is off by at most half a step (scale / L / 2; |x| < 1).
    const float step = 1.0f / static_cast<float>(127 / n);
    double worst = 0;
    std::size_t err = 0;
    for (std::size_t i = 0; i < count; ++i) {
      float want = 0;
      for (std::size_t r = 0; r < n; ++r) want += in(r, 1, i);
      worst = std::max(worst, double(std::fabs(q.out[0][i] - want)));
    }
    CHECK(worst <= n * step / 2 * 1.001);
    // topk: exactly k = 500 entries per rank, each the rank's own value / n, summed.
    const std::size_t k = (count * 10 + 999) / 1000;
    std::vector<float> want(count, 0.0f);
    for (std::size_t r = 0; r < n; ++r) {
      std::vector<float> v(count);
      for (std::size_t i = 0; i < count; ++i) v[i] = in(r, 0, i);
      // op::avg: each value sent is multiplied by 1/n, then added in rank order.
      for (std::uint32_t i : topk_by_sort(v, k)) want[i] += v[i] * (1.0f / static_cast<float>(n));
    }
    for (std::size_t i = 0; i < count; ++i) err += t.out[0][i] != want[i];
    CHECK(err == 0);
    CHECK(t.wire[0] == (n - 1) * k * 8);
    // int8 moves about a quarter of the float bytes (codes + a float per 256 values).
    CAPTURE(q.wire[0]);
    CAPTURE(plain.wire[0]);
    CHECK(q.wire[0] * 10 < plain.wire[0] * 3);
  }
}

// Per bucket: what the codec gave the collectives, counted as it ran (two tensors of
// 1000 floats in buckets of 4096 bytes: one bucket each; 3 ranks).
template <class C>
std::vector<gs::observe::call_stats> bucket_stats_of() {
  constexpr std::size_t ranks = 3, count = 1000;
  std::vector<gs::observe::call_stats> st(ranks);
  gs::transport::run_local(ranks, [&](local& t) {
    gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<4096>, C> ar(t);
    std::vector<float> a(count), b(count);
    ar.add(std::span<float>(a), "a");
    ar.add(std::span<float>(b), "b");
    ar.commit(gs::op::sum);
    for (std::size_t i = 0; i < count; ++i) {
      a[i] = static_cast<float>(i % 17);
      b[i] = static_cast<float>(i % 5) - 2.0f;
    }
    ar.ready(1);
    ar.ready(0);
    ar.wait();
    st[t.rank()] = ar.last_stats();
  });
  return st;
}

TEST_CASE("stats: each bucket's compression ratio is what its codec handed the collectives") {
  gs::testbed::watchdog wd(120, "bucket stats");
  namespace c = gs::compress;
  auto check = [](const std::vector<gs::observe::call_stats>& st, std::size_t encoded) {
    for (const auto& s : st) {
      REQUIRE(s.per_bucket.size() == 2);
      std::size_t wire = 0;
      for (const auto& b : s.per_bucket) {
        CHECK(b.bytes_in == 4000);
        CHECK(b.bytes_encoded == encoded);
        CHECK(b.ratio() == doctest::Approx(4000.0 / static_cast<double>(encoded)));
        wire += b.bytes_wire;
      }
      CHECK(s.bytes_encoded == 2 * encoded);
      CHECK(wire == s.bytes_wire);  // the buckets' wire bytes add up to the call's
      CHECK(s.bytes_wire > 0);
    }
  };
  SUBCASE("none: the payload itself") {
    check(bucket_stats_of<c::none>(), 4000);
  }
  SUBCASE("fp16: half") {
    check(bucket_stats_of<c::fp16>(), 2000);
  }
  // 4 block scales (floats, agreed by max) + 1000 one-byte codes.
  SUBCASE("int8<256>") {
    check(bucket_stats_of<c::int8<256>>(), 4 * 4 + 1000);
  }
  // k = 10 of 1000: 10 values + 10 32-bit indices, this rank's part of the allgather.
  SUBCASE("topk 1 %") {
    check(bucket_stats_of<c::topk<10>>(), 10 * 8);
  }
}

TEST_CASE("int8 refuses more ranks than its codes can sum") {
  gs::testbed::watchdog wd(120, "int8 128 ranks");
  struct wide : solo_channel {
    std::size_t ranks() const { return 128; }
  };
  wide ch;
  gs::compress::no_state st;
  std::vector<float> x(10, 1.0f);
  try {
    gs::compress::run_codec<gs::compress::int8<>, float, gs::op::sum_t>(ch, std::span<float>(x), st,
                                                                        nullptr);
    FAIL("no error");
  } catch (const gs::error& e) {
    CHECK(e.code() == gs::errc::invalid_argument);
    CHECK(std::string(e.what()).find("127 ranks") != std::string::npos);
    CHECK(std::string(e.what()).find("128") != std::string::npos);
  }
}

TEST_CASE("powersgd: a rank-r matrix comes back to float tolerance; the rest exactly") {
  gs::testbed::watchdog wd(120, "powersgd");
  constexpr std::size_t m = 96, n = 80, r = 3;
  // M = A B with A (m x r), B (r x n): rank r.
  auto a = [](std::size_t rank, std::size_t i, std::size_t c) {
    return noise(40 + rank, i * r + c);
  };
  auto b = [](std::size_t c, std::size_t j) { return noise(99, c * n + j); };
  auto mat = [&](std::size_t rank, std::size_t i, std::size_t j) {
    float s = 0;
    for (std::size_t c = 0; c < r; ++c) s += a(rank, i, c) * b(c, j);
    return s;
  };
  {  // one rank, through the codec: the residual is (nearly) zero as well
    solo_channel ch;
    ch.parts = {{0, m * n, m, n}};
    using C = gs::compress::powersgd<r>;
    C::codec<float, gs::op::sum_t>::state st;
    std::vector<float> x(m * n), want(m * n), res(m * n, 1.0f);
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < n; ++j) x[i * n + j] = want[i * n + j] = mat(0, i, j);
    gs::compress::run_codec<C, float, gs::op::sum_t>(ch, std::span<float>(x), st, res.data());
    double err = 0, norm = 0, rerr = 0;
    for (std::size_t i = 0; i < m * n; ++i) {
      err = std::max(err, double(std::fabs(x[i] - want[i])));
      rerr = std::max(rerr, double(std::fabs(res[i])));
      norm = std::max(norm, double(std::fabs(want[i])));
    }
    CHECK(err <= 1e-5 * norm);
    CHECK(rerr <= 1e-5 * norm);
    REQUIRE(st.qt.size() == 1);
    CHECK(st.qt[0].size() == r * n);  // Q kept for the next step
  }
  // Three ranks over the allreducer: the sum sum_r A_r B has rank r too; a bias vector in
  // the same bucket is summed exactly; every rank gets the same bits.
  constexpr std::size_t ranks = 3;
  std::vector<std::vector<float>> got(ranks), bias(ranks);
  std::vector<std::size_t> wire(ranks);
  std::mutex mu;
  gs::transport::run_local(ranks, [&](local& t) {
    gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<1 << 20>, gs::compress::powersgd<r>>
        ar(t);
    std::vector<float> w(m * n), v(n);
    ar.add(std::span<float>(w), "W", gs::matrix_shape{m, n});
    ar.add(std::span<float>(v), "b");
    ar.commit(gs::op::sum);
    for (int step = 0; step < 2; ++step) {
      for (std::size_t i = 0; i < m; ++i)
        for (std::size_t j = 0; j < n; ++j) w[i * n + j] = mat(t.rank(), i, j);
      for (std::size_t j = 0; j < n; ++j) v[j] = static_cast<float>(j + t.rank());
      ar.ready(1);
      ar.ready(0);
      ar.wait();
    }
    std::lock_guard lk(mu);
    got[t.rank()] = w;
    bias[t.rank()] = v;
    wire[t.rank()] = ar.last_stats().bytes_wire;
  });
  double err = 0, norm = 0;
  std::size_t bad_bias = 0;
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      float want = 0;
      for (std::size_t q = 0; q < ranks; ++q) want += mat(q, i, j);
      err = std::max(err, double(std::fabs(got[0][i * n + j] - want)));
      norm = std::max(norm, double(std::fabs(want)));
    }
  }
  for (std::size_t j = 0; j < n; ++j) bad_bias += bias[0][j] != static_cast<float>(3 * j + 3);
  CHECK(err <= 1e-4 * norm);
  CHECK(bad_bias == 0);
  for (std::size_t q = 1; q < ranks; ++q) {
    CHECK(got[q] == got[0]);
    CHECK(bias[q] == bias[0]);
  }
  // P (m x r) and Q (n x r) and the bias instead of the m x n matrix: a ring sends
  // 2(n-1)/n of each, plus headers; far below the dense matrix's 4 m n.
  CAPTURE(wire[0]);
  CHECK(wire[0] < 2 * 4 * (r * (m + n) + n) + 1024);
  CHECK(wire[0] * 8 < 4 * m * n);
}

TEST_CASE("a shape that does not match the tensor is refused at add()") {
  gs::testbed::watchdog wd(60, "bad shape");
  gs::transport::run_local(1, [&](local& t) {
    gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<1 << 20>> ar(t);
    std::vector<float> w(12);
    try {
      ar.add(std::span<float>(w), "W", gs::matrix_shape{5, 3});
      FAIL("no error");
    } catch (const gs::error& e) {
      CHECK(e.code() == gs::errc::invalid_argument);
      CHECK(std::string(e.what()).find("has 12 elements but its shape is 5 x 3") !=
            std::string::npos);
    }
  });
}

TEST_CASE("int8 tensors are refused by the allreducer, naming the tensor and the way out") {
  gs::testbed::watchdog wd(60, "int8 tensor");
  gs::transport::run_local(1, [&](local& t) {
    gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<1 << 20>> ar(t);
    std::vector<std::int8_t> q(10);
    ar.add(std::span<std::int8_t>(q), "codes");
    try {
      ar.commit(gs::op::sum);
      FAIL("no error");
    } catch (const gs::error& e) {
      CHECK(e.code() == gs::errc::invalid_argument);
      CHECK(std::string(e.what()).find("tensor #0 ('codes') is int8: the allreducer does not "
                                       "reduce int8 tensors") != std::string::npos);
    }
    // The free function takes them.
    std::vector<std::int8_t> v(5, 3);
    gs::allreduce<gs::algo::ring>(t, std::span<std::int8_t>(v), gs::op::sum);
    CHECK(v[4] == 3);
  });
}

namespace {
// Every step's result on each of 2 local ranks: one registered 64 x 48 matrix "W" (a
// matrix for powersgd, a plain tensor of 3072 floats for the others), inputs in(r, s, i),
// and between(ar, s) called on every rank before step s.
constexpr std::size_t state_rows = 64, state_cols = 48, state_count = state_rows * state_cols;

template <class C, class In, class Between>
std::vector<std::vector<std::vector<float>>> steps_of(std::size_t steps, In in, Between between) {
  std::vector<std::vector<std::vector<float>>> out(2);  // [rank][step]
  std::mutex mu;
  gs::transport::run_local(2, [&](local& t) {
    gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<1 << 20>, C> ar(t);
    std::vector<float> g(state_count);
    ar.add(std::span<float>(g), "W", gs::matrix_shape{state_rows, state_cols});
    ar.commit(gs::op::sum);
    for (std::size_t s = 0; s < steps; ++s) {
      between(ar, s);
      for (std::size_t i = 0; i < state_count; ++i) g[i] = in(t.rank(), s, i);
      ar.ready(0);
      ar.wait();
      std::lock_guard lk(mu);
      out[t.rank()].push_back(g);
    }
  });
  return out;
}

std::size_t non_finite(const std::vector<float>& v) {
  return static_cast<std::size_t>(
      std::count_if(v.begin(), v.end(), [](float x) { return !std::isfinite(x); }));
}

template <class C>
void check_recovers(const std::string& what, float bad) {
  CAPTURE(what);
  CAPTURE(bad);
  // Step 1: rank 0's input is `bad` in its first 100 elements (more than topk<10>'s k of
  // 31 can send); every other step is finite.
  auto in = [bad](std::size_t r, std::size_t s, std::size_t i) {
    return s == 1 && r == 0 && i < 100 ? bad : noise(r * 7 + s, i);
  };
  const auto out = steps_of<C>(4, in, [](auto&, std::size_t) {});
  CHECK(non_finite(out[0][1]) > 0);  // the bad step's sum is not finite: nothing hidden
  for (std::size_t s : {2u, 3u}) {
    CAPTURE(s);
    CHECK(non_finite(out[0][s]) == 0);  // the state carried no NaN or Inf over
    CHECK(out[1][s] == out[0][s]);
  }
}
}  // namespace

TEST_CASE("a NaN or Inf step leaves no poison in codec state: the next steps are finite") {
  gs::testbed::watchdog wd(120, "non-finite codec state");
  using gs::compress::error_feedback;
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    check_recovers<error_feedback<gs::compress::int8<64>>>("ef int8", bad);
    check_recovers<error_feedback<gs::compress::fp16>>("ef fp16", bad);
    check_recovers<error_feedback<gs::compress::bf16>>("ef bf16", bad);
    check_recovers<error_feedback<gs::compress::topk<10>>>("ef topk", bad);
    check_recovers<gs::compress::powersgd<2>>("powersgd", bad);
    check_recovers<error_feedback<gs::compress::powersgd<2>>>("ef powersgd", bad);
  }
  // A finite value beyond half's range is Inf on the wire; its residual is dropped too.
  check_recovers<error_feedback<gs::compress::fp16>>("ef fp16, 1e6", 1e6f);
}

TEST_CASE("reset_compression_state(): the next step starts as a new plan does") {
  gs::testbed::watchdog wd(120, "reset compression state");
  auto in = [](std::size_t r, std::size_t s, std::size_t i) {
    return s == 1 ? 0.5f * noise(r + 50, i) : noise(r * 3 + 1, i);  // steps 0, 2 alike
  };
  auto no_reset = [](auto&, std::size_t) {};
  auto reset_at_2 = [](auto& ar, std::size_t s) {
    if (s == 2) ar.reset_compression_state();
  };
  // PowerSGD's warm start: after a reset, step 2 (step 0's inputs) gives step 0's bits;
  // without one, Q from step 1 gives other bits.
  using psgd = gs::compress::powersgd<2>;
  const auto kept = steps_of<psgd>(3, in, no_reset);
  const auto reset = steps_of<psgd>(3, in, reset_at_2);
  CHECK(kept[0][2] != kept[0][0]);
  CHECK(reset[0][2] == reset[0][0]);
  CHECK(reset[1][2] == reset[0][2]);
  // Error feedback: after a reset, step 2 carries no residual from step 1, so it gives
  // step 0's bits (which started from a zero residual).
  using ef = gs::compress::error_feedback<gs::compress::int8<64>>;
  const auto ef_kept = steps_of<ef>(3, in, no_reset);
  const auto ef_reset = steps_of<ef>(3, in, reset_at_2);
  CHECK(ef_kept[0][2] != ef_kept[0][0]);
  CHECK(ef_reset[0][2] == ef_reset[0][0]);

  // Inside a step it is refused, naming the way out; the step then completes.
  gs::transport::run_local(1, [&](local& t) {
    gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<1 << 20>, ef> ar(t);
    std::vector<float> a(16, 1.0f), b(16, 2.0f);
    ar.add(std::span<float>(a), "a");
    ar.add(std::span<float>(b), "b");
    ar.commit(gs::op::sum);
    ar.ready(0);
    try {
      ar.reset_compression_state();
      FAIL("no error");
    } catch (const gs::error& e) {
      CHECK(e.code() == gs::errc::invalid_argument);
      CHECK(std::string(e.what()).find("while a step is open") != std::string::npos);
      CHECK(std::string(e.what()).find("call wait() first") != std::string::npos);
    }
    CHECK_NOTHROW(ar.wait());
    CHECK_NOTHROW(ar.reset_compression_state());  // between steps: fine
  });
}

TEST_CASE("int8: a block of tiny values (scale below levels / FLT_MAX) codes 0 and keeps x") {
  // 127 / 1e-40 is past FLT_MAX: inv would be Inf, and 0 * Inf a NaN converted to int.
  using ef = gs::compress::error_feedback<gs::compress::int8<64>>;
  solo_channel ch;
  ef::codec<float, gs::op::sum_t>::state st;
  std::vector<float> x(128, 0.0f);
  x[3] = 1e-40f;
  x[70] = 0.5f;  // the next block codes as usual
  const std::vector<float> in = x;
  gs::compress::run_codec<ef, float, gs::op::sum_t>(ch, std::span<float>(x), st, nullptr);
  for (std::size_t i = 0; i < 64; ++i) {
    CHECK(x[i] == 0.0f);
    CHECK(st.residual[i] == in[i]);  // nothing of the tiny block is lost for good
  }
  CHECK(x[70] == 0.5f);
  CHECK(st.residual[70] == 0.0f);
}
