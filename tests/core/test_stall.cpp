// SPDX-License-Identifier: Apache-2.0
// The stall inspector (core/stall.hpp) on the local transport: a rank that waits in a call
// past GRADSYNC_STALL_WARN logs a warning naming exactly the ranks that have not entered
// it, with the call's number, what it is and its label; again at most once per
// threshold; nothing while nothing stalls. Over a two_level each level names its own.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <regex>
#include <span>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include <gradsync/gradsync.hpp>

#include "capture_stderr.hpp"
#include "two_level_ranks.hpp"
#include "watchdog.hpp"

namespace gs = gradsync;
using local = gs::transport::local;

namespace {

// GRADSYNC_STALL_WARN for the transports made while alive.
struct stall_env {
  explicit stall_env(const char* seconds) { ::setenv("GRADSYNC_STALL_WARN", seconds, 1); }
  ~stall_env() { ::unsetenv("GRADSYNC_STALL_WARN"); }
  stall_env(const stall_env&) = delete;
  stall_env& operator=(const stall_env&) = delete;
};

std::vector<std::string> stall_lines(const std::string& text) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = text.find('\n', at);
    const std::string line =
        text.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (line.find("warn: stall:") != std::string::npos) out.push_back(line);
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return out;
}

// The ranks a stall line says have not entered the call.
std::vector<std::string> named_late(const std::string& line) {
  std::vector<std::string> names;
  const std::size_t at = line.find("not yet entered by ");
  if (at == std::string::npos) return names;
  static const std::regex rank_re("rank ([0-9]+) \\(");
  const std::string rest = line.substr(at);
  for (std::sregex_iterator it(rest.begin(), rest.end(), rank_re), end; it != end; ++it)
    names.push_back((*it)[1]);
  return names;
}

std::string temp_path(const char* what) {
  return "/tmp/gradsync_" + std::string(what) + "_" + std::to_string(::getpid()) + ".txt";
}

}  // namespace

TEST_CASE("stall: 20 trials, one rank late past the threshold: exactly that rank is named") {
  gs::testbed::watchdog wd(120, "stall trials");
  stall_env env("0.15");
  std::mt19937 rng(20261202);
  for (int trial = 0; trial < 20; ++trial) {
    const std::size_t n = 3 + trial % 3, late = 1 + rng() % (n - 1);
    gs::testbed::capture_stderr cap(temp_path("stall"));
    gs::transport::run_local(n, [&](local& t) {
      std::vector<float> g(4096, 1.0f);
      gs::allreduce<gs::algo::ring>(t, std::span<float>(g), gs::op::sum);  // all in step
      if (t.rank() == late) std::this_thread::sleep_for(std::chrono::milliseconds(260));
      gs::call_options o;
      o.label = "bucket 7 (fc2.weight)";
      gs::allreduce<gs::algo::ring>(t, std::span<float>(g), gs::op::sum, o);
      CHECK(g[0] == float(n * n));
    });
    const auto lines = stall_lines(cap.text());
    CAPTURE(trial);
    CAPTURE(late);
    REQUIRE(!lines.empty());
    for (const std::string& l : lines) {
      CAPTURE(l);
      CHECK(named_late(l) == std::vector<std::string>{std::to_string(late)});
      CHECK(l.find("in op #1 (allreduce ring of 4096 float32 (16384 bytes), op sum, bucket 7 "
                   "(fc2.weight)); not yet entered by rank " +
                   std::to_string(late) + " (still at op #0)") != std::string::npos);
    }
    // The late rank itself never waited long: it is never the one warning.
    for (const std::string& l : lines)
      CHECK(l.find("stall: rank " + std::to_string(late) + " has") == std::string::npos);
  }
  std::remove(temp_path("stall").c_str());
}

TEST_CASE("stall: nothing while nothing stalls; at most once per threshold while it lasts") {
  gs::testbed::watchdog wd(60, "stall quiet");
  stall_env env("0.2");
  std::string text;
  {
    gs::testbed::capture_stderr cap(temp_path("quiet"));
    gs::transport::run_local(3, [&](local& t) {
      std::vector<double> g(100000, 1.0);
      for (int i = 0; i < 20; ++i)
        gs::allreduce<gs::algo::tree>(t, std::span<double>(g), gs::op::sum);
      if (t.rank() == 2) std::this_thread::sleep_for(std::chrono::milliseconds(1100));
      gs::allreduce<gs::algo::tree>(t, std::span<double>(g), gs::op::sum);
    });
    text = cap.text();
  }
  const auto lines = stall_lines(text);
  std::size_t rank0 = 0;
  for (const auto& l : lines) rank0 += l.find("stall: rank 0 has") != std::string::npos;
  // Rank 0 waits about 1.1 s with a 0.2 s threshold: warnings at 0.2, 0.4, ... 1.0 s.
  CHECK(rank0 >= 3);
  CHECK(rank0 <= 5);
  for (const auto& l : lines) CHECK(named_late(l) == std::vector<std::string>{"2"});
  std::remove(temp_path("quiet").c_str());
}

TEST_CASE("stall: over two levels each level names the late ranks of its own group") {
  gs::testbed::watchdog wd(60, "stall two_level");
  stall_env env("0.15");
  using two_level = gs::transport::two_level<local, local>;
  std::string text;
  {
    gs::testbed::capture_stderr cap(temp_path("two_level"));
    const auto errors = gs::testbed::run_two_level_shape(2, 2, [&](local a, local b) {
      two_level t(std::move(a), std::move(b));
      std::vector<float> g(1000, 1.0f);
      if (t.rank() == 3) std::this_thread::sleep_for(std::chrono::milliseconds(400));
      gs::allreduce<gs::algo::hierarchical<>>(t, std::span<float>(g), gs::op::sum);
    });
    text = cap.text();
    for (const auto& e : errors) CHECK(e == "");
  }
  const auto lines = stall_lines(text);
  REQUIRE(!lines.empty());
  bool node_level = false;
  for (const auto& l : lines) {
    CAPTURE(l);
    // Global rank 3 is local rank 1 of node 1: its node-mate (global 2) waits for it in
    // the node level and names local rank 1. (Once rank 3 arrives, node 0's allgather may
    // wait on a rank that has entered: "every rank has entered it", naming nobody.)
    if (l.find("allreduce inside the node") != std::string::npos &&
        l.find("not yet entered by") != std::string::npos) {
      node_level = true;
      CHECK(named_late(l) == std::vector<std::string>{"1"});
    }
  }
  CHECK(node_level);
  std::remove(temp_path("two_level").c_str());
}
