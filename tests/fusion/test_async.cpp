// SPDX-License-Identifier: Apache-2.0
// Asynchronous operation: handles, errors raised on the progress thread reaching
// wait(), destruction with work in flight (peer that never calls), inline progress, the
// progress thread's priority.
#include <doctest/doctest.h>

#if defined(__linux__)
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <dirent.h>
#include <fstream>
#endif

#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gradsync/gradsync.hpp>

#include "fusion_helpers.hpp"
#include "watchdog.hpp"

namespace gs = gradsync;
using namespace fusion_test;
using local = gs::transport::local;
using steady = std::chrono::steady_clock;

namespace {
double since(steady::time_point t0) {
  return std::chrono::duration<double>(steady::now() - t0).count();
}
// The code and message of the gradsync::error `h.wait()` throws ("" when none).
std::pair<int, std::string> wait_error(const gs::pending& h) {
  try {
    h.wait();
  } catch (const gs::error& e) {
    return {static_cast<int>(e.code()), e.what()};
  }
  return {0, ""};
}
}  // namespace

TEST_CASE("allreduce_async: several tensors in flight, completed in order, exact") {
  gs::testbed::watchdog wd(60, "async in flight");
  std::vector<std::size_t> wrong(3, 99);
  gs::transport::run_local(3, [&](local& t) {
    gs::allreducer<local, gs::algo::ring> ar(t);
    std::vector<std::vector<float>> v(6);
    std::vector<gs::pending> hs;
    for (std::size_t i = 0; i < v.size(); ++i) {
      v[i].resize(1000 * i + 7);
      gs::testing::fill_inputs(std::span<float>(v[i]), gs::reduce_op::sum, t.rank(), 3, i);
      hs.push_back(ar.allreduce_async(std::span<float>(v[i]), gs::op::sum));
    }
    // A synchronous call in between waits for the queue, then runs on this thread.
    std::vector<double> s(333);
    gs::testing::fill_inputs(std::span<double>(s), gs::reduce_op::max, t.rank(), 3);
    ar.allreduce(std::span<double>(s), gs::op::max);
    std::size_t w = gs::testing::count_wrong(std::span<const double>(s), gs::reduce_op::max, 3);
    for (std::size_t i = 0; i < v.size(); ++i) {
      CHECK(hs[i].valid());
      hs[i].wait();
      CHECK(hs[i].test());
      CHECK(hs[i].error() == nullptr);
      w += gs::testing::count_wrong(std::span<const float>(v[i]), gs::reduce_op::sum, 3, i);
    }
    CHECK(ar.total_stats().calls == 7);
    wrong[t.rank()] = w;
  });
  CHECK(wrong == std::vector<std::size_t>(3, 0));
}

TEST_CASE("a mismatch raised on the progress thread surfaces at wait() on every rank") {
  gs::testbed::watchdog wd(60, "async mismatch");
  std::vector<std::pair<int, std::string>> errs(2);
  std::vector<std::size_t> after(2, 99);
  gs::transport::run_local(2, [&](local& t) {
    gs::allreducer<local, gs::algo::ring> ar(t);
    std::vector<float> v(t.rank() == 0 ? 100 : 99);
    auto h = ar.allreduce_async(std::span<float>(v), gs::op::sum);
    errs[t.rank()] = wait_error(h);
    CHECK(h.test());
    CHECK(h.error() != nullptr);
    // A mismatch is detected before data moves: the allreducer stays usable.
    std::vector<float> ok(64);
    gs::testing::fill_inputs(std::span<float>(ok), gs::reduce_op::sum, t.rank(), 2);
    ar.allreduce_async(std::span<float>(ok), gs::op::sum).wait();
    after[t.rank()] = gs::testing::count_wrong(std::span<const float>(ok), gs::reduce_op::sum, 2);
  });
  for (const auto& [code, msg] : errs) {
    CAPTURE(msg);
    CHECK(code == static_cast<int>(gs::errc::mismatch));
    CHECK(msg.find("count 100 vs 99") != std::string::npos);
  }
  CHECK(after == std::vector<std::size_t>{0, 0});
}

