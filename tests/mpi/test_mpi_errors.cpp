// SPDX-License-Identifier: Apache-2.0
// Cross-rank mistakes on transport::mpi end quickly with the right error on every rank:
// one rank with a different count, element type, op or algorithm -> errc::mismatch
// naming the ranks and values; a rank that comes late -> errc::timeout on the others,
// and the late rank's own call ends too (timeout or mismatch), so the job finishes
// cleanly. Each case uses its own transport (its own communicator context), so stale
// messages of a failed call cannot match a later case.
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <gradsync/algo/native.hpp>
#include <gradsync/gradsync.hpp>
#include <gradsync/testing/exact_inputs.hpp>
#include <gradsync/transport/mpi.hpp>

#include "capture_stderr.hpp"
#include "mpi_harness.hpp"
#include "ring_then_flip.hpp"

namespace gs = gradsync;
using gs::testbed::contains;

namespace {

using clk = std::chrono::steady_clock;
double since(clk::time_point t0) {
  return std::chrono::duration<double>(clk::now() - t0).count();
}

gs::call_options within(double s, bool check = true) {
  return {gs::seconds_d{s}, check};
}

// After an agreed mismatch the transport is still in step on every rank.
template <class A>
void still_works(gs::transport::mpi& t) {
  std::vector<float> v(1000);
  gs::testing::fill_inputs(std::span<float>(v), gs::reduce_op::sum, t.rank(), t.size());
  gs::allreduce<A>(t, std::span<float>(v), gs::op::sum, within(30));
  GS_CHECK_MSG(
      gs::testing::count_wrong(std::span<const float>(v), gs::reduce_op::sum, t.size()) == 0,
      "the call after a mismatch is wrong");
}

// Runs `call` (which must throw errc::mismatch on every rank) and checks the message
// holds every piece of `want` and that it came back quickly.
template <class F>
void expect_mismatch(F&& call, const std::vector<std::string>& want) {
  const auto t0 = clk::now();
  const std::string m = GS_CHECK_ERROR(call(), gs::errc::mismatch);
  GS_CHECK_MSG(since(t0) < 5.0, "mismatch took " + std::to_string(since(t0)) + " s");
  for (const auto& w : want) GS_CHECK_MSG(contains(m, w), "'" + w + "' not in: " + m);
}

template <class A>
void count_mismatch() {
  gs::transport::mpi t{MPI_COMM_WORLD};
  if (t.size() < 2) GS_SKIP("needs 2 ranks");
  const std::size_t odd = t.size() - 1;
  std::vector<float> v(t.rank() == odd ? 101 : 100);
  const std::string who =
      "rank " + std::to_string(odd) + " differs from rank 0 in count 100 vs 101";
  expect_mismatch([&] { gs::allreduce<A>(t, std::span<float>(v), gs::op::sum, within(10)); },
                  {"on rank " + std::to_string(t.rank()), who, "1 rank(s) differ"});
  still_works<A>(t);
}

template <class A>
void type_mismatch() {
  gs::transport::mpi t{MPI_COMM_WORLD};
  if (t.size() < 2) GS_SKIP("needs 2 ranks");
  // Rank 0 is the odd one here: every other rank is reported against it.
  std::vector<float> f(64);
  std::vector<double> d(64);
  expect_mismatch(
      [&] {
        if (t.rank() == 0) {
          gs::allreduce<A>(t, std::span<double>(d), gs::op::sum, within(10));
        } else {
          gs::allreduce<A>(t, std::span<float>(f), gs::op::sum, within(10));
        }
      },
      {"rank 1 differs from rank 0 in element type float64 vs float32",
       std::to_string(t.size() - 1) + " rank(s) differ"});
  still_works<A>(t);
}

template <class A>
void op_mismatch() {
  gs::transport::mpi t{MPI_COMM_WORLD};
  if (t.size() < 2) GS_SKIP("needs 2 ranks");
  const std::size_t odd = t.size() / 2;
  std::vector<std::int32_t> v(10);
  expect_mismatch(
      [&] {
        if (t.rank() == odd) {
          gs::allreduce<A>(t, std::span<std::int32_t>(v), gs::op::max, within(10));
        } else {
          gs::allreduce<A>(t, std::span<std::int32_t>(v), gs::op::sum, within(10));
        }
      },
      {"rank " + std::to_string(odd) + " differs from rank 0 in op sum vs max"});
  still_works<A>(t);
}

// The last rank comes 0.6 s late; everyone else gives up after 0.25 s with a timeout
// that names it and the call. The late rank then calls with a different count and a
// short timeout: it must end too (timeout, or mismatch against stale headers).
template <class A>
void late_rank() {
  gs::transport::mpi t{MPI_COMM_WORLD};
  if (t.size() < 2) GS_SKIP("needs 2 ranks");
  const std::size_t late = t.size() - 1;
  std::vector<float> v(t.rank() == late ? 1001 : 1000);
  if (t.rank() != late) {
    const auto t0 = clk::now();
    const std::string m = GS_CHECK_ERROR(
        gs::allreduce<A>(t, std::span<float>(v), gs::op::sum, within(0.25)), gs::errc::timeout);
    const double s = since(t0);
    GS_CHECK_MSG(s >= 0.24 && s < 3.0, "timeout after " + std::to_string(s) + " s");
    GS_CHECK_MSG(contains(m, "on rank " + std::to_string(t.rank())) && contains(m, "in op #0") &&
                     contains(m, "(peer "),
                 m);
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    const auto t0 = clk::now();
    try {
      gs::allreduce<A>(t, std::span<float>(v), gs::op::sum, within(0.25));
      GS_CHECK_MSG(false, "the late rank's call succeeded alone");
    } catch (const gs::error& e) {
      GS_CHECK_MSG(e.code() == gs::errc::timeout || e.code() == gs::errc::mismatch, e.what());
    }
    GS_CHECK_MSG(since(t0) < 3.0, "late rank took " + std::to_string(since(t0)) + " s");
  }
  gs::testbed::keep_until_exit(std::move(t));  // the late rank's messages may be in flight
}

using ring_then_flip = gs::testbed::ring_then_flip<gs::testbed::last_rank>;

gs::call_options verified(double s) {
  gs::call_options o = within(s);
  o.verify = true;
  return o;
}

}  // namespace

