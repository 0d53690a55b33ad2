// SPDX-License-Identifier: Apache-2.0
// call_options::check_finite: a NaN or Inf in one rank's input is found before anything
// is reduced, and every rank throws errc::non_finite naming that rank, the tensor and the
// index; the data is left as it was and the transport (or allreducer) stays usable. The
// scan itself (kernels/finite.hpp) finds the first bad element at every position of a
// block, for every floating type, and its copying form copies exactly.
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <gradsync/gradsync.hpp>

#include "two_level_ranks.hpp"
#include "watchdog.hpp"
#include "text.hpp"

namespace gs = gradsync;
using gradsync::testbed::contains;
using local = gs::transport::local;

namespace {

gs::call_options checking() {
  gs::call_options o;
  o.timeout = gs::seconds_d(20);
  o.check_finite = true;
  return o;
}

template <class T>
void check_scan() {
  const float inf = std::numeric_limits<float>::infinity();
  const T bad[] = {static_cast<T>(std::nanf("")), static_cast<T>(inf), static_cast<T>(-inf)};
  for (std::size_t count : {1u, 7u, 255u, 256u, 257u, 1000u, 4099u}) {
    std::vector<T> x(count);
    for (std::size_t i = 0; i < count; ++i) x[i] = static_cast<T>(float(i % 13) - 6.0f);
    x[count / 2] = static_cast<T>(60000.0f);  // large but finite in every type
    CHECK(gs::kernels::first_non_finite(x.data(), count) == count);
    for (std::size_t at : {std::size_t{0}, count / 3, count - 1}) {
      for (const T b : bad) {
        std::vector<T> y = x, out(count);
        y[at] = b;
        if (at + 1 < count) y[count - 1] = b;  // a later one too: the first is named
        CAPTURE(count);
        CAPTURE(at);
        CHECK(gs::kernels::first_non_finite(y.data(), count) == at);
        CHECK(gs::kernels::copy_first_non_finite(out.data(), y.data(), count) == at);
        CHECK(std::memcmp(out.data(), y.data(), count * sizeof(T)) == 0);
      }
    }
  }
  CHECK(std::string(gs::kernels::non_finite_name(bad[0])) == "NaN");
  CHECK(std::string(gs::kernels::non_finite_name(bad[1])) == "+Inf");
  CHECK(std::string(gs::kernels::non_finite_name(bad[2])) == "-Inf");
}

}  // namespace

TEST_CASE("finite scan: the first NaN or Inf at any position, for every floating type") {
  check_scan<float>();
  check_scan<double>();
  check_scan<gs::half>();
  check_scan<gs::bfloat16>();
  const std::vector<std::int32_t> ints(1000, -1);  // all-ones bits are an integer, not NaN
  CHECK(gs::kernels::first_non_finite(ints.data(), ints.size()) == ints.size());
}

TEST_CASE("check_finite: every rank names the rank, the value and the index; data untouched") {
  gs::testbed::watchdog wd(60, "check_finite local");
  for (std::size_t n : {1u, 2u, 3u, 5u}) {
    std::vector<std::string> msgs(n);
    std::vector<std::size_t> changed(n);
    gs::transport::run_local(n, [&](local& t) {
      const std::size_t bad_rank = n - 1;
      std::vector<double> g(3001);
      for (std::size_t i = 0; i < g.size(); ++i) g[i] = double(i % 7) + double(t.rank());
      if (t.rank() == bad_rank) g[1234] = std::numeric_limits<double>::infinity();
      const std::vector<double> before = g;
      try {
        gs::allreduce<gs::algo::ring>(t, std::span<double>(g), gs::op::sum, checking());
      } catch (const gs::error& e) {
        CHECK(e.code() == gs::errc::non_finite);
        msgs[t.rank()] = e.what();
      }
      changed[t.rank()] = std::memcmp(before.data(), g.data(), g.size() * sizeof(double)) != 0;
      // The transport is still in step: a clean call afterwards is exact.
      g.assign(g.size(), 1.0);
      gs::allreduce<gs::algo::tree>(t, std::span<double>(g), gs::op::sum, checking());
      CHECK(g[0] == double(n));
    });
    for (std::size_t r = 0; r < n; ++r) {
      CAPTURE(n);
      CAPTURE(r);
      CHECK(contains(msgs[r], "non-finite input: rank " + std::to_string(n - 1) +
                                  " has +Inf in its input at element 1234"));
      CHECK(changed[r] == 0);
    }
  }
}

TEST_CASE("check_finite: several ranks with NaN: the lowest is named, the others counted") {
  gs::testbed::watchdog wd(60, "check_finite several");
  std::vector<std::string> msgs(4);
  gs::transport::run_local(4, [&](local& t) {
    std::vector<float> g(100, 1.0f);
    if (t.rank() >= 1) g[t.rank() * 10] = std::nanf("");
    try {
      gs::allreduce<gs::algo::halving_doubling>(t, std::span<float>(g), gs::op::avg, checking());
    } catch (const gs::error& e) {
      msgs[t.rank()] = e.what();
    }
  });
  for (const auto& m : msgs) {
    CHECK(contains(m, "rank 1 has NaN in its input at element 10 (2 more rank(s) have one too)"));
  }
}

