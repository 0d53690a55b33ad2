// SPDX-License-Identifier: Apache-2.0
// Result verification (call_options::verify, GRADSYNC_VERIFY): the hash sees every bit,
// verified calls stay exact, and a result corrupted on one rank (a deliberately faulty
// algorithm) makes every rank throw errc::diverged naming the rank — for the free
// allreduce (in place and out of place), the allreducer and over two levels.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <gradsync/check/verify.hpp>
#include <gradsync/gradsync.hpp>
#include <gradsync/testing/exact_inputs.hpp>

#include "ring_then_flip.hpp"
#include "two_level_ranks.hpp"
#include "watchdog.hpp"
#include "text.hpp"

namespace gs = gradsync;
using gradsync::testbed::contains;
using gs::transport::local;

namespace {

using gs::testbed::ring_then_flip;

gs::call_options verified() {
  gs::call_options o;
  o.verify = true;
  o.timeout = gs::seconds_d(20);
  return o;
}

/// Runs body(local&) on n threads; returns each rank's (errc, message), errc 0 = none.
template <class Body>
std::vector<std::pair<int, std::string>> per_rank(std::size_t n, Body&& body) {
  std::vector<std::pair<int, std::string>> out(n);
  std::mutex m;
  gs::transport::run_local(n, [&](local& t) {
    std::pair<int, std::string> res{0, ""};
    try {
      body(t);
    } catch (const gs::error& e) {
      res = {static_cast<int>(e.code()), e.what()};
    }
    std::lock_guard lk(m);
    out[t.rank()] = res;
  });
  return out;
}

}  // namespace

TEST_CASE("buffer_hash: every single-bit flip, swapped stripes and every length differ") {
  for (bool portable : {false, true}) {
    CAPTURE(portable);
    auto hash = [&](const void* p, std::size_t n) {
      return gs::kernels::buffer_hash(p, n, portable);
    };
    // 2100 bytes: 65 stripes (two 1 KiB scrambles) and a 20-byte tail.
    std::vector<unsigned char> a(2100);
    std::uint64_t state = 99;  // no two stripes alike
    for (auto& x : a) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      x = static_cast<unsigned char>(state >> 56);
    }
    const std::uint64_t h = hash(a.data(), a.size());
    std::vector<unsigned char> b = a;
    CHECK(hash(b.data(), b.size()) == h);
    std::size_t same = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      for (int bit = 0; bit < 8; ++bit) {
        b[i] ^= static_cast<unsigned char>(1u << bit);
        same += hash(b.data(), b.size()) == h;
        b[i] ^= static_cast<unsigned char>(1u << bit);
      }
    }
    CHECK(same == 0);  // stripes, scrambles and tail: every bit counts
    std::size_t swaps_same = 0;
    for (std::size_t s = 1; s < 65; ++s) {  // stripe 0 swapped with stripe s
      std::vector<unsigned char> c = a;
      std::swap_ranges(c.begin(), c.begin() + 32, c.begin() + 32 * s);
      REQUIRE(c != a);
      swaps_same += hash(c.data(), c.size()) == h;
    }
    CHECK(swaps_same == 0);  // a misplaced chunk is not a permutation the hash forgives
    std::vector<unsigned char> zeros(64, 0);
    std::vector<std::uint64_t> seen;
    for (std::size_t len = 0; len <= 64; ++len) {
      const std::uint64_t z = hash(zeros.data(), len);
      for (std::uint64_t x : seen) CHECK(x != z);  // zero padding does not hide the length
      seen.push_back(z);
    }
  }
}

TEST_CASE("buffer_hash: the AVX2 loop gives the portable loop's bits") {
  std::uint64_t state = 0x1234567;
  std::size_t differ = 0, lengths = 0;
  for (std::size_t n = 0; n < 70000; n += n < 300 ? 1 : 997) {
    std::vector<unsigned char> v(n);
    for (auto& x : v) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      x = static_cast<unsigned char>(state >> 56);
    }
    differ += gs::kernels::buffer_hash(v.data(), n) != gs::kernels::buffer_hash(v.data(), n, true);
    ++lengths;
  }
  CHECK(lengths > 300);
  CHECK(differ == 0);  // ranks with and without AVX2 agree
}

