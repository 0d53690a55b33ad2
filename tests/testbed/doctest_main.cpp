// SPDX-License-Identifier: Apache-2.0
// The doctest main shared by every single-process test executable. The grouped programs
// (one per directory and optimisation level, tests/meson.build) run one source file's
// cases per test with --source-file; a filter that matches no case fails the run, so a
// misspelt or stale filter cannot pass without testing anything.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <atomic>
#include <cstdio>
#include <string_view>

namespace {

// How many cases passed the filters; written by the listener at the end of the run. A
// listener is constructed by doctest, so this cannot live in main's frame.
std::atomic<unsigned> cases_selected{0};

struct count_selected : doctest::IReporter {
  explicit count_selected(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& s) override {
    cases_selected = s.numTestCasesPassingFilters;
  }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

bool filters_by_file(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a.starts_with("--source-file") || a.starts_with("-sf") ||
        a.starts_with("--dt-source-file") || a.starts_with("--dt-sf")) {
      return true;
    }
  }
  return false;
}

}  // namespace

DOCTEST_REGISTER_LISTENER("count_selected", 1, count_selected);

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int result = context.run();
  if (context.shouldExit()) return result;
  if (filters_by_file(argc, argv) && cases_selected == 0) {
    std::fprintf(stderr,
                 "doctest_main: no test case is in the files that --source-file names; check "
                 "the test's registration in its meson.build\n");
    return 1;
  }
  return result;
}