TEST_CASE("check_finite: off by default and for integer types, no exchange") {
  gs::testbed::watchdog wd(60, "check_finite off");
  gs::transport::run_local(2, [&](local& t) {
    std::vector<float> g(10, 1.0f);
    g[3] = std::numeric_limits<float>::infinity();
    gs::call_options o;
    o.check_finite = false;
    gs::allreduce<gs::algo::ring>(t, std::span<float>(g), gs::op::sum, o);
    CHECK(std::isinf(g[3]));
    std::vector<std::int64_t> k(10, -1);
    gs::allreduce<gs::algo::ring>(t, std::span<std::int64_t>(k), gs::op::sum, checking());
    CHECK(k[9] == -2);
  });
}

TEST_CASE("check_finite: ranks that disagree on checking are a mismatch naming it") {
  gs::testbed::watchdog wd(60, "check_finite mismatch");
  std::vector<std::string> msgs(2);
  gs::transport::run_local(2, [&](local& t) {
    std::vector<float> g(10, 1.0f);
    gs::call_options o = checking();
    o.check_finite = t.rank() == 0;
    try {
      gs::allreduce<gs::algo::ring>(t, std::span<float>(g), gs::op::sum, o);
    } catch (const gs::error& e) {
      CHECK(e.code() == gs::errc::mismatch);
      msgs[t.rank()] = e.what();
    }
  });
  for (const auto& m : msgs) CHECK(contains(m, "check_finite on vs off"));
}

TEST_CASE("check_finite over two levels: the rank is the global one, every node fails") {
  gs::testbed::watchdog wd(60, "check_finite two_level");
  using two_level = gs::transport::two_level<local, local>;
  std::vector<std::string> msgs(6);
  const auto errors = gs::testbed::run_two_level_shape(3, 2, [&](local a, local b) {
    two_level t(std::move(a), std::move(b));
    std::vector<gs::bfloat16> g(777, gs::bfloat16(1.0f));
    if (t.rank() == 3) g[700] = gs::bfloat16(std::nanf(""));
    try {
      gs::allreduce<gs::algo::hierarchical<>>(t, std::span<gs::bfloat16>(g), gs::op::sum,
                                              checking());
    } catch (const gs::error& e) {
      CHECK(e.code() == gs::errc::non_finite);
      msgs[t.rank()] = e.what();
    }
    g.assign(g.size(), gs::bfloat16(1.0f));  // still in step
    gs::allreduce<gs::algo::hierarchical<>>(t, std::span<gs::bfloat16>(g), gs::op::sum, checking());
    CHECK(static_cast<float>(g[0]) == 6.0f);
  });
  for (std::size_t r = 0; r < 6; ++r) {
    CAPTURE(r);
    CHECK(errors[r] == "");
    CHECK(contains(msgs[r], "rank 3 has NaN in its input at element 700"));
  }
}

TEST_CASE("check_finite in the allreducer: the tensor by index and name, packed or in place") {
  gs::testbed::watchdog wd(60, "check_finite allreducer");
  for (std::size_t bucket : {std::size_t{1} << 20, std::size_t{64}}) {  // fused; one per bucket
    std::vector<std::string> msgs(3), list_msgs(3);
    std::vector<float> after(3);
    gs::transport::run_local(3, [&](local& t) {
      gs::allreducer_options o;
      o.call = checking();
      o.bucket_bytes = bucket;
      gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<1 << 20>> ar(t, o);
      std::vector<float> w(300, 1.0f), bias(16, 2.0f), out(40, 3.0f);
      ar.add(std::span<float>(w), "fc1.weight");
      ar.add(std::span<float>(bias), "fc1.bias");
      ar.add(std::span<float>(out), "fc2.weight");
      ar.commit(gs::op::avg);
      if (t.rank() == 2) bias[5] = -std::numeric_limits<float>::infinity();
      try {
        ar.wait();
      } catch (const gs::error& e) {
        CHECK(e.code() == gs::errc::non_finite);
        msgs[t.rank()] = e.what();
      }
      bias[5] = 2.0f;
      ar.wait();  // usable again
      after[t.rank()] = bias[5];
      // A grouped call names the tensor's place in the list.
      std::vector<double> x(10, 1.0), y(10, 1.0);
      if (t.rank() == 0) y[9] = std::nan("");
      const std::vector<gs::tensor_ref> refs{std::span<double>(x), std::span<double>(y)};
      try {
        ar.allreduce(std::span<const gs::tensor_ref>(refs), gs::op::sum);
      } catch (const gs::error& e) {
        list_msgs[t.rank()] = e.what();
      }
    });
    for (std::size_t r = 0; r < 3; ++r) {
      CAPTURE(bucket);
      CAPTURE(r);
      CHECK(contains(msgs[r], "rank 2 has -Inf in tensor #1 ('fc1.bias') at element 5"));
      CHECK(after[r] == 2.0f);
      CHECK(contains(list_msgs[r], "rank 0 has NaN in tensor #1 of the list at element 9"));
    }
  }
}

TEST_CASE("GRADSYNC_CHECK_FINITE: 1 and 0 parse, anything else names the variable") {
  ::setenv("GRADSYNC_CHECK_FINITE", "1", 1);
  CHECK(gs::detail::read_flag_env("GRADSYNC_CHECK_FINITE"));
  ::setenv("GRADSYNC_CHECK_FINITE", "on", 1);
  try {
    (void)gs::detail::read_flag_env("GRADSYNC_CHECK_FINITE");
    FAIL("no error for GRADSYNC_CHECK_FINITE=on");
  } catch (const gs::error& e) {
    CHECK(contains(e.what(), "GRADSYNC_CHECK_FINITE must be 0 or 1, got 'on'"));
  }
  ::unsetenv("GRADSYNC_CHECK_FINITE");
}
