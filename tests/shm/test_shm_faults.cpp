// SPDX-License-Identifier: Apache-2.0
// transport::shm under failure: a rank killed with SIGKILL mid-collective, a rank that
// never calls (timeout), ranks that disagree on count or type (mismatch), bootstrap
// errors; check_finite stopping every rank at the chunk holding a NaN; plus the
// segment's mode (0600) and its removal from /dev/shm.
#include <doctest/doctest.h>

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gradsync/algo/auto_select.hpp>
#include <gradsync/algo/direct.hpp>
#include <gradsync/algo/ring.hpp>
#include <gradsync/allreduce.hpp>
#include <gradsync/broadcast.hpp>
#include <gradsync/core/async.hpp>
#include <gradsync/testing/exact_inputs.hpp>
#include <gradsync/transport/shm.hpp>

#include "capture_stderr.hpp"
#include "expect_records.hpp"
#include "fork_ranks.hpp"
#include "watchdog.hpp"

namespace gs = gradsync;
using gs::testbed::rank_env;
using steady = std::chrono::steady_clock;

namespace {

constexpr double kill_deadline = 8.0;  // seconds: the survivors' call timeout

// Four ranks loop over large allreduces with algorithm A; rank `victim` is killed with
// SIGKILL once every rank has completed a few calls. Every survivor must fail with
// peer_lost or timeout well within the deadline, and /dev/shm must be clean.
template <class A>
void kill_one(std::size_t victim) {
  gs::testbed::watchdog wd(60, "shm SIGKILL test");
  const std::string job = gs::testbed::unique_job("kill");
  steady::time_point killed_at{};
  bool segment_gone_while_running = false;
  const auto out =
      gs::testbed::fork_ranks(4, job,
                              [](gs::transport::shm& t, rank_env& env) {
                                gs::call_options opt;
                                opt.timeout = gs::seconds_d(kill_deadline);
                                std::vector<float> v(3 << 20);
                                const auto stop = steady::now() + std::chrono::seconds(30);
                                while (steady::now() < stop) {
                                  gs::allreduce<A>(t, std::span<float>(v), gs::op::sum, opt);
                                  env.bump();
                                }
                              },
                              {.time_limit = 40,
                               .max_records = 16,
                               .configure = {},
                               .while_running = [&](const auto& pids, const auto& progress) {
                                 const auto give_up = steady::now() + std::chrono::seconds(20);
                                 for (;;) {
                                   bool all = true;
                                   for (std::size_t r = 0; r < pids.size(); ++r)
                                     all = all && progress(r) >= 3;
                                   if (all || steady::now() > give_up) break;
                                   std::this_thread::sleep_for(std::chrono::milliseconds(1));
                                 }
                                 segment_gone_while_running = !gs::testbed::segment_exists(job);
                                 ::kill(pids[victim], SIGKILL);
                                 killed_at = steady::now();
                               }});
  const double after_kill = std::chrono::duration<double>(steady::now() - killed_at).count();
  CHECK(segment_gone_while_running);
  CHECK(out[victim].status == -SIGKILL);
  bool named_victim = false;
  for (std::size_t r = 0; r < out.size(); ++r) {
    if (r == victim) continue;
    INFO("rank " << r << ": " << out[r].what);
    CHECK(out[r].status == 3);
    const bool lost_or_timeout = out[r].error_code == static_cast<int>(gs::errc::peer_lost) ||
                                 out[r].error_code == static_cast<int>(gs::errc::timeout);
    CHECK(lost_or_timeout);
    CHECK(out[r].what.find("on rank " + std::to_string(r)) != std::string::npos);
    named_victim |=
        out[r].what.find("(peer " + std::to_string(victim) + ")") != std::string::npos &&
        out[r].what.find("died") != std::string::npos;
  }
  CHECK(named_victim);                // whoever waited on the victim saw its process die
  CHECK(after_kill < kill_deadline);  // detected, not waited out
  CHECK_FALSE(gs::testbed::segment_exists(job));
}

}  // namespace

TEST_CASE("shm: SIGKILL mid two-shot makes every survivor fail fast, /dev/shm clean") {
  kill_one<gs::algo::direct_two_shot>(2);
}

TEST_CASE("shm: SIGKILL mid ring makes every survivor fail fast, /dev/shm clean") {
  kill_one<gs::algo::ring>(1);
}

