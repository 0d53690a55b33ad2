// SPDX-License-Identifier: Apache-2.0
// Two shm jobs started with the same job id (issue 54, item 1), seen through the job id's
// roster (transport/shm/roster.hpp). A second rank 0 is refused and the first job goes
// on (a group cannot mix on rank 0's account). A second process of a rank above 0 is
// refused and stops the group too, during its bootstrap or at its next call, before any
// data moves: that group may hold ranks of both jobs. A crashed group's roster and
// segment are replaced by the next group with the id. A roster made in another PID
// namespace (a container sharing /dev/shm) is neither swept nor joined. Ranks are threads
// here (each maps the segment itself), except the crashed group, a child process killed
// mid-bootstrap, and the other namespace's, a forked pid 1.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <gradsync/algo/ring.hpp>
#include <gradsync/allreduce.hpp>
#include <gradsync/transport/shm.hpp>

#include "capture_stderr.hpp"
#include "fork_ranks.hpp"
#include "watchdog.hpp"

namespace gs = gradsync;
using gs::testbed::shm_name_exists;
using gs::transport::shm;
using gs::transport::shm_options;

namespace {

shm_options options(std::size_t rank, std::size_t size, const std::string& job) {
  shm_options o;
  o.rank = rank;
  o.size = size;
  o.job = job;
  o.exchange_bytes = 1 << 20;
  o.bootstrap_timeout = gs::seconds_d{5};
  return o;
}

std::string job_id(const char* what) {
  return std::string("collide-") + what + "-" + std::to_string(::getpid());
}

// Makes rank `rank` of the group in `ts`; an error is kept in `why` (a thread must not
// let it escape) and leaves the slot empty.
void join(std::vector<std::optional<shm>>& ts, std::vector<std::string>& why, std::size_t rank,
          const std::string& job) {
  try {
    ts[rank].emplace(options(rank, ts.size(), job));
  } catch (const std::exception& e) {
    why[rank] = e.what();
  }
}

// Forms a group of `n` ranks of `job` (one thread each) and requires every rank to join.
std::vector<std::optional<shm>> form_group(std::size_t n, const std::string& job) {
  std::vector<std::optional<shm>> ts(n);
  std::vector<std::string> why(n);
  std::vector<std::thread> th;
  for (std::size_t r = 0; r < n; ++r) th.emplace_back([&, r] { join(ts, why, r, job); });
  for (auto& t : th) t.join();
  for (std::size_t r = 0; r < n; ++r) {
    INFO("rank " << r << ": " << why[r]);
    REQUIRE(ts[r].has_value());
  }
  return ts;
}

// Waits until the job's segment name exists (its rank 0 created it).
void wait_for_name(const std::string& job) {
  const std::string name = gs::transport::detail::segment_name(job);
  for (int i = 0; i < 5000; ++i) {
    const int fd = ::shm_open(name.c_str(), O_RDONLY, 0);
    if (fd >= 0) {
      ::close(fd);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  FAIL("the segment " << name << " never appeared");
}

// Waits until the segment `name` holds a published header (its creator wrote the magic).
bool segment_published(const std::string& name) {
  namespace d = gs::transport::detail;
  for (int i = 0; i < 5000; ++i) {
    const bool ready = gs::testbed::read_shm(name, sizeof(d::seg_header), false, [](std::byte* p) {
      auto& h = *reinterpret_cast<d::seg_header*>(p);
      return d::shared_word(h.magic).load(std::memory_order_acquire) == d::seg_header::magic_value;
    });
    if (ready) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

// One line from the pipe `fd` ("" at EOF): what a forked process reports.
std::string read_line(int fd) {
  std::string line;
  char c = 0;
  while (::read(fd, &c, 1) == 1 && c != '\n') line += c;
  return line;
}

void write_line(int fd, const std::string& s) {
  const std::string line = s + "\n";
  if (::write(fd, line.data(), line.size()) < 0) ::_exit(3);
}

// The group's ranks (threads, each with its transport) sum rank + 1: exact.
void expect_sum(std::vector<std::optional<shm>>& ts) {
  const std::size_t n = ts.size();
  std::vector<std::thread> th;
  std::vector<float> got(n);
  for (std::size_t r = 0; r < n; ++r) {
    th.emplace_back([&, r] {
      std::vector<float> v(1000, float(r + 1));
      gs::allreduce<gs::algo::ring>(*ts[r], std::span<float>(v), gs::op::sum);
      got[r] = v[999];
    });
  }
  for (auto& t : th) t.join();
  for (std::size_t r = 0; r < n; ++r) CHECK(got[r] == float(n * (n + 1) / 2));
}

// Every rank of the group tries a sum; each must fail with errc::transport naming the
// collision before it touches its buffer.
void expect_stopped(std::vector<std::optional<shm>>& ts) {
  const std::size_t n = ts.size();
  std::vector<std::thread> th;
  std::vector<std::string> why(n);
  std::vector<int> code(n, -1);
  std::vector<float> kept(n);
  for (std::size_t r = 0; r < n; ++r) {
    th.emplace_back([&, r] {
      std::vector<float> v(1000, float(r + 1));
      try {
        gs::allreduce<gs::algo::ring>(*ts[r], std::span<float>(v), gs::op::sum);
      } catch (const gs::error& e) {
        code[r] = static_cast<int>(e.code());
        why[r] = e.what();
      }
      kept[r] = v[999];
    });
  }
  for (auto& t : th) t.join();
  for (std::size_t r = 0; r < n; ++r) {
    INFO("rank " << r << ": " << why[r]);
    CHECK(code[r] == static_cast<int>(gs::errc::transport));
    CHECK(why[r].find("two jobs use the same job id") != std::string::npos);
    CHECK(kept[r] == float(r + 1));
  }
}

// A second process claims rank `rank` of `job`'s group of `n`: it is refused, naming the
// place this process's thread already holds.
void expect_refused(std::size_t rank, std::size_t n, const std::string& job) {
  try {
    shm second(options(rank, n, job));
    FAIL("a second rank " << rank << " with the same job id was accepted");
  } catch (const gs::error& e) {
    CHECK(e.code() == gs::errc::transport);
    CHECK(std::string(e.what()).find(
              "rank " + std::to_string(rank) + "'s place is already taken by pid " +
              std::to_string(::getpid()) + " when pid ") != std::string::npos);
  }
}

// Every rank of `job`'s group stopped in its bootstrap, naming the collision, and nothing
// of the id is left in /dev/shm.
void expect_all_refused(const std::vector<std::optional<shm>>& a,
                        const std::vector<std::string>& why, const std::string& job) {
  for (std::size_t r = 0; r < a.size(); ++r) {
    INFO("rank " << r << ": " << why[r]);
    CHECK_FALSE(a[r].has_value());
    CHECK(why[r].find("two jobs use the same job id (GRADSYNC_SHM_JOB '" + job + "')") !=
          std::string::npos);
  }
  CHECK_FALSE(shm_name_exists(gs::transport::detail::roster_name(job)));
  CHECK_FALSE(shm_name_exists(gs::transport::detail::segment_name(job)));
}

// A group of rank + 2 forms up to `rank`, a second claimant of `rank` is refused, and
// the group's last rank joins: every rank stops in its bootstrap, naming the collision.
void expect_bootstrap_stopped(std::size_t rank, const std::string& job) {
  const std::size_t n = rank + 2;
  std::vector<std::optional<shm>> a(n);
  std::vector<std::string> why(n);
  std::vector<std::thread> ranks;
  ranks.emplace_back([&] { join(a, why, 0, job); });
  wait_for_name(job);
  for (std::size_t r = 1; r <= rank; ++r) ranks.emplace_back([&, r] { join(a, why, r, job); });
  // Wait until those ranks have taken their places (the segment still waits for the last).
  if (rank > 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  expect_refused(rank, n, job);
  ranks.emplace_back([&] { join(a, why, n - 1, job); });
  for (std::thread& t : ranks) t.join();
  expect_all_refused(a, why, job);
}

// A group of 2 forms and sums, and a second claimant of `rank` is refused; with
// `call_again`, the group's next call must then fail. Returns what the ranks' close
// wrote to stderr, after checking that the last one out removed the roster.
std::string close_after_second_claimant(std::size_t rank, const std::string& job, bool call_again) {
  std::vector<std::optional<shm>> a = form_group(2, job);
  expect_sum(a);
  expect_refused(rank, 2, job);
  if (call_again) expect_stopped(a);
  gs::testbed::capture_stderr cap("test_shm_job_collision_close.txt");
  a[0].reset();
  a[1].reset();
  CHECK_FALSE(shm_name_exists(gs::transport::detail::roster_name(job)));
  return cap.text();
}

// A second claimant of `rank` stops a running group's next call, and the ranks' close
// says nothing more (they threw the collision already).
void expect_running_group_stopped(std::size_t rank, const std::string& job) {
  CHECK(close_after_second_claimant(rank, job, true).find("after this group's last call") ==
        std::string::npos);
}

}  // namespace

// A second rank 0 stops the group too: its other places may already be held by the
// second job's ranks (the job_collision trials saw rank 0 of one job and rank 1 of the
// other finish together, the other job's rank 1 too late to find the roster).
TEST_CASE("shm job id collision: a second rank 0 during the bootstrap stops both") {
  gs::testbed::watchdog wd(60, "second rank 0, bootstrap");
  expect_bootstrap_stopped(0, job_id("creator"));
}

TEST_CASE("shm job id collision: a second rank 0 after the bootstrap stops the group's next call") {
  gs::testbed::watchdog wd(60, "second rank 0, running");
  expect_running_group_stopped(0, job_id("late0"));
}

// Too late to stop the group, not to say so: each rank's close warns that its calls may
// have mixed both jobs' data.
TEST_CASE("shm job id collision: a second rank 0 after the group's last call is told at close") {
  gs::testbed::watchdog wd(60, "second rank 0, after the last call");
  const std::string job = job_id("after");
  const std::string text = close_after_second_claimant(0, job, false);
  INFO(text);
  for (const char* rank : {"[gradsync rank 0] warn: ", "[gradsync rank 1] warn: "}) {
    CHECK(text.find(std::string(rank) + "shm job id roster " +
                    gs::transport::detail::roster_name(job) +
                    ": after this group's last call: rank 0's place is already taken by pid ") !=
          std::string::npos);
  }
  CHECK(text.find("(the calls it ran may have mixed both jobs' data)") != std::string::npos);
}

TEST_CASE("shm job id collision: a second rank 1 during the bootstrap stops both") {
  gs::testbed::watchdog wd(60, "second rank 1, bootstrap");
  expect_bootstrap_stopped(1, job_id("rank"));
}

TEST_CASE("shm job id collision: a second rank 1 after the bootstrap stops the group's next call") {
  gs::testbed::watchdog wd(60, "second rank 1, running");
  expect_running_group_stopped(1, job_id("late"));
}

TEST_CASE("shm job id: a group killed in its bootstrap leaves names the next group replaces") {
  gs::testbed::watchdog wd(60, "crashed group");
  const std::string job = job_id("crashed");
  const std::string roster = gs::transport::detail::roster_name(job);
  const std::string segment = gs::transport::detail::segment_name(job);
  std::fflush(stdout);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // rank 0 of 2: creates both names, then waits for a rank 1 that never comes
    try {
      shm t(options(0, 2, job));
    } catch (...) {
    }
    ::_exit(0);
  }
  for (int i = 0; i < 5000 && !shm_name_exists(segment); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE(shm_name_exists(segment));
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  REQUIRE(shm_name_exists(roster));  // left behind, with a claim of a dead process
  REQUIRE(shm_name_exists(segment));
  {
    std::vector<std::optional<shm>> a = form_group(2, job);
    expect_sum(a);
  }
  CHECK_FALSE(shm_name_exists(roster));
  CHECK_FALSE(shm_name_exists(segment));
}

// The race the case above meets under load, made certain: rank 1 polls the name while it
// is still the crashed group's complete segment, and only then does rank 0 replace it.
TEST_CASE("shm segment: a rank waiting on a crashed group's segment attaches to its rank 0's") {
  gs::testbed::watchdog wd(60, "crashed segment");
  namespace d = gs::transport::detail;
  const std::string job = job_id("stale");
  const std::string segment = d::segment_name(job);
  const d::shm_geometry geo = d::shm_state::geometry(options(0, 2, job));
  const auto bootstrap = [&](std::size_t rank, std::optional<d::shm_segment>& s, std::string& why) {
    try {
      s.emplace(rank, geo, job, gs::deadline::after(gs::seconds_d{5}));
    } catch (const std::exception& e) {
      why = e.what();
    }
  };
  std::fflush(stdout);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // the crashed group's rank 0: publishes its segment, waits for rank 1
    std::optional<d::shm_segment> s;
    std::string why;
    bootstrap(0, s, why);
    ::_exit(0);
  }
  REQUIRE(segment_published(segment));
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  std::optional<d::shm_segment> r0, r1;
  std::string why0, why1;
  std::thread t1([&] { bootstrap(1, r1, why1); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 1 sees the stale one
  bootstrap(0, r0, why0);
  t1.join();
  INFO("rank 0: " << why0 << " / rank 1: " << why1);
  CHECK(r0.has_value());
  CHECK(r1.has_value());
  CHECK_FALSE(shm_name_exists(segment));  // unlinked once both ranks attached
}

TEST_CASE("shm job id: one id serves group after group while ranks leave out of step") {
  gs::testbed::watchdog wd(60, "id reused");
  const std::string job = job_id("reused");
  constexpr int rounds = 10;
  std::vector<std::string> why(2);
  std::vector<int> right(2, 0);
  std::vector<std::thread> th;
  for (std::size_t r = 0; r < 2; ++r) {
    th.emplace_back([&, r] {
      try {
        for (int i = 0; i < rounds; ++i) {
          shm t(options(r, 2, job));
          std::vector<float> v(1000, float(r + 1));
          gs::allreduce<gs::algo::ring>(t, std::span<float>(v), gs::op::sum);
          right[r] += v[999] == 3.0f;
          // Rank 1 leaves late: rank 0 comes for the next group while the last is held.
          if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      } catch (const std::exception& e) {
        why[r] = e.what();
      }
    });
  }
  for (auto& t : th) t.join();
  INFO(why[0] << " / " << why[1]);
  CHECK(right[0] == rounds);
  CHECK(right[1] == rounds);
  CHECK_FALSE(shm_name_exists(gs::transport::detail::roster_name(job)));
}

TEST_CASE("shm job id: a group's rank 0 removes the rosters other ids' dead jobs left") {
  gs::testbed::watchdog wd(60, "stale rosters of other ids");
  const std::string dead = job_id("dead"), job = job_id("sweeper");
  const std::string left = gs::transport::detail::roster_name(dead);
  std::fflush(stdout);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // claims rank 0 of `dead`, then exits without its destructors (as MPI_Abort)
    gs::transport::detail::shm_roster r(0, 2, dead, gs::deadline::after(gs::seconds_d{5}));
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  REQUIRE(shm_name_exists(left));  // no later group of that id will replace it
  {
    std::vector<std::optional<shm>> a = form_group(2, job);
    CHECK_FALSE(shm_name_exists(left));  // removed by this group's rank 0
    expect_sum(a);
  }
}

// Containers that share /dev/shm (docker --ipc=host or --ipc=container:NAME, a Kubernetes
// pod) have PID namespaces of their own: a roster's pids and start times mean nothing
// outside its creator's. Its group here is a forked process that is pid 1 of a new PID
// namespace with its own /proc, as a container's first process (root only).
TEST_CASE("shm job id: a roster made in another PID namespace is neither swept nor joined") {
  gs::testbed::watchdog wd(60, "another PID namespace");
  namespace d = gs::transport::detail;
  if (d::pid_namespace() == 0) {  // the library cannot tell namespaces apart either
    MESSAGE("skipped: /proc/self/ns/pid cannot be read here");
    return;
  }
  const std::string job = job_id("container");
  const std::string roster = d::roster_name(job);
  int ready[2], hold[2];
  REQUIRE(::pipe(ready) == 0);
  REQUIRE(::pipe(hold) == 0);
  std::fflush(stdout);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(ready[0]);
    ::close(hold[1]);
    if (::unshare(CLONE_NEWPID | CLONE_NEWNS) != 0) {
      write_line(ready[1], std::string("skip: unshare(CLONE_NEWPID): ") + std::strerror(errno));
      ::_exit(0);
    }
    const pid_t init = ::fork();
    if (init == 0) {  // pid 1 of the new namespace: its /proc, then rank 0's claim on `job`
      if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
          ::mount("proc", "/proc", "proc", 0, nullptr) != 0) {
        write_line(ready[1], std::string("skip: mounting a /proc: ") + std::strerror(errno));
        ::_exit(0);
      }
      try {
        d::shm_roster r(0, 2, job, gs::deadline::after(gs::seconds_d{5}));
        write_line(ready[1], "holding");
        (void)read_line(hold[0]);  // until the test closes its end
      } catch (const std::exception& e) {
        write_line(ready[1], std::string("error: ") + e.what());
      }
      ::_exit(0);
    }
    ::close(ready[1]);  // only pid 1 reports: EOF if it dies first
    ::close(hold[0]);
    int status = 0;
    if (init > 0) ::waitpid(init, &status, 0);
    ::_exit(0);
  }
  ::close(ready[1]);
  ::close(hold[0]);
  const std::string said = read_line(ready[0]);
  ::close(ready[0]);
  auto finish = [&] {
    ::close(hold[1]);
    int status = 0;
    ::waitpid(child, &status, 0);
  };
  if (said.rfind("skip: ", 0) == 0) {
    MESSAGE("skipped (needs root): " << said.substr(6));
    finish();
    return;
  }
  REQUIRE_MESSAGE(said == "holding", said);
  // A group of another id forms here: its rank 0's sweep leaves the live roster alone.
  {
    std::vector<std::optional<shm>> a = form_group(2, job_id("beside"));
    expect_sum(a);
  }
  CHECK(shm_name_exists(roster));
  // A process here with the same id is refused, naming the namespaces and both causes.
  for (std::size_t rank : {std::size_t{1}, std::size_t{0}}) {
    INFO("rank " << rank);
    try {
      d::shm_roster r(rank, 2, job, gs::deadline::after(gs::seconds_d{2}));
      FAIL("a roster made in another PID namespace was joined or replaced");
    } catch (const gs::error& e) {
      CHECK(e.code() == gs::errc::transport);
      const std::string w = e.what();
      CHECK(w.find("was created by a process in another PID namespace (pid:[") !=
            std::string::npos);
      CHECK(w.find("uses the same job id (GRADSYNC_SHM_JOB '" + job + "')") != std::string::npos);
      CHECK(w.find("remove /dev/shm" + roster) != std::string::npos);
    }
  }
  CHECK(shm_name_exists(roster));
  finish();  // its holder leaves: the last one out removes the name
  CHECK_FALSE(shm_name_exists(roster));
}