TEST_CASE("verify: verified calls of every algorithm stay exact and raise nothing") {
  gs::testbed::watchdog wd(120, "verify exact");
  for (std::size_t n : {1, 2, 3, 4}) {
    CAPTURE(n);
    std::vector<std::size_t> wrong(n);
    const auto res = per_rank(n, [&](local& t) {
      for (std::size_t count : {0, 1, 7, 1000, 40001}) {
        std::vector<float> v(count);
        gs::testing::fill_inputs(std::span<float>(v), gs::reduce_op::sum, t.rank(), n);
        gs::allreduce<gs::algo::ring>(t, std::span<float>(v), gs::op::sum, verified());
        gs::allreduce<gs::algo::tree>(t, std::span<float>(v), gs::op::max, verified());
        std::vector<double> d(count);
        gs::testing::fill_inputs(std::span<double>(d), gs::reduce_op::avg, t.rank(), n);
        gs::allreduce<gs::algo::auto_select>(t, std::span<double>(d), gs::op::avg, verified());
        wrong[t.rank()] +=
            gs::testing::count_wrong(std::span<const double>(d), gs::reduce_op::avg, n);
      }
    });
    for (std::size_t r = 0; r < n; ++r) {
      CAPTURE(r);
      CHECK(res[r].first == 0);
      CHECK(res[r].second == "");
      CHECK(wrong[r] == 0);
    }
  }
}

TEST_CASE("verify: a result corrupted on one rank fails every rank, naming it") {
  gs::testbed::watchdog wd(120, "verify corrupted");
  const std::size_t n = 4;
  SUBCASE("without verify the corruption goes unnoticed (what verify is for)") {
    std::vector<float> mid(n);
    const auto res = per_rank(n, [&](local& t) {
      std::vector<float> v(1000, 1.0f);
      gs::call_options o;
      o.verify = false;
      gs::allreduce<ring_then_flip<2>>(t, std::span<float>(v), gs::op::sum, o);
      mid[t.rank()] = v[500];
    });
    for (std::size_t r = 0; r < n; ++r) CHECK(res[r].first == 0);
    CHECK(mid[0] == 4.0f);
    CHECK(mid[2] != 4.0f);
  }
  SUBCASE("in place") {
    const auto res = per_rank(n, [&](local& t) {
      std::vector<float> v(1000, 1.0f);
      gs::allreduce<ring_then_flip<2>>(t, std::span<float>(v), gs::op::sum, verified());
    });
    for (std::size_t r = 0; r < n; ++r) {
      CAPTURE(r);
      CAPTURE(res[r].second);
      CHECK(res[r].first == static_cast<int>(gs::errc::diverged));
      CHECK(contains(res[r].second, "allreduce results differ across ranks"));
      CHECK(contains(res[r].second, "1 rank(s) hold a different result than rank 0"));
      CHECK(contains(res[r].second, "rank 2: hash 0x"));
      CHECK(contains(res[r].second, "of 4000 bytes"));
      CHECK(!contains(res[r].second, "rank 1: hash"));
    }
  }
  SUBCASE("rank 0 corrupted: the others are named") {
    const auto res = per_rank(n, [&](local& t) {
      std::vector<std::int32_t> v(333, 3);
      gs::allreduce<ring_then_flip<0>>(t, std::span<std::int32_t>(v), gs::op::sum, verified());
    });
    for (std::size_t r = 0; r < n; ++r) {
      CAPTURE(res[r].second);
      CHECK(res[r].first == static_cast<int>(gs::errc::diverged));
      CHECK(contains(res[r].second, "3 rank(s) hold a different result than rank 0"));
      CHECK(contains(res[r].second, "rank 1: hash"));
      CHECK(contains(res[r].second, "rank 3: hash"));
    }
  }
  SUBCASE("out of place") {
    const auto res = per_rank(n, [&](local& t) {
      const std::vector<double> in(100, 2.0);
      std::vector<double> out(100);
      gs::allreduce<ring_then_flip<3>>(t, std::span<const double>(in), std::span<double>(out),
                                       gs::op::sum, verified());
    });
    for (std::size_t r = 0; r < n; ++r) {
      CAPTURE(res[r].second);
      CHECK(res[r].first == static_cast<int>(gs::errc::diverged));
      CHECK(contains(res[r].second, "rank 3: hash"));
    }
  }
}