TEST_CASE("shm: a rank that never calls makes its peer time out, naming peer and op") {
  gs::testbed::watchdog wd(30, "shm timeout test");
  const auto out = gs::testbed::fork_ranks(
      2, gs::testbed::unique_job("timeout"),
      [](gs::transport::shm& t, rank_env&) {
        std::vector<double> v(100, 1.0);
        gs::call_options opt;
        opt.timeout = gs::seconds_d(0.5);
        gs::allreduce<gs::algo::direct_one_shot>(t, std::span<double>(v), gs::op::sum, opt);
        if (t.rank() == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1500));
          opt.timeout = gs::seconds_d(20);  // what ends its wait must be rank 0's failure
        }
        // Rank 1's late call #1 may still complete from rank 0's posted slot; call #2
        // needs rank 0, which has failed.
        gs::allreduce<gs::algo::direct_one_shot>(t, std::span<double>(v), gs::op::sum, opt);
        gs::allreduce<gs::algo::direct_one_shot>(t, std::span<double>(v), gs::op::sum, opt);
      },
      {.time_limit = 20, .max_records = 4, .configure = {}, .while_running = {}});
  INFO("rank 0: " << out[0].what);
  INFO("rank 1: " << out[1].what);
  CHECK(out[0].error_code == static_cast<int>(gs::errc::timeout));
  CHECK(out[0].what.find("on rank 0 (peer 1) in op #1") != std::string::npos);
  CHECK(out[0].seconds < 1.4);
  // Rank 1 arrives late and finds rank 0 gone: peer_lost, not another full timeout.
  CHECK(out[1].error_code == static_cast<int>(gs::errc::peer_lost));
  CHECK(out[1].what.find("(peer 0)") != std::string::npos);
  CHECK(out[1].what.find("failed") != std::string::npos);
  CHECK(out[1].seconds < 1.5 + 5);  // found at once, not after its own 20 s deadline
}

// abort() from another thread: the waiting rank fails at once with errc::aborted, and
// the peer that arrives later finds it failed (peer_lost) instead of waiting its deadline.
TEST_CASE("shm: abort() ends the rank's wait at once and its peer learns it") {
  gs::testbed::watchdog wd(30, "shm abort test");
  const auto out = gs::testbed::fork_ranks(
      2, gs::testbed::unique_job("abort"),
      [](gs::transport::shm& t, rank_env&) {
        std::vector<double> v(1000, 1.0);
        gs::call_options opt;
        opt.timeout = gs::seconds_d(20);
        if (t.rank() == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1000));
          gs::allreduce<gs::algo::ring>(t, std::span<double>(v), gs::op::sum, opt);
          return;
        }
        std::thread killer([&t] {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          t.abort();
        });
        try {
          gs::allreduce<gs::algo::ring>(t, std::span<double>(v), gs::op::sum, opt);
        } catch (...) {
          killer.join();
          throw;
        }
        killer.join();
      },
      {.time_limit = 25, .max_records = 4, .configure = {}, .while_running = {}});
  INFO("rank 0: " << out[0].what);
  INFO("rank 1: " << out[1].what);
  CHECK(out[0].error_code == static_cast<int>(gs::errc::aborted));
  CHECK(out[0].what.find("the transport was aborted") != std::string::npos);
  CHECK(out[0].seconds < 0.6);
  CHECK(out[1].error_code == static_cast<int>(gs::errc::peer_lost));
  CHECK(out[1].what.find("(peer 0)") != std::string::npos);
  CHECK(out[1].seconds < 3);  // found at once, not after its own 20 s deadline
}

// two_level relays a failure of one level to the other through announce_failure: on
// shm the rank is marked failed with the cause, which every waiting peer quotes, and
// which the peers of those peers quote in turn.
TEST_CASE("shm: a failure announced by a rank ends its peers' waits at once, quoting it") {
  gs::testbed::watchdog wd(30, "shm announce test");
  const auto out = gs::testbed::fork_ranks(
      3, gs::testbed::unique_job("announce"),
      [](gs::transport::shm& t, rank_env&) {
        std::vector<float> v(100000, 1.0f);
        gs::call_options opt;
        opt.timeout = gs::seconds_d(20);
        if (t.rank() == 2) {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          t.announce_failure("rank 9 on node-z died (a test)");
          std::this_thread::sleep_for(std::chrono::milliseconds(500));
          return;
        }
        try {
          gs::allreduce<gs::algo::ring>(t, std::span<float>(v), gs::op::sum, opt);
        } catch (const gs::error& e) {  // the parent checks what failure_notice() says too
          throw gs::error(e.code(), e.site(), "notice=[" + t.failure_notice() + "] " + e.what());
        }
      },
      {.time_limit = 25, .max_records = 4, .configure = {}, .while_running = {}});
  for (std::size_t r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << out[r].what);
    CHECK(out[r].error_code == static_cast<int>(gs::errc::peer_lost));
    CHECK(out[r].what.find("notice=[rank ") != std::string::npos);
    CHECK(out[r].what.find(" failed; it reported: ") != std::string::npos);
    CHECK(out[r].what.find("rank 9 on node-z died (a test)") != std::string::npos);
    CHECK(out[r].seconds < 3);  // at once, not after the 20 s deadline
  }
  CHECK(out[2].status == 0);
}

