// SPDX-License-Identifier: Apache-2.0
// Failures on transport::local, for every algorithm: cross-rank mismatches (count, type,
// op, algorithm) raise errc::mismatch on every rank naming the rank and both values; a
// rank that never calls makes the others time out naming it; a rank that leaves makes
// its peers fail with errc::peer_lost; bad out-of-place arguments raise
// errc::invalid_argument. Each test checks the code and what the message names.
#include <doctest/doctest.h>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <numeric>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gradsync/gradsync.hpp>

#include "local_outcomes.hpp"
#include "watchdog.hpp"
#include "text.hpp"

namespace gs = gradsync;
using gradsync::testbed::contains;

namespace {

using gs::testbed::outcome;
using gs::testbed::run_catching;

const gs::call_options quick{.timeout = gs::seconds_d{20}};

template <class A>
void check_mismatches() {
  constexpr std::size_t n = 4;
  gs::testbed::watchdog wd(60, std::string("mismatch tests, ") + std::string(A::name));
  SUBCASE("count") {
    auto out = run_catching(n, [](gs::transport::local& t) {
      std::vector<float> v(t.rank() == 2 ? 999 : 1000, 1.0f);
      gs::allreduce<A>(t, std::span<float>(v), gs::op::sum, quick);
    });
    for (const auto& o : out) {
      CAPTURE(o.what);
      CHECK(o.threw);
      CHECK(o.code == gs::errc::mismatch);
      CHECK(contains(o.what, "rank 2 differs from rank 0 in count 1000 vs 999"));
    }
  }
  SUBCASE("element type") {
    auto out = run_catching(n, [](gs::transport::local& t) {
      if (t.rank() == 3) {
        std::vector<double> v(64, 1.0);
        gs::allreduce<A>(t, std::span<double>(v), gs::op::sum, quick);
      } else {
        std::vector<float> v(64, 1.0f);
        gs::allreduce<A>(t, std::span<float>(v), gs::op::sum, quick);
      }
    });
    for (const auto& o : out) {
      CAPTURE(o.what);
      CHECK(o.code == gs::errc::mismatch);
      CHECK(contains(o.what, "rank 3 differs from rank 0 in element type float32 vs float64"));
    }
  }
  SUBCASE("op") {
    auto out = run_catching(n, [](gs::transport::local& t) {
      std::vector<std::int32_t> v(64, 1);
      if (t.rank() == 1) {
        gs::allreduce<A>(t, std::span<std::int32_t>(v), gs::op::max, quick);
      } else {
        gs::allreduce<A>(t, std::span<std::int32_t>(v), gs::op::sum, quick);
      }
    });
    for (const auto& o : out) {
      CAPTURE(o.what);
      CHECK(o.code == gs::errc::mismatch);
      CHECK(contains(o.what, "rank 1 differs from rank 0 in op sum vs max"));
    }
  }
  SUBCASE("algorithm") {
    auto out = run_catching(n, [](gs::transport::local& t) {
      std::vector<float> v(64, 1.0f);
      if (t.rank() == 2) {
        gs::allreduce<gs::algo::ring>(t, std::span<float>(v), gs::op::sum, quick);
      } else {
        gs::allreduce<A>(t, std::span<float>(v), gs::op::sum, quick);
      }
    });
    const std::string want =
        "rank 2 differs from rank 0 in algorithm " + std::string(A::name) + " vs ring";
    for (std::size_t r = 0; r < n; ++r) {
      CAPTURE(out[r].what);
      if (A::name == gs::algo::ring::name) {
        CHECK_FALSE(out[r].threw);  // same algorithm everywhere: no error
      } else {
        CHECK(out[r].code == gs::errc::mismatch);
        CHECK(contains(out[r].what, want));
      }
    }
  }
}

// Rank `absent` never calls until the others have failed; they must time out quickly.
template <class A>
void check_timeout(bool consistency_check) {
  constexpr std::size_t n = 3, absent = 2;
  gs::testbed::watchdog wd(60, std::string("timeout test, ") + std::string(A::name));
  std::atomic<std::size_t> finished{0};
  const auto start = std::chrono::steady_clock::now();
  auto out = run_catching(n, [&](gs::transport::local& t) {
    if (t.rank() == absent) {
      while (finished.load() < n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return;
    }
    std::vector<float> v(100000, 1.0f);
    try {
      gs::allreduce<A>(t, std::span<float>(v), gs::op::sum,
                       {.timeout = gs::seconds_d{0.3}, .check = consistency_check});
    } catch (...) {
      ++finished;
      throw;
    }
    ++finished;
  });
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(took < 5.0);
  CHECK_FALSE(out[absent].threw);
  std::size_t naming_absent = 0;
  for (std::size_t r = 0; r < n; ++r) {
    if (r == absent) continue;
    CAPTURE(r);
    CAPTURE(out[r].what);
    REQUIRE(out[r].threw);
    if (consistency_check) {
      // Both callers wait on the absent rank in the header exchange.
      CHECK(out[r].code == gs::errc::timeout);
      CHECK(contains(out[r].what, "(peer 2)"));
      CHECK(contains(out[r].what, "deadline passed"));
    } else {
      // Inside an algorithm a rank may wait on a peer that itself waits on the absent
      // rank; that peer's failure reaches it as a timeout or as peer_lost.
      CHECK((out[r].code == gs::errc::timeout || out[r].code == gs::errc::peer_lost));
    }
    CHECK(contains(out[r].what, "on rank " + std::to_string(r)));
    if (out[r].code == gs::errc::timeout && contains(out[r].what, "(peer 2)")) ++naming_absent;
  }
  CHECK(naming_absent >= 1);
}

// Rank 2 throws before calling; its peers must get peer_lost rather than hang.
template <class A>
void check_peer_lost() {
  constexpr std::size_t n = 4;
  gs::testbed::watchdog wd(60, std::string("peer_lost test, ") + std::string(A::name));
  std::vector<outcome> out(n);
  bool rethrown = false;
  try {
    gs::transport::run_local(n, [&](gs::transport::local& t) {
      if (t.rank() == 2) throw std::runtime_error("rank 2 gives up");
      std::vector<float> v(50000, 1.0f);
      try {
        gs::allreduce<A>(t, std::span<float>(v), gs::op::sum, quick);
      } catch (const gs::error& e) {
        out[t.rank()] = {true, e.code(), e.what()};
      }
    });
  } catch (const std::runtime_error& e) {
    rethrown = std::string(e.what()) == "rank 2 gives up";
  }
  CHECK(rethrown);
  std::size_t naming_lost = 0;
  for (std::size_t r = 0; r < n; ++r) {
    if (r == 2) continue;
    CAPTURE(out[r].what);
    CHECK(out[r].threw);
    CHECK(out[r].code == gs::errc::peer_lost);
    CHECK(contains(out[r].what, "left the group"));
    naming_lost += contains(out[r].what, "(peer 2)");
  }
  CHECK(naming_lost >= 1);
}

}  // namespace

TEST_CASE_TEMPLATE("mismatch raises errc::mismatch on every rank", A, gs::algo::ring,
                   gs::algo::tree, gs::algo::halving_doubling, gs::algo::auto_select) {
  check_mismatches<A>();
}

TEST_CASE_TEMPLATE("a rank that never calls: the others time out naming it", A, gs::algo::ring,
                   gs::algo::tree, gs::algo::halving_doubling, gs::algo::auto_select) {
  SUBCASE("with the consistency check") {
    check_timeout<A>(true);
  }
  SUBCASE("inside the algorithm (check off)") {
    check_timeout<A>(false);
  }
}

TEST_CASE_TEMPLATE("a rank that leaves early: its peers get errc::peer_lost", A, gs::algo::ring,
                   gs::algo::tree, gs::algo::halving_doubling, gs::algo::auto_select) {
  check_peer_lost<A>();
}

#if defined(__linux__)
// A waiting rank whose core is taken by a busy thread, at a raised nice value (what an
// allreducer's progress thread runs at, next to a compute thread or another process):
// every yield may hand the busy thread a whole time slice, so a wait that yields a fixed
// number of times before blocking overran a 0.3 s deadline by 12 s. It must still fail
// with errc::timeout close to its deadline.
TEST_CASE("a waiting rank whose core a busy thread holds still times out at its deadline") {
  gs::testbed::watchdog wd(60, "timeout next to a busy thread");
  cpu_set_t mine;
  REQUIRE(sched_getaffinity(0, sizeof mine, &mine) == 0);
  int cpu = 0;
  while (!CPU_ISSET(cpu, &mine)) ++cpu;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  std::atomic<bool> stop{false}, failed{false};
  double took = -1;
  auto out = run_catching(2, [&](gs::transport::local& t) {
    if (t.rank() == 1) {  // never calls; leaves once rank 0 has failed
      while (!failed.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return;
    }
    REQUIRE(pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0);
    gs::detail::lower_this_thread_priority(10);
    std::thread hog([&] {
      pthread_setaffinity_np(pthread_self(), sizeof one, &one);
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
    std::vector<float> v(1000, 1.0f);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      gs::allreduce<gs::algo::ring>(t, std::span<float>(v), gs::op::sum,
                                    {.timeout = gs::seconds_d{0.3}});
    } catch (...) {
      took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      stop = true;
      failed = true;
      hog.join();
      throw;
    }
    stop = true;
    failed = true;
    hog.join();
  });
  CAPTURE(out[0].what);
  CHECK(out[0].threw);
  CHECK(out[0].code == gs::errc::timeout);
  CHECK(took >= 0.3);
  CHECK(took < 1.3);
}
#endif

TEST_CASE("out-of-place argument errors raise errc::invalid_argument") {
  gs::testbed::watchdog wd(30, "out-of-place argument errors");
  SUBCASE("size mismatch") {
    auto out = run_catching(2, [](gs::transport::local& t) {
      std::vector<float> in(100, 1.0f), o(99);
      gs::allreduce<gs::algo::tree>(t, std::span<const float>(in), std::span<float>(o), gs::op::sum,
                                    quick);
    });
    for (const auto& o : out) {
      CAPTURE(o.what);
      CHECK(o.code == gs::errc::invalid_argument);
      CHECK(contains(o.what, "input has 100 elements but output has 99"));
    }
  }
  SUBCASE("partial overlap") {
    auto out = run_catching(2, [](gs::transport::local& t) {
      std::vector<float> v(150, 1.0f);
      gs::allreduce<gs::algo::halving_doubling>(t, std::span<const float>(v.data(), 100),
                                                std::span<float>(v.data() + 50, 100), gs::op::sum,
                                                quick);
    });
    for (const auto& o : out) {
      CAPTURE(o.what);
      CHECK(o.code == gs::errc::invalid_argument);
      CHECK(contains(o.what, "partly overlap"));
    }
  }
  SUBCASE("the same span for input and output is an in-place call") {
    auto out = run_catching(3, [](gs::transport::local& t) {
      std::vector<std::int64_t> v(1000, static_cast<std::int64_t>(t.rank() + 1));
      gs::allreduce<gs::algo::auto_select>(t, std::span<const std::int64_t>(v),
                                           std::span<std::int64_t>(v), gs::op::sum, quick);
      if (v != std::vector<std::int64_t>(1000, 6)) throw std::logic_error("wrong sum");
    });
    for (const auto& o : out) CHECK_FALSE(o.threw);
  }
}