TEST_CASE("verify: the allreducer reports a corrupted bucket at wait() and stays usable") {
  gs::testbed::watchdog wd(120, "verify allreducer");
  const std::size_t n = 3;
  std::vector<std::string> first(n), second(n), sound(n);
  std::vector<std::size_t> wrong(n);
  gs::transport::run_local(n, [&](local& t) {
    std::vector<std::vector<float>> grads(6, std::vector<float>(1000));
    gs::allreducer_options o;
    o.call = verified();
    o.timeline = "";
    auto step = [&](auto& ar) {
      for (auto& g : grads) std::fill(g.begin(), g.end(), 1.0f);
      try {
        for (std::size_t i = 0; i < grads.size(); ++i) ar.ready(i);
        ar.wait();
      } catch (const gs::error& e) {
        return std::string(gs::errc_name(e.code())) + ": " + e.what();
      }
      return std::string();
    };
    {
      gs::allreducer<local, ring_then_flip<1>, gs::fusion::bucket<8192>> bad(t, o);
      for (auto& g : grads) bad.add(std::span<float>(g));
      bad.commit();
      first[t.rank()] = step(bad);
      second[t.rank()] = step(bad);  // runs again (not "broken"): a later call number
    }
    // The same composition with a sound algorithm, verified: exact, no error.
    gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<8192>> good(t, o);
    for (auto& g : grads) good.add(std::span<float>(g));
    good.commit();
    sound[t.rank()] = step(good);
    for (auto& g : grads)
      for (float x : g) wrong[t.rank()] += x != float(n);
  });
  for (std::size_t r = 0; r < n; ++r) {
    CAPTURE(r);
    CAPTURE(first[r]);
    CAPTURE(second[r]);
    CHECK(contains(first[r], "diverged: "));
    CHECK(contains(first[r], "rank 1: hash"));
    CHECK(contains(second[r], "diverged: "));
    CHECK(first[r] != second[r]);
    CHECK(sound[r] == "");
    CHECK(wrong[r] == 0);
  }
}

TEST_CASE("verify over two levels: a node whose result differs fails every rank") {
  gs::testbed::watchdog wd(120, "verify two_level");
  using two_level = gs::transport::two_level<local, local>;
  std::vector<std::string> msg(4);
  std::vector<std::size_t> wrong(4);
  std::mutex m;
  const auto errors = gs::testbed::run_two_level_shape(2, 2, [&](local intra, local inter) {
    two_level t(std::move(intra), std::move(inter));
    const std::size_t r = t.rank();
    // Sound first: exact and verified.
    std::vector<float> v(1001);
    gs::testing::fill_inputs(std::span<float>(v), gs::reduce_op::sum, r, 4);
    gs::allreduce<gs::algo::hierarchical<>>(t, std::span<float>(v), gs::op::sum, verified());
    const std::size_t w =
        gs::testing::count_wrong(std::span<const float>(v), gs::reduce_op::sum, 4);
    // Node 1's shards corrupted across nodes (inter rank 1 is node 1).
    std::string what;
    try {
      std::vector<float> u(1001, 1.0f);
      gs::allreduce<gs::algo::hierarchical<ring_then_flip<1>>>(t, std::span<float>(u), gs::op::sum,
                                                               verified());
    } catch (const gs::error& e) {
      what = std::string(gs::errc_name(e.code())) + ": " + e.what();
    }
    std::lock_guard lk(m);
    msg[r] = what;
    wrong[r] = w;
  });
  for (std::size_t r = 0; r < 4; ++r) {
    CAPTURE(r);
    CAPTURE(msg[r]);
    CHECK(errors[r] == "");
    CHECK(wrong[r] == 0);
    CHECK(contains(msg[r], "diverged: "));
    // Inter group of local index l holds global ranks l and 2 + l: rank 2 + l differs.
    CHECK(contains(msg[r], "rank " + std::to_string(2 + r % 2) + ": hash"));
  }
}

TEST_CASE("GRADSYNC_VERIFY: 1 and 0 parse, anything else is an error naming the variable") {
  const char* old = std::getenv("GRADSYNC_VERIFY");
  const std::string saved = old ? old : "";
  ::setenv("GRADSYNC_VERIFY", "1", 1);
  CHECK(gs::detail::read_flag_env("GRADSYNC_VERIFY") == true);
  ::setenv("GRADSYNC_VERIFY", "0", 1);
  CHECK(gs::detail::read_flag_env("GRADSYNC_VERIFY") == false);
  ::unsetenv("GRADSYNC_VERIFY");
  CHECK(gs::detail::read_flag_env("GRADSYNC_VERIFY") == false);
  ::setenv("GRADSYNC_VERIFY", "yes", 1);
  try {
    (void)gs::detail::read_flag_env("GRADSYNC_VERIFY");
    FAIL("no error for GRADSYNC_VERIFY=yes");
  } catch (const gs::error& e) {
    CHECK(e.code() == gs::errc::invalid_argument);
    CHECK(contains(e.what(), "GRADSYNC_VERIFY"));
    CHECK(contains(e.what(), "'yes'"));
  }
  if (old) {
    ::setenv("GRADSYNC_VERIFY", saved.c_str(), 1);
  } else {
    ::unsetenv("GRADSYNC_VERIFY");
  }
}