// The stall inspector over shm: rank 0's warning, from the segment's board, names the
// late rank (by its job rank and host when the options give them) and only it.
namespace {
// Rank 2 enters op #1 0.5 s late with GRADSYNC_STALL_WARN=0.2; returns rank 0's stderr.
std::string stalled_call_log(const std::function<void(gs::transport::shm&)>& call) {
  const std::string log = "/tmp/gradsync_shm_stall_" + std::to_string(::getpid()) + ".txt";
  ::setenv("GRADSYNC_STALL_WARN", "0.2", 1);
  const auto out =
      gs::testbed::fork_ranks(3, gs::testbed::unique_job("stall"),
                              [&log, &call](gs::transport::shm& t, rank_env&) {
                                std::vector<double> v(1000, 1.0);
                                gs::allreduce<gs::algo::ring>(t, std::span<double>(v), gs::op::sum);
                                if (t.rank() == 2)
                                  std::this_thread::sleep_for(std::chrono::milliseconds(500));
                                if (t.rank() == 0) {
                                  gs::testbed::capture_stderr cap(log);
                                  call(t);
                                } else {
                                  call(t);
                                }
                              },
                              {.time_limit = 25,
                               .max_records = 4,
                               .configure =
                                   [](gs::transport::shm_options& o) {
                                     o.job_ranks = {10, 11, 12};
                                     o.host = "hostS";
                                   },
                               .while_running = {}});
  ::unsetenv("GRADSYNC_STALL_WARN");
  for (const auto& o : out) CHECK(o.error_code == 0);
  std::ifstream f(log);
  std::stringstream ss;
  ss << f.rdbuf();
  std::remove(log.c_str());
  return ss.str();
}
}  // namespace

TEST_CASE("shm: a stalled call's warning names exactly the rank that has not entered it") {
  gs::testbed::watchdog wd(60, "shm stall test");
  SUBCASE("allreduce, direct two-shot") {
    const std::string text = stalled_call_log([](gs::transport::shm& t) {
      std::vector<double> v(1000, 1.0);
      gs::allreduce<gs::algo::direct_two_shot>(t, std::span<double>(v), gs::op::sum);
    });
    INFO("rank 0's log: " << text);
    CHECK(text.find("stall: rank 10 on hostS has waited") != std::string::npos);
    CHECK(text.find("in op #1 (allreduce direct_two_shot of 1000 float64 (8000 bytes), op sum); "
                    "not yet entered by rank 12 on hostS (still at op #0)") != std::string::npos);
    CHECK(text.find("rank 11 on hostS (") == std::string::npos);
  }
  SUBCASE("broadcast, direct") {
    const std::string text = stalled_call_log([](gs::transport::shm& t) {
      std::vector<float> v(100000, 1.0f);
      gs::broadcast(t, std::span<float>(v), 0);
    });
    INFO("rank 0's log: " << text);
    CHECK(text.find("in op #1 (broadcast bcast_direct of 100000 float32") != std::string::npos);
    CHECK(text.find("not yet entered by rank 12 on hostS (still at op #0)") != std::string::npos);
    CHECK(text.find("rank 11 on hostS (") == std::string::npos);
  }
}

