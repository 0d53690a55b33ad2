// SPDX-License-Identifier: Apache-2.0
// algo::auto_select: the table answers deterministically, every rank logs the same
// choice at GRADSYNC_LOG=debug, and the choice matches the table.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <gradsync/gradsync.hpp>
#include <gradsync/testing/exact_inputs.hpp>

#include "watchdog.hpp"

namespace gs = gradsync;

namespace {

/// Runs f() with stderr redirected to a temporary file and returns what was written.
template <class F>
std::string capture_stderr(F f) {
  std::fflush(stderr);
  std::FILE* tmp = std::tmpfile();
  REQUIRE(tmp != nullptr);
  const int saved = ::dup(2);
  ::dup2(::fileno(tmp), 2);
  try {
    f();
  } catch (...) {
    std::fflush(stderr);
    ::dup2(saved, 2);
    ::close(saved);
    std::fclose(tmp);
    throw;
  }
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::string out;
  std::rewind(tmp);
  char buf[4096];
  for (std::size_t got; (got = std::fread(buf, 1, sizeof buf, tmp)) > 0;) out.append(buf, got);
  std::fclose(tmp);
  return out;
}

std::size_t occurrences(const std::string& s, const std::string& part) {
  std::size_t k = 0;
  for (std::size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++k;
  return k;
}

}  // namespace

TEST_CASE("auto_select table: well-formed rows, none shadowed by an earlier one") {
  // The choices below are read from the debug log; tests/core/meson.build sets it.
  const char* log = std::getenv("GRADSYNC_LOG");
  REQUIRE_MESSAGE((log != nullptr && std::string_view(log) == "debug"),
                  "run with GRADSYNC_LOG=debug (the log is read once per process)");
  for (const auto& rule : gs::algo::tuning::auto_rules) {
    CAPTURE(rule.min_ranks);
    CAPTURE(rule.max_ranks);
    CAPTURE(rule.max_bytes);
    CHECK(rule.min_ranks >= 1);
    CHECK(rule.min_ranks <= rule.max_ranks);
    // The row decides at its own corner (fewest ranks, largest size it covers).
    CHECK(gs::algo::auto_choose(rule.max_bytes, rule.min_ranks) == rule.algo);
  }
  CHECK(gs::algo::auto_choose(std::size_t{1} << 40, 4) == gs::algo::auto_choice::ring);
}

TEST_CASE("auto_select network table: well-formed rows, 2 ranks always ring") {
  for (const auto& rule : gs::algo::tuning::auto_rules_network) {
    CAPTURE(rule.min_ranks);
    CAPTURE(rule.max_bytes);
    CHECK(rule.min_ranks <= rule.max_ranks);
    CHECK(gs::algo::auto_choose(rule.max_bytes, rule.min_ranks, true) == rule.algo);
  }
  for (std::size_t bytes : {std::size_t{8}, std::size_t{32} << 10, std::size_t{64} << 20}) {
    CHECK(gs::algo::auto_choose(bytes, 2, true) == gs::algo::auto_choice::ring);
  }
  CHECK(gs::algo::auto_choose(std::size_t{64} << 10, 4, true) == gs::algo::auto_choice::tree);
  CHECK(gs::algo::auto_choose(std::size_t{4} << 20, 4, true) == gs::algo::auto_choice::ring);
  // The same call on one host goes by the other table.
  CHECK(gs::algo::auto_choose(std::size_t{32} << 10, 4, true) ==
        gs::algo::auto_choice::halving_doubling);
  CHECK(gs::algo::auto_choose(std::size_t{32} << 10, 5, false) == gs::algo::auto_choice::tree);
  CHECK(gs::algo::auto_choose(std::size_t{32} << 10, 5, true) ==
        gs::algo::auto_choice::halving_doubling);
}

TEST_CASE("auto_select logs its choice on every rank and gives exact results") {
  REQUIRE(gs::log_enabled(gs::log_level::debug));
  gs::testbed::watchdog wd(120, "auto_select log");
  for (std::size_t n : {2, 3, 4, 8}) {
    for (std::size_t count :
         {std::size_t{7}, std::size_t{5000}, std::size_t{300000}, std::size_t{1} << 21}) {
      CAPTURE(n);
      CAPTURE(count);
      std::vector<std::size_t> wrong(n, 1);
      const std::string log = capture_stderr([&] {
        gs::transport::run_local(n, [&](gs::transport::local& t) {
          std::vector<float> v(count);
          gs::testing::fill_inputs(std::span<float>(v), gs::reduce_op::sum, t.rank(), n);
          gs::allreduce<gs::algo::auto_select>(t, std::span<float>(v), gs::op::sum);
          wrong[t.rank()] =
              gs::testing::count_wrong(std::span<const float>(v), gs::reduce_op::sum, n);
        });
      });
      CAPTURE(log);
      CHECK(wrong == std::vector<std::size_t>(n, 0));
      const std::string choice(gs::algo::auto_choice_name(gs::algo::auto_choose(4 * count, n)));
      const std::string line = "auto_select: " + std::to_string(4 * count) + " bytes, " +
                               std::to_string(n) + " ranks -> " + choice + "\n";
      CHECK(occurrences(log, line) == n);  // once per rank, the same on every rank
      for (std::size_t r = 0; r < n; ++r) {
        CHECK(occurrences(log, "[gradsync rank " + std::to_string(r) + "] debug: " + line) == 1);
      }
    }
  }
}