TEST_CASE("a timeout on the progress thread surfaces at wait(); later calls report it too") {
  gs::testbed::watchdog wd(60, "async timeout");
  std::pair<int, std::string> err, later;
  gs::transport::run_local(2, [&](local& t) {
    if (t.rank() == 1) {  // never calls; leaves after rank 0 has timed out
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      return;
    }
    gs::call_options opt;
    opt.timeout = gs::seconds_d{0.3};
    gs::allreducer<local, gs::algo::ring> ar(t, opt);
    std::vector<float> v(1000);
    const auto t0 = steady::now();
    err = wait_error(ar.allreduce_async(std::span<float>(v), gs::op::sum));
    CHECK(since(t0) < 1.2);
    try {
      ar.allreduce(std::span<float>(v), gs::op::sum);
    } catch (const gs::error& e) {
      later = {static_cast<int>(e.code()), e.what()};
    }
  });
  CAPTURE(err.second);
  CHECK(err.first == static_cast<int>(gs::errc::timeout));
  CHECK(err.second.find("rank 0 (peer 1)") != std::string::npos);
  CHECK(later.first == static_cast<int>(gs::errc::timeout));
}

TEST_CASE("destroying an allreducer with work in flight neither hangs nor loses handles") {
  gs::testbed::watchdog wd(60, "destroy in flight");
  std::vector<std::pair<int, std::string>> errs;
  double destroy_s = -1;
  gs::transport::run_local(2, [&](local& t) {
    if (t.rank() == 1) {  // a peer that never calls
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      return;
    }
    gs::call_options opt;
    opt.timeout = gs::seconds_d{0.4};
    std::vector<std::vector<float>> v(4, std::vector<float>(5000));
    std::vector<gs::pending> hs;
    std::optional<gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<1 << 20>>> ar;
    ar.emplace(t, opt);
    for (auto& x : v) hs.push_back(ar->allreduce_async(std::span<float>(x), gs::op::sum));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the first one is running
    const auto t0 = steady::now();
    ar.reset();
    destroy_s = since(t0);
    for (auto& h : hs) {
      CHECK(h.test());  // every handle is complete: failed, not lost
      errs.push_back(wait_error(h));
    }
  });
  CHECK(destroy_s >= 0);
  CHECK(destroy_s < 1.5);  // bounded by the running collective's deadline (0.4 s)
  REQUIRE(errs.size() == 4);
  CHECK(errs[0].first == static_cast<int>(gs::errc::timeout));
  for (const auto& [code, msg] : errs) {
    CAPTURE(msg);
    CHECK(code != 0);
  }
}

TEST_CASE("destroying an allreducer in the middle of a step does not hang its peers") {
  gs::testbed::watchdog wd(60, "destroy mid-step");
  std::vector<std::string> peer_err(2);
  gs::transport::run_local(2, [&](local& t) {
    gs::call_options opt;
    opt.timeout = gs::seconds_d{2.0};
    std::vector<float> a(100), b(100), c(100);
    if (t.rank() == 0) {
      gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<400>> ar(t, opt);
      ar.add(std::span<float>(a));
      ar.add(std::span<float>(b));
      ar.add(std::span<float>(c));
      ar.commit();
      ar.ready(2);  // bucket 0 launches; buckets 1 and 2 never do
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    } else {
      gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<400>> ar(t, opt);
      ar.add(std::span<float>(a));
      ar.add(std::span<float>(b));
      ar.add(std::span<float>(c));
      ar.commit();
      try {
        ar.wait();  // nothing marked: wait() launches everything
        ar.allreduce_async().wait();
      } catch (const gs::error& e) {
        peer_err[1] = e.what();
      }
    }
  });
  CAPTURE(peer_err[1]);
  CHECK((peer_err[1].find("peer_lost") != std::string::npos ||
         peer_err[1].find("timeout") != std::string::npos));
}