// Part of a larger job (two_level's node level, shm_options_from_mpi): errors name the
// job's ranks and the host, and the ranks inside the node.
TEST_CASE("shm: a group of a larger job names job ranks and the host in its errors") {
  gs::testbed::watchdog wd(30, "shm job-rank naming test");
  const auto out = gs::testbed::fork_ranks(
      2, gs::testbed::unique_job("jobranks"),
      [](gs::transport::shm& t, rank_env&) {
        if (t.rank() == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1500));
          return;  // never calls: rank 0 times out waiting for it
        }
        std::vector<double> v(100, 1.0);
        gs::call_options opt;
        opt.timeout = gs::seconds_d(0.3);
        gs::allreduce<gs::algo::ring>(t, std::span<double>(v), gs::op::sum, opt);
      },
      {.time_limit = 20,
       .max_records = 4,
       .configure =
           [](gs::transport::shm_options& o) {
             o.job_ranks = {4, 6};
             o.host = "hostQ";
           },
       .while_running = {}});
  INFO("rank 0: " << out[0].what);
  CHECK(out[0].error_code == static_cast<int>(gs::errc::timeout));
  CHECK(out[0].what.find("on rank 4 (peer 6) in op #0") != std::string::npos);
  CHECK(out[0].what.find("[rank 4 on hostQ, peer 6 on hostQ; in a sub-group of 2 as rank 0, "
                         "peer 1]") != std::string::npos);
}

// A waiting rank whose core a busy thread holds, at nice +10 (an allreducer's progress
// thread next to a compute thread): its spin-yield-sleep wait must still end close to
// the deadline (each yield may hand the busy thread a whole time slice).
TEST_CASE("shm: a waiter whose core a busy thread holds still times out at its deadline") {
  gs::testbed::watchdog wd(30, "shm timeout next to a busy thread");
  const auto out = gs::testbed::fork_ranks(
      2, gs::testbed::unique_job("busy"),
      [](gs::transport::shm& t, rank_env&) {
        if (t.rank() == 1) {  // never calls
          std::this_thread::sleep_for(std::chrono::milliseconds(1500));
          return;
        }
        cpu_set_t mine, one;
        if (sched_getaffinity(0, sizeof mine, &mine) != 0) throw std::runtime_error("affinity");
        int cpu = 0;
        while (!CPU_ISSET(cpu, &mine)) ++cpu;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        pthread_setaffinity_np(pthread_self(), sizeof one, &one);
        gs::detail::lower_this_thread_priority(10);
        std::atomic<bool> stop{false};
        std::thread hog([&] {
          pthread_setaffinity_np(pthread_self(), sizeof one, &one);
          while (!stop.load(std::memory_order_relaxed)) {
          }
        });
        std::vector<double> v(100, 1.0);
        gs::call_options opt;
        opt.timeout = gs::seconds_d(0.3);
        try {
          gs::allreduce<gs::algo::ring>(t, std::span<double>(v), gs::op::sum, opt);
        } catch (...) {
          stop = true;
          hog.join();
          throw;
        }
        stop = true;
        hog.join();
      },
      {.time_limit = 20, .max_records = 4, .configure = {}, .while_running = {}});
  INFO("rank 0: " << out[0].what);
  CHECK(out[0].error_code == static_cast<int>(gs::errc::timeout));
  CHECK(out[0].seconds >= 0.3);
  CHECK(out[0].seconds < 1.3);
}