GS_MPI_TEST("errors: verify passes sound calls and names the rank of a corrupted result", 60) {
  gs::transport::mpi t{MPI_COMM_WORLD};
  for (std::size_t count : {std::size_t{1}, std::size_t{1000}, std::size_t{100003}}) {
    std::vector<float> v(count);
    gs::testing::fill_inputs(std::span<float>(v), gs::reduce_op::sum, t.rank(), t.size());
    gs::allreduce<gs::algo::ring>(t, std::span<float>(v), gs::op::sum, verified(30));
    gs::allreduce<gs::algo::native>(t, std::span<float>(v), gs::op::max, verified(30));
    GS_CHECK(gs::testing::count_wrong(std::span<const float>(v), gs::reduce_op::sum, t.size()) ==
             0);
  }
  if (t.size() < 2) GS_SKIP("the corrupted case needs 2 ranks");
  std::vector<std::int64_t> w(5000, 7);
  const auto t0 = clk::now();
  const std::string m = GS_CHECK_ERROR(
      gs::allreduce<ring_then_flip>(t, std::span<std::int64_t>(w), gs::op::sum, verified(10)),
      gs::errc::diverged);
  GS_CHECK_MSG(since(t0) < 5.0, "divergence took " + std::to_string(since(t0)) + " s");
  const std::string who = "rank " + std::to_string(t.size() - 1) + ": hash 0x";
  GS_CHECK_MSG(contains(m, who), "'" + who + "' not in: " + m);
  GS_CHECK_MSG(contains(m, "1 rank(s) hold a different result than rank 0"), m);
  GS_CHECK_MSG(contains(m, "of 40000 bytes"), m);
  still_works<gs::algo::ring>(t);  // the transport is still in step
}