TEST_CASE("background_thread = false: async work runs on the caller and is exact") {
  gs::testbed::watchdog wd(60, "inline progress");
  std::vector<std::size_t> wrong(2, 99);
  gs::transport::run_local(2, [&](local& t) {
    gs::allreducer_options o;
    o.background_thread = false;
    gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<4096>> ar(t, o);
    const auto sizes = model_sizes();
    const auto first = firsts(sizes);
    std::vector<std::vector<float>> own(sizes.size());
    std::vector<std::span<float>> ts;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      own[i].resize(sizes[i]);
      ts.push_back(std::span<float>(own[i]));
      ar.add(ts.back());
    }
    ar.commit(gs::op::sum);
    fill_model(ts, gs::reduce_op::sum, t.rank(), 2, first);
    for (std::size_t i = ts.size(); i-- > 0;) ar.ready(i);
    CHECK(ar.test());  // every bucket ran inside ready()
    ar.wait();
    wrong[t.rank()] = wrong_model(ts, gs::reduce_op::sum, 2, first);
  });
  CHECK(wrong == std::vector<std::size_t>{0, 0});
}

#if defined(__linux__)
namespace {
int nice_of_this_thread() {
  errno = 0;
  return getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
}
// The nice value of every thread of this process (field 19 of /proc/self/task/*/stat).
std::vector<int> nice_of_all_threads() {
  std::vector<int> out;
  DIR* d = opendir("/proc/self/task");
  REQUIRE(d != nullptr);
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(std::string("/proc/self/task/") + e->d_name + "/stat");
    std::string line;
    if (!std::getline(f, line)) continue;  // the thread has just exited
    std::istringstream rest(line.substr(line.rfind(')') + 2));
    std::string field;
    for (int i = 3; i <= 19; ++i) rest >> field;
    out.push_back(std::stoi(field));
  }
  closedir(d);
  return out;
}
}  // namespace

TEST_CASE("the progress thread lowers its own priority by progress_nice; the caller keeps its") {
  gs::testbed::watchdog wd(60, "progress thread priority");
  const int base = nice_of_this_thread();
  for (int steps : {0, 3, 10, 40}) {
    CAPTURE(steps);
    int seen = -100;
    gs::progress_thread pt(true, steps);
    pt.post({[&](const gs::job_times&) { seen = nice_of_this_thread(); }, {}});
    pt.drain();
    CHECK(seen == std::min(base + steps, 19));
    CHECK(nice_of_this_thread() == base);
  }
  // Wired through the allreducer: while its thread lives, exactly one thread of this
  // process runs at base + progress_nice.
  for (int steps : {4, 0}) {
    CAPTURE(steps);
    gs::transport::run_local(1, [&](local& t) {
      gs::allreducer_options o;
      o.progress_nice = steps;
      gs::allreducer<local, gs::algo::ring> ar(t, o);
      std::vector<float> v(100, 1.0f);
      ar.allreduce_async(std::span<float>(v), gs::op::sum).wait();
      const auto nices = nice_of_all_threads();
      const auto lowered = std::count(nices.begin(), nices.end(), std::min(base + steps, 19));
      CHECK(lowered == (steps == 0 ? static_cast<long>(nices.size()) : 1));
      CHECK(v[0] == 1.0f);
    });
  }
}