TEST_CASE("shm: mismatched counts or types raise mismatch on every rank, then work again") {
  gs::testbed::watchdog wd(60, "shm mismatch test");
  const auto out = gs::testbed::fork_ranks(
      3, gs::testbed::unique_job("mismatch"),
      [](gs::transport::shm& t, rank_env& env) {
        const std::size_t r = t.rank(), n = t.size();
        auto expect_mismatch = [&](const char* label, const char* field, auto&& call) {
          env.report_error(label, gs::errc::mismatch, field, call);
        };
        auto count_of = [&](std::size_t base) { return base + (r == 1 ? 1 : 0); };
        std::vector<float> small(count_of(10)), large(count_of(2000000));
        expect_mismatch("one-shot count", "count 10 vs 11", [&] {
          gs::allreduce<gs::algo::direct_one_shot>(t, std::span<float>(small), gs::op::sum);
        });
        expect_mismatch("two-shot count", "count 2000000 vs 2000001", [&] {
          gs::allreduce<gs::algo::direct_two_shot>(t, std::span<float>(large), gs::op::sum);
        });
        expect_mismatch("ring count", "count 10 vs 11", [&] {
          gs::allreduce<gs::algo::ring>(t, std::span<float>(small), gs::op::sum);
        });
        expect_mismatch("auto count", "count 10 vs 11", [&] {
          gs::allreduce<gs::algo::auto_select>(t, std::span<float>(small), gs::op::sum);
        });
        expect_mismatch("one-shot type", "element type float32 vs float64", [&] {
          if (r == 2) {
            std::vector<double> d(10);
            gs::allreduce<gs::algo::direct_one_shot>(t, std::span<double>(d), gs::op::sum);
          } else {
            std::vector<float> f(10);
            gs::allreduce<gs::algo::direct_one_shot>(t, std::span<float>(f), gs::op::sum);
          }
        });
        expect_mismatch("one-shot op", "op sum vs max", [&] {
          std::vector<float> f(10);
          if (r == 2) {
            gs::allreduce<gs::algo::direct_one_shot>(t, std::span<float>(f), gs::op::max);
          } else {
            gs::allreduce<gs::algo::direct_one_shot>(t, std::span<float>(f), gs::op::sum);
          }
        });
        // The transport stays usable after a mismatch.
        std::vector<std::int32_t> v(777);
        gs::testing::fill_inputs(std::span<std::int32_t>(v), gs::reduce_op::sum, r, n);
        gs::allreduce<gs::algo::direct_one_shot>(t, std::span<std::int32_t>(v), gs::op::sum);
        gs::testing::fill_inputs(std::span<std::int32_t>(v), gs::reduce_op::sum, r, n);
        gs::allreduce<gs::algo::direct_two_shot>(t, std::span<std::int32_t>(v), gs::op::sum);
        env.report(
            "after",
            gs::testing::count_wrong(std::span<const std::int32_t>(v), gs::reduce_op::sum, n), 0);
      },
      {.time_limit = 40, .max_records = 16, .configure = {}, .while_running = {}});
  gs::testbed::expect_every_record_right(out, 7);
}

// Staging buffers of 192 KiB: two-shot chunks of a third, 16384 floats.
constexpr std::size_t finite_chunk = 16384;

