// SPDX-License-Identifier: Apache-2.0
// Two shm jobs started with the same job id (issue 54, item 1). A second rank 0 fails
// with EEXIST and must leave the first job's segment name alone (it unlinked it, and
// the first job's late ranks then waited for a creator until their deadline). A second
// process of an already attached rank must be refused without touching the first job
// (it took that rank's place and counted once more, so the first job finished its
// bootstrap without its last rank). Ranks are threads here: each maps the segment itself.
#include <doctest/doctest.h>

#include <sys/mman.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <gradsync/algo/ring.hpp>
#include <gradsync/allreduce.hpp>
#include <gradsync/transport/shm.hpp>

#include "watchdog.hpp"

namespace gs = gradsync;
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

}  // namespace

TEST_CASE("shm job id collision: a second rank 0 leaves the first job's segment alone") {
  gs::testbed::watchdog wd(60, "second rank 0");
  const std::string job = job_id("creator");
  std::vector<std::optional<shm>> a(2);
  std::vector<std::string> why(2);
  std::thread a0([&] { join(a, why, 0, job); });
  wait_for_name(job);
  try {
    shm b0(options(0, 2, job));
    FAIL("a second rank 0 with the same job id was accepted");
  } catch (const gs::error& e) {
    CHECK(e.code() == gs::errc::transport);
    CHECK(std::string(e.what()).find("already exists: another job uses the same job id") !=
          std::string::npos);
  }
  // The first job's rank 1 still finds its segment.
  std::thread a1([&] { join(a, why, 1, job); });
  a0.join();
  a1.join();
  INFO(why[0] << " / " << why[1]);
  REQUIRE(a[0].has_value());
  REQUIRE(a[1].has_value());
  expect_sum(a);
}

TEST_CASE("shm job id collision: a second process of an attached rank is refused by name") {
  gs::testbed::watchdog wd(60, "second rank 1");
  const std::string job = job_id("rank");
  std::vector<std::optional<shm>> a(3);
  std::vector<std::string> why(3);
  std::thread a0([&] { join(a, why, 0, job); });
  wait_for_name(job);
  std::thread a1([&] { join(a, why, 1, job); });
  // Wait until rank 1 has taken its place (the segment still waits for rank 2).
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  try {
    shm b1(options(1, 3, job));
    FAIL("a second rank 1 with the same job id was accepted");
  } catch (const gs::error& e) {
    CHECK(e.code() == gs::errc::transport);
    CHECK(std::string(e.what()).find("rank 1's place is already taken by pid " +
                                     std::to_string(::getpid()) +
                                     ": two jobs use the same job id") != std::string::npos);
  }
  std::thread a2([&] { join(a, why, 2, job); });
  a0.join();
  a1.join();
  a2.join();
  INFO(why[0] << " / " << why[1] << " / " << why[2]);
  REQUIRE(a[0].has_value());
  REQUIRE(a[1].has_value());
  REQUIRE(a[2].has_value());
  expect_sum(a);
}