GS_MPI_TEST("errors: check_finite names the job's rank and its host, on every rank", 60) {
  gs::transport::mpi t{MPI_COMM_WORLD};
  if (t.size() < 2) GS_SKIP("needs 2 ranks");
  char host[256] = {};
  int len = 0;
  MPI_Get_processor_name(host, &len);
  const std::size_t bad = t.size() - 1;
  const std::string bad_host = host;  // every rank of this test runs on this host
  std::vector<float> v(10000, 1.0f);
  if (t.rank() == bad) v[4321] = std::numeric_limits<float>::quiet_NaN();
  gs::call_options o = within(20);
  o.check_finite = true;
  const std::string m = GS_CHECK_ERROR(
      gs::allreduce<gs::algo::ring>(t, std::span<float>(v), gs::op::sum, o), gs::errc::non_finite);
  const std::string want =
      "rank " + std::to_string(bad) + " on " + bad_host + " has NaN in its input at element 4321";
  GS_CHECK_MSG(contains(m, want), "'" + want + "' not in: " + m);
  GS_CHECK_MSG(v[0] == 1.0f, "the input was changed");
  still_works<gs::algo::ring>(t);
}

// abort() from another thread while waiting for a late rank: errc::aborted at once on
// the aborted rank (its deadline is 20 s); the others time out as they would on a lost rank.
GS_MPI_TIMING_TEST("errors: abort() ends the wait in flight and every later one", 30) {
  gs::transport::mpi t{MPI_COMM_WORLD};
  if (t.size() < 2) GS_SKIP("needs 2 ranks");
  const std::size_t late = t.size() - 1;
  std::vector<float> v(1000, 1.0f);
  if (t.rank() == 0) {
    std::thread killer([&t] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      t.abort();
    });
    auto t0 = clk::now();
    const std::string m = GS_CHECK_ERROR(
        gs::allreduce<gs::algo::ring>(t, std::span<float>(v), gs::op::sum, within(20)),
        gs::errc::aborted);
    killer.join();
    GS_CHECK_MSG(since(t0) < 1.0, "abort took " + std::to_string(since(t0)) + " s");
    GS_CHECK_MSG(contains(m,
                          "the transport was aborted (abort() was called on this rank) while "
                          "this rank waited to"),
                 m);
    t0 = clk::now();
    GS_CHECK_ERROR(gs::allreduce<gs::algo::native>(t, std::span<float>(v), gs::op::sum, within(20)),
                   gs::errc::aborted);
    GS_CHECK_MSG(since(t0) < 0.5, "a later call took " + std::to_string(since(t0)) + " s");
  } else {
    // Late enough that rank 0 still waits at its abort (0.1 s); the others' deadline
    // leaves 0.4 s before their failure could reach rank 0 first.
    if (t.rank() == late) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    try {
      gs::allreduce<gs::algo::ring>(t, std::span<float>(v), gs::op::sum, within(0.5));
      GS_CHECK_MSG(false, "a call without rank 0 succeeded");
    } catch (const gs::error& e) {
      GS_CHECK_MSG(e.code() == gs::errc::timeout || e.code() == gs::errc::mismatch, e.what());
    }
  }
  gs::testbed::keep_until_exit(std::move(t));  // messages to rank 0 may be in flight
}