TEST_CASE("shm: check_finite stops every rank at the chunk holding a NaN, before it is summed") {
  gs::testbed::watchdog wd(60, "shm check_finite");
  const auto out = gs::testbed::fork_ranks(
      3, gs::testbed::unique_job("finite"),
      [](gs::transport::shm& t, rank_env& env) {
        const std::size_t r = t.rank(), n = t.size();
        constexpr float nan = std::numeric_limits<float>::quiet_NaN();
        constexpr float inf = std::numeric_limits<float>::infinity();
        const gs::call_options check{.check_finite = true};
        auto input = [&](std::span<float> v) {
          gs::testing::fill_inputs(v, gs::reduce_op::sum, r, n);
        };
        // Elements in [from, to) whose bits differ from the input's.
        auto changed = [&](std::span<const float> v, std::size_t from, std::size_t to) {
          std::vector<float> in(v.size());
          input(std::span<float>(in));
          std::size_t c = 0;
          for (std::size_t i = from; i < to; ++i) {
            c += std::bit_cast<std::uint32_t>(in[i]) != std::bit_cast<std::uint32_t>(v[i]);
          }
          return c;
        };
        auto non_finite = [](std::span<const float> v) {
          std::size_t c = 0;
          for (float x : v) c += !std::isfinite(x);
          return c;
        };
        auto expect = [&](const std::string& label, const char* part, auto&& call) {
          env.report_error(label, gs::errc::non_finite, part, call);
        };
        const std::size_t count = 7 * finite_chunk + 3;  // 8 chunks, the last of 3 elements

        // A NaN in the first chunk, in the slice its rank reduces itself (not staged): found
        // before anything is reduced.
        std::vector<float> v(count);
        input(std::span<float>(v));
        if (r == 1) v[6000] = nan;
        expect("two-shot, chunk 0",
               "rank 1 has NaN in its input at element 6000; nothing was reduced", [&] {
                 gs::allreduce<gs::algo::auto_select>(t, std::span<float>(v), gs::op::sum, check);
               });
        env.report("chunk 0: data as it was", changed(v, 0, count) - (r == 1 ? 1 : 0), 0);

        // Two ranks with a bad value in chunk 4, one more in chunk 6: rank 0 is named (the
        // lowest rank of the first bad chunk), chunks 0-2 are reduced, 4 on untouched.
        input(std::span<float>(v));
        const std::size_t at0 = 4 * finite_chunk + 7000, at2 = 4 * finite_chunk + 100;
        if (r == 0) v[at0] = nan;
        if (r == 2) v[at2] = -inf;
        if (r == 1) v[6 * finite_chunk + 1] = inf;
        expect("two-shot, chunk 4",
               "rank 0 has NaN in its input at element 72536 (1 more rank(s) have one too); no "
               "rank summed it, but the first 65536 elements were already reduced in place",
               [&] {
                 gs::allreduce<gs::algo::direct_two_shot>(t, std::span<float>(v), gs::op::sum,
                                                          check);
               });
        env.report("chunk 4: chunks 0-2 reduced",
                   gs::testing::count_wrong(std::span<const float>(v).first(3 * finite_chunk),
                                            gs::reduce_op::sum, n),
                   0);
        env.report("chunk 4: chunks 4-7 as they were", changed(v, 4 * finite_chunk, count) - 1, 0);
        env.report("chunk 4: no rank summed a bad value", non_finite(v) - 1, 0);

        // Registered buffers and the one-shot check the whole input first.
        auto reg = t.allocate<float>(count);
        input(reg.span());
        if (r == 2) reg.span()[6 * finite_chunk] = nan;
        expect("registered", "rank 2 has NaN in its input at element 98304; nothing was reduced",
               [&] { gs::allreduce<gs::algo::auto_select>(t, reg.span(), gs::op::sum, check); });
        env.report("registered: data as it was", changed(reg.span(), 0, count) - (r == 2 ? 1 : 0),
                   0);
        std::vector<float> small(1000);
        input(std::span<float>(small));
        if (r == 0) small[999] = -inf;
        expect("one-shot", "rank 0 has -Inf in its input at element 999; nothing was reduced", [&] {
          gs::allreduce<gs::algo::auto_select>(t, std::span<float>(small), gs::op::sum, check);
        });
        env.report("one-shot: data as it was", changed(small, 0, small.size()) - (r == 0 ? 1 : 0),
                   0);

        // Ranks that disagree on checking are a mismatch, not a hang.
        input(std::span<float>(v));
        env.report_error("check on one rank only", gs::errc::mismatch, "check_finite on vs off",
                         [&] {
                           gs::allreduce<gs::algo::auto_select>(t, std::span<float>(v), gs::op::sum,
                                                                {.check_finite = r != 1});
                         });

        // Finite inputs pass the check with exact results, staged and registered.
        input(std::span<float>(v));
        gs::allreduce<gs::algo::auto_select>(t, std::span<float>(v), gs::op::sum, check);
        env.report("after: staged",
                   gs::testing::count_wrong(std::span<const float>(v), gs::reduce_op::sum, n), 0);
        input(reg.span());
        gs::allreduce<gs::algo::auto_select>(t, reg.span(), gs::op::sum, check);
        env.report(
            "after: registered",
            gs::testing::count_wrong(std::span<const float>(reg.span()), gs::reduce_op::sum, n), 0);
      },
      {.time_limit = 40,
       .max_records = 16,
       .configure =
           [](gs::transport::shm_options& o) {
             o.exchange_bytes = 3 * finite_chunk * sizeof(float);
             o.heap_bytes = 4 << 20;
           },
       .while_running = {}});
  gs::testbed::expect_every_record_right(out, 13);
}

