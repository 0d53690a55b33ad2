// SPDX-License-Identifier: Apache-2.0
// transport abort(): the wait in flight fails with errc::aborted within milliseconds
// instead of waiting out its deadline, and so does every later call; from another thread
// and from a signal handler; on local, a two_level of locals and through an allreducer.
#include <doctest/doctest.h>

#include <csignal>
#include <chrono>
#include <future>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <gradsync/gradsync.hpp>

#include "two_level_ranks.hpp"
#include "watchdog.hpp"
#include "text.hpp"

namespace gs = gradsync;
using gradsync::testbed::contains;
using local = gs::transport::local;
using clk = std::chrono::steady_clock;

namespace {

double since(clk::time_point t0) {
  return std::chrono::duration<double>(clk::now() - t0).count();
}
gs::call_options long_deadline() {
  gs::call_options o;
  o.timeout = gs::seconds_d(30);
  return o;
}

// The transport a SIGUSR1 aborts (a test's own; the library keeps no such state).
std::atomic<local*> signal_target{nullptr};
extern "C" void abort_on_signal(int) {
  if (local* t = signal_target.load()) t->abort();
}

}  // namespace

TEST_CASE("abort: the wait in flight and every later one fail at once with errc::aborted") {
  gs::testbed::watchdog wd(60, "abort local");
  for (bool by_signal : {false, true}) {
    if (by_signal) std::signal(SIGUSR1, abort_on_signal);
    std::string first, later;
    double first_s = 0, later_s = 0;
    std::promise<void> done;
    auto released = done.get_future().share();
    gs::transport::run_local(2, [&](local& t) {
      std::vector<float> v(1000, 1.0f);
      if (t.rank() == 1) {
        released.wait();  // never joins the call: rank 0 waits on it until aborted
        return;
      }
      std::thread killer([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (by_signal) {
          signal_target = &t;
          std::raise(SIGUSR1);
        } else {
          t.abort();
        }
      });
      auto t0 = clk::now();
      try {
        gs::allreduce<gs::algo::ring>(t, std::span<float>(v), gs::op::sum, long_deadline());
      } catch (const gs::error& e) {
        CHECK(e.code() == gs::errc::aborted);
        first = e.what();
      }
      first_s = since(t0);
      killer.join();
      t0 = clk::now();
      try {
        gs::allreduce<gs::algo::tree>(t, std::span<float>(v), gs::op::sum, long_deadline());
      } catch (const gs::error& e) {
        CHECK(e.code() == gs::errc::aborted);
        later = e.what();
      }
      later_s = since(t0);
      done.set_value();
    });
    CAPTURE(by_signal);
    std::signal(SIGUSR1, SIG_DFL);
    signal_target = nullptr;
    CHECK(contains(first, "gradsync aborted on rank 0"));
    CHECK(contains(first,
                   "the transport was aborted (abort() was called on this rank) while this "
                   "rank waited to"));
    CHECK(first_s > 0.09);
    CHECK(first_s < 1.0);  // the deadline was 30 s
    CHECK(contains(later, "gradsync aborted on rank 0"));
    CHECK(later_s < 0.5);
  }
}

TEST_CASE("abort: a two_level aborts both levels; an allreducer's step reports it") {
  gs::testbed::watchdog wd(60, "abort two_level");
  using two_level = gs::transport::two_level<local, local>;
  std::vector<std::string> msgs(4);
  std::vector<double> secs(4);
  std::promise<void> done;
  auto released = done.get_future().share();
  const auto errors = gs::testbed::run_two_level_shape(2, 2, [&](local a, local b) {
    two_level t(std::move(a), std::move(b));
    const std::size_t r = t.rank();
    if (r != 0) {
      released.wait();
      return;
    }
    gs::allreducer_options o;
    o.call = long_deadline();
    gs::allreducer<two_level, gs::algo::hierarchical<>, gs::fusion::bucket<1 << 20>> ar(t, o);
    std::vector<float> g(5000, 1.0f);
    ar.add(std::span<float>(g), "w");
    // commit() is collective: skip it and use the grouped call, which needs the peers
    // only once it sends.
    std::thread killer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      t.abort();
    });
    const auto t0 = clk::now();
    try {
      ar.allreduce(std::span<float>(g), gs::op::sum);
    } catch (const gs::error& e) {
      CHECK(e.code() == gs::errc::aborted);
      msgs[r] = e.what();
    }
    secs[r] = since(t0);
    killer.join();
    done.set_value();
  });
  CHECK(errors[0] == "");
  CHECK(contains(msgs[0], "the transport was aborted"));
  CHECK(secs[0] < 1.0);
}