// The stall inspector over MPI: the stalled ranks ask every peer where it is (answered
// from the peers' own waits); rank 0's warning names exactly the late rank, with its host,
// as not answering (it sleeps outside gradsync), and none of the waiting ranks.
GS_MPI_TIMING_TEST("errors: a stall warning names exactly the rank that has not entered the call",
                   60) {
  ::setenv("GRADSYNC_STALL_WARN", "0.3", 1);
  gs::transport::mpi t{MPI_COMM_WORLD};
  ::unsetenv("GRADSYNC_STALL_WARN");
  if (t.size() < 2) GS_SKIP("needs 2 ranks");
  const std::size_t late = t.size() - 1;
  char host[256] = {};
  int len = 0;
  MPI_Get_processor_name(host, &len);
  std::vector<float> v(10000, 1.0f);
  gs::allreduce<gs::algo::ring>(t, std::span<float>(v), gs::op::sum, within(20));
  const std::string log = "/tmp/gradsync_mpi_stall_" + std::to_string(::getpid()) + ".txt";
  std::string text;
  if (t.rank() == late) std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  {
    gs::testbed::capture_stderr cap(log);
    gs::allreduce<gs::algo::ring>(t, std::span<float>(v), gs::op::sum, within(20));
    text = cap.text();
  }
  std::remove(log.c_str());
  if (t.rank() == 0) {
    // The late rank sleeps outside gradsync, so it cannot answer: named as such.
    const std::string want = "not yet entered by rank " + std::to_string(late) + " on " + host +
                             " (not in a gradsync call";
    GS_CHECK_MSG(contains(text, "stall: rank 0 on " + std::string(host) + " has waited"), text);
    GS_CHECK_MSG(contains(text, "in op #1 (allreduce ring of 10000 float32"), text);
    GS_CHECK_MSG(contains(text, want), "'" + want + "' not in: " + text);
    for (std::size_t q = 1; q < late; ++q) {
      GS_CHECK_MSG(!contains(text, "rank " + std::to_string(q) + " on " + host + " ("), text);
    }
  }
}

GS_MPI_TEST("errors: count mismatch (ring)", 30) {
  count_mismatch<gs::algo::ring>();
}
GS_MPI_TEST("errors: count mismatch (native)", 30) {
  count_mismatch<gs::algo::native>();
}
GS_MPI_TEST("errors: count mismatch (halving_doubling)", 30) {
  count_mismatch<gs::algo::halving_doubling>();
}
GS_MPI_TEST("errors: element type mismatch (tree)", 30) {
  type_mismatch<gs::algo::tree>();
}
GS_MPI_TEST("errors: element type mismatch (native)", 30) {
  type_mismatch<gs::algo::native>();
}
GS_MPI_TEST("errors: op mismatch (auto_select)", 30) {
  op_mismatch<gs::algo::auto_select>();
}
GS_MPI_TEST("errors: op mismatch (native)", 30) {
  op_mismatch<gs::algo::native>();
}

GS_MPI_TEST("errors: algorithm mismatch", 30) {
  gs::transport::mpi t{MPI_COMM_WORLD};
  if (t.size() < 2) GS_SKIP("needs 2 ranks");
  std::vector<float> v(100);
  expect_mismatch(
      [&] {
        if (t.rank() == 1) {
          gs::allreduce<gs::algo::tree>(t, std::span<float>(v), gs::op::sum, within(10));
        } else {
          gs::allreduce<gs::algo::ring>(t, std::span<float>(v), gs::op::sum, within(10));
        }
      },
      {"rank 1 differs from rank 0 in algorithm ring vs tree"});
}

GS_MPI_TIMING_TEST("errors: a late rank times out the others (ring)", 30) {
  late_rank<gs::algo::ring>();
}
GS_MPI_TIMING_TEST("errors: a late rank times out the others (native)", 30) {
  late_rank<gs::algo::native>();
}