TEST_CASE("shm: the segment is created with mode 0600 and unlinked once all attached") {
  gs::testbed::watchdog wd(30, "shm segment mode test");
  const std::string job = gs::testbed::unique_job("mode");
  const std::string path = "/dev/shm" + gs::transport::detail::segment_name(job);
  std::fflush(stdout);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // rank 0 of 2: creates the segment and waits for rank 1
    int code = 1;
    try {
      gs::transport::shm t(0, 2, job);
      std::vector<float> v(5, 2.0f);
      gs::allreduce<gs::algo::direct_one_shot>(t, std::span<float>(v), gs::op::sum);
      code = v == std::vector<float>(5, 5.0f) ? 0 : 2;
    } catch (...) {
    }
    ::_exit(code);
  }
  struct stat st {};
  const auto give_up = steady::now() + std::chrono::seconds(10);
  while (::stat(path.c_str(), &st) != 0 && steady::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(st.st_uid == ::geteuid());
  {
    gs::transport::shm t(1, 2, job);
    CHECK_FALSE(gs::testbed::segment_exists(job));  // gone as soon as both attached
    CHECK(t.segment_name() == gs::transport::detail::segment_name(job));
    std::vector<float> v(5, 3.0f);
    gs::allreduce<gs::algo::direct_one_shot>(t, std::span<float>(v), gs::op::sum);
    CHECK(v == std::vector<float>(5, 5.0f));
  }
  int status = -1;
  ::waitpid(child, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("shm: bootstrap errors are reported, and leave nothing in /dev/shm") {
  gs::testbed::watchdog wd(30, "shm bootstrap test");
  ::unsetenv("GRADSYNC_SHM_JOB");
  ::setenv("GRADSYNC_SHM_RANK", "0", 1);
  ::setenv("GRADSYNC_SHM_SIZE", "2", 1);
  try {
    (void)gs::transport::shm::from_env();
    FAIL("from_env without GRADSYNC_SHM_JOB must throw");
  } catch (const gs::error& e) {
    CHECK(e.code() == gs::errc::invalid_argument);
    CHECK(std::string(e.what()).find("GRADSYNC_SHM_JOB") != std::string::npos);
  }
  ::setenv("GRADSYNC_SHM_RANK", "two", 1);
  ::setenv("GRADSYNC_SHM_JOB", "x", 1);
  CHECK_THROWS_AS((void)gs::transport::shm::from_env(), gs::error);
  CHECK_THROWS_AS(gs::transport::shm(2, 2, "x"), gs::error);

  // Rank 0 alone in a group of 2, then of 3: it times out during the bootstrap, names
  // every missing rank and removes the segment.
  for (const auto& [size, missing] : {std::pair<std::size_t, const char*>{2, "(missing: rank 1)"},
                                      {3, "(missing: ranks 1, 2)"}}) {
    const std::string job = gs::testbed::unique_job(size == 2 ? "lonely2" : "lonely3");
    try {
      gs::transport::shm_options o;
      o.size = size;
      o.job = job;
      o.bootstrap_timeout = gs::seconds_d(0.3);
      gs::transport::shm t(o);
      FAIL("a group with a missing rank must not form");
    } catch (const gs::error& e) {
      const std::string m = e.what();
      CHECK(e.code() == gs::errc::timeout);
      CHECK_MESSAGE(m.find("1 of " + std::to_string(size) + " ranks attached") != std::string::npos,
                    m);
      CHECK_MESSAGE(m.find(missing) != std::string::npos, m);
      CHECK_MESSAGE(
          m.find("; rank 1 never claimed its place in the job id's roster (not "
                 "started, or started with another GRADSYNC_SHM_JOB)") != std::string::npos,
          m);
    }
    CHECK_FALSE(gs::testbed::segment_exists(job));
  }
}

namespace {

// The pid that holds rank r's place in the roster `name` (0: free, or no roster yet).
int roster_claimant(const std::string& name, std::size_t r) {
  namespace d = gs::transport::detail;
  const std::size_t at = sizeof(d::roster_header) + r * sizeof(d::roster_claim);
  return gs::testbed::read_shm(name, at + sizeof(d::roster_claim), 0, [&](std::byte* p) {
    auto& c = *reinterpret_cast<d::roster_claim*>(p + at);
    return static_cast<int>(d::shared_word(c.pid).load(std::memory_order_acquire));
  });
}

void await_claim(const std::string& roster, std::size_t r) {
  while (roster_claimant(roster, r) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

// Makes rank `rank` of `size` of `job` with a 30 s bootstrap deadline; keeps its error.
void bootstrap(std::size_t rank, std::size_t size, const std::string& job, int& code,
               std::string& why) {
  gs::transport::shm_options o;
  o.rank = rank;
  o.size = size;
  o.job = job;
  o.bootstrap_timeout = gs::seconds_d(30);
  try {
    gs::transport::shm t(o);
    why = "the group formed";
  } catch (const gs::error& e) {
    code = static_cast<int>(e.code());
    why = e.what();
  }
}

double seconds_since(steady::time_point t0) {
  return std::chrono::duration<double>(steady::now() - t0).count();
}

}  // namespace

// A crash between a rank's roster claim and its segment: the ranks waiting for it learn
// it from the roster, well before their 30 s deadline.
TEST_CASE("shm bootstrap: a rank that claimed its place and exited stops the others at once") {
  gs::testbed::watchdog wd(60, "claimed and exited");
  namespace d = gs::transport::detail;
  const std::string job = gs::testbed::unique_job("claimed");
  const std::string roster = d::roster_name(job);
  std::vector<int> code(2, -1);
  std::vector<std::string> why(2);
  const auto t0 = steady::now();
  std::vector<std::thread> th;
  for (std::size_t r = 0; r < 2; ++r) {
    th.emplace_back([&, r] { bootstrap(r, 3, job, code[r], why[r]); });
  }
  await_claim(roster, 0);
  await_claim(roster, 1);
  std::fflush(stdout);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // rank 2: claims its place, then exits without its destructors
    try {
      d::shm_roster claim(2, 3, job, gs::deadline::after(gs::seconds_d{5}));
      ::_exit(0);
    } catch (...) {
      ::_exit(1);
    }
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  for (auto& t : th) t.join();
  CHECK(seconds_since(t0) < 15);
  for (std::size_t r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << why[r]);
    CHECK(code[r] == static_cast<int>(gs::errc::peer_lost));
    CHECK(why[r].find("rank 2 (pid " + std::to_string(child) +
                      ") claimed its place in the job id's roster and exited before attaching "
                      "the segment: the group cannot form") != std::string::npos);
  }
  CHECK_FALSE(gs::testbed::segment_exists(job));
  CHECK_FALSE(gs::testbed::shm_name_exists(roster));
}

TEST_CASE("shm bootstrap: rank 0 exiting before it creates the segment stops rank 1 at once") {
  gs::testbed::watchdog wd(60, "rank 0 exited");
  namespace d = gs::transport::detail;
  const std::string job = gs::testbed::unique_job("creator");
  const std::string roster = d::roster_name(job);
  int go[2];
  REQUIRE(::pipe(go) == 0);
  std::fflush(stdout);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // rank 0: creates the roster, then exits holding it, before any segment
    ::close(go[1]);
    try {
      d::shm_roster claim(0, 2, job, gs::deadline::after(gs::seconds_d{5}));
      char c = 0;
      (void)::read(go[0], &c, 1);  // until the test closes its end
      ::_exit(0);
    } catch (...) {
      ::_exit(1);
    }
  }
  ::close(go[0]);
  await_claim(roster, 0);
  int code = -1;
  std::string why;
  const auto t0 = steady::now();
  std::thread rank1([&] { bootstrap(1, 2, job, code, why); });
  await_claim(roster, 1);  // rank 1 holds its place and waits for the segment
  ::close(go[1]);
  int status = 0;
  ::waitpid(child, &status, 0);
  REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  rank1.join();
  CHECK(seconds_since(t0) < 15);
  INFO(why);
  CHECK(code == static_cast<int>(gs::errc::peer_lost));
  CHECK(why.find("rank 0 (pid " + std::to_string(child) +
                 ") claimed its place in the job id's roster and exited before creating the "
                 "segment: the group cannot form") != std::string::npos);
  CHECK_FALSE(gs::testbed::shm_name_exists(roster));
}

TEST_CASE("shm: the spin policy drops the long spin when waits outlast it, and probes again") {
  using gradsync::transport::detail::spin_budget;
  using gradsync::transport::detail::spin_policy;
  using std::chrono::microseconds;
  spin_policy p(spin_budget{std::chrono::milliseconds(2), 16});
  auto brief_waits = [&] {  // waits until the next probe with the long spin
    std::size_t n = 0;
    for (; p.brief(); ++n) {
      CHECK(p.next().spin == microseconds(5));
      p.outcome(false);  // ignored: a brief wait says nothing about the long spin
    }
    return n;
  };
  CHECK(p.next().spin == std::chrono::milliseconds(2));
  p.outcome(true);
  p.next();
  p.outcome(false);  // one long wait: maybe a late peer
  CHECK_FALSE(p.brief());
  p.next();
  p.outcome(false);  // two in a row: spinning does not pay here
  CHECK(brief_waits() == 64);
  for (int probe = 0; probe < 2; ++probe) {
    p.next();
    p.outcome(false);
  }
  CHECK(brief_waits() == 128);  // the probes failed: back off
  p.next();
  p.outcome(true);  // a probe that ends while spinning resets the backoff
  CHECK_FALSE(p.brief());
  for (int probe = 0; probe < 2; ++probe) {
    p.next();
    p.outcome(false);
  }
  CHECK(brief_waits() == 64);
  for (int round = 0; round < 12; ++round) {
    for (int probe = 0; probe < 2; ++probe) {
      p.next();
      p.outcome(false);
    }
    CHECK(brief_waits() <= 4096);  // capped
  }
}