TEST_CASE("GRADSYNC_PROGRESS_NICE sets the default progress_nice; a bad value is named") {
  gs::testbed::watchdog wd(60, "GRADSYNC_PROGRESS_NICE");
  const int base = nice_of_this_thread();
  unsetenv("GRADSYNC_PROGRESS_NICE");
  CHECK(gs::allreducer_options{}.progress_nice == 10);
  setenv("GRADSYNC_PROGRESS_NICE", "0", 1);
  CHECK(gs::allreducer_options{}.progress_nice == 0);
  setenv("GRADSYNC_PROGRESS_NICE", "7", 1);
  CHECK(gs::allreducer_options{}.progress_nice == 7);
  // The allreducer a trainer builds with default options picks it up.
  gs::transport::run_local(1, [&](local& t) {
    gs::allreducer<local, gs::algo::ring> ar(t);
    std::vector<float> v(100, 1.0f);
    ar.allreduce_async(std::span<float>(v), gs::op::sum).wait();
    const auto nices = nice_of_all_threads();
    CHECK(std::count(nices.begin(), nices.end(), std::min(base + 7, 19)) == 1);
  });
  for (const char* bad : {"20", "-1", "ten", "5x"}) {
    CAPTURE(bad);
    setenv("GRADSYNC_PROGRESS_NICE", bad, 1);
    try {
      gs::allreducer_options o;
      FAIL("accepted GRADSYNC_PROGRESS_NICE=" << std::string(bad) << " as " << o.progress_nice);
    } catch (const gs::error& e) {
      CHECK(e.code() == gs::errc::invalid_argument);
      CHECK(std::string(e.what()).find(
                "GRADSYNC_PROGRESS_NICE must be an integer from 0 to 19, got '" + std::string(bad) +
                "'") != std::string::npos);
    }
  }
  unsetenv("GRADSYNC_PROGRESS_NICE");
}
#endif

TEST_CASE("the next step cannot start while the previous one is in flight") {
  gs::testbed::watchdog wd(60, "step in flight");
  std::string err;
  std::vector<std::size_t> wrong(2, 99);
  gs::transport::run_local(2, [&](local& t) {
    gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<4096>> ar(t);
    std::vector<float> a(1 << 12);
    ar.add(std::span<float>(a));
    ar.commit();
    if (t.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    auto h = ar.allreduce_async();
    if (t.rank() == 0) {
      // rank 1 has not joined yet, so the bucket is surely in flight
      try {
        ar.ready(0);
      } catch (const gs::error& e) {
        err = e.what();
      }
    }
    h.wait();
    gs::testing::fill_inputs(std::span<float>(a), gs::reduce_op::sum, t.rank(), 2);
    ar.ready(0);
    ar.wait();
    wrong[t.rank()] = gs::testing::count_wrong(std::span<const float>(a), gs::reduce_op::sum, 2);
  });
  CHECK(err.find("still in flight") != std::string::npos);
  CHECK(wrong == std::vector<std::size_t>{0, 0});
}

namespace {
// A transport whose library lacks the thread support the progress thread needs (as
// transport::mpi does under MPI_THREAD_FUNNELED).
struct picky_local : gs::transport::local {
  using local::local;
  static constexpr gs::transport_traits traits = [] {
    gs::transport_traits t = local::traits;
    t.thread_levels = true;
    return t;
  }();
  static void require_thread_level() {
    throw gs::error(gs::errc::invalid_argument, {}, "provides MPI_THREAD_FUNNELED (test double)");
  }
  static bool allows_helper_thread() { return false; }
};
static_assert(gs::transport_policy<picky_local>);
}  // namespace

TEST_CASE("the thread level is checked at construction; background_thread = false needs none") {
  gs::testbed::watchdog wd(30, "thread level");
  picky_local t(std::make_shared<gs::transport::detail::local_group>(1), 0);
  using ar_t = gs::allreducer<picky_local, gs::algo::ring, gs::fusion::bucket<4096>>;
  CHECK_THROWS_WITH_AS(ar_t{t}, doctest::Contains("MPI_THREAD_FUNNELED"), gs::error);
  gs::allreducer_options o;
  o.background_thread = false;
  ar_t ar(t, o);
  std::vector<float> v(10, 2.0f);
  ar.allreduce_async(std::span<float>(v), gs::op::sum).wait();
  CHECK(v[9] == 2.0f);
}