// Without the consistency check the timeout happens inside MPI_Iallreduce, which MPI
// cannot cancel: the others keep it pending and refuse further native calls; the late
// rank then joins it and gets the full, exact result.
GS_MPI_TIMING_TEST("errors: native timeout inside MPI_Iallreduce, then the late rank joins", 30) {
  gs::transport::mpi t{MPI_COMM_WORLD};
  if (t.size() < 2) GS_SKIP("needs 2 ranks");
  const std::size_t late = t.size() - 1;
  std::vector<float> v(1000);
  gs::testing::fill_inputs(std::span<float>(v), gs::reduce_op::sum, t.rank(), t.size());
  if (t.rank() != late) {
    const std::string m = GS_CHECK_ERROR(
        gs::allreduce<gs::algo::native>(t, std::span<float>(v), gs::op::sum, within(0.25, false)),
        gs::errc::timeout);
    GS_CHECK_MSG(contains(m, "MPI_Iallreduce of 1000 float32"), m);
    std::vector<float> w(10);
    const std::string m2 = GS_CHECK_ERROR(
        gs::allreduce<gs::algo::native>(t, std::span<float>(w), gs::op::sum, within(1, false)),
        gs::errc::transport);
    GS_CHECK_MSG(contains(m2, "create a new transport::mpi"), m2);
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    gs::allreduce<gs::algo::native>(t, std::span<float>(v), gs::op::sum, within(30, false));
    GS_CHECK(gs::testing::count_wrong(std::span<const float>(v), gs::reduce_op::sum, t.size()) ==
             0);
  }
  // The others' abandoned MPI_Iallreduce completes while they wait in the harness; it
  // writes into `v`, so `v` and the transport stay alive until the end of the run.
  gs::testbed::keep_until_exit(std::move(v));
  gs::testbed::keep_until_exit(std::move(t));
}

// A rank that is not in any gradsync call (dead, stopped, busy elsewhere) does not answer
// the stall inspector's query: at their timeout the others name it, also those that
// were waiting on another rank (which was itself waiting for the silent one).
GS_MPI_TIMING_TEST("errors: a timeout names the rank that does not answer, whoever was awaited",
                   30) {
  gs::transport::mpi t{MPI_COMM_WORLD};
  if (t.size() < 2) GS_SKIP("needs 2 ranks");
  const std::size_t silent = t.size() - 1;
  std::vector<float> v(1000);
  if (t.rank() != silent) {
    const auto t0 = clk::now();
    const std::string m = GS_CHECK_ERROR(
        gs::allreduce<gs::algo::ring>(t, std::span<float>(v), gs::op::sum, within(0.3)),
        gs::errc::timeout);
    GS_CHECK_MSG(since(t0) < 3.0, "timeout after " + std::to_string(since(t0)) + " s");
    GS_CHECK_MSG(contains(m, "no answer within 500 ms from " + t.describe_rank(silent)), m);
    for (std::size_t q = 0; q + 1 < t.size(); ++q) {  // the ranks that did answer
      GS_CHECK_MSG(!contains(m, "from " + t.describe_rank(q) + " ("), m);
    }
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // outside gradsync
  }
  gs::testbed::keep_until_exit(std::move(t));
}

// two_level relays a failure of one level to the other through announce_failure: on
// mpi a notice that ends every peer's wait at once with peer_lost quoting the cause.
GS_MPI_TIMING_TEST("errors: a failure announced by a rank ends the others' waits, quoting it", 30) {
  gs::transport::mpi t{MPI_COMM_WORLD};
  if (t.size() < 2) GS_SKIP("needs 2 ranks");
  const std::size_t failed = t.size() / 2;
  std::vector<float> v(100000);
  if (t.rank() != failed) {
    const auto t0 = clk::now();
    const std::string m = GS_CHECK_ERROR(
        gs::allreduce<gs::algo::ring>(t, std::span<float>(v), gs::op::sum, within(20)),
        gs::errc::peer_lost);
    GS_CHECK_MSG(since(t0) < 3.0, "the notice took " + std::to_string(since(t0)) + " s");
    GS_CHECK_MSG(contains(m, t.describe_rank(failed) + " failed and told this rank why: "
                                                       "rank 9 on node-z died (a test)"),
                 m);
    GS_CHECK_MSG(contains(t.failure_notice(), "rank 9 on node-z died"), t.failure_notice());
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    t.announce_failure("rank 9 on node-z died (a test)");
  }
  gs::testbed::keep_until_exit(std::move(t));
}
