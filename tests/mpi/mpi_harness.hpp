// SPDX-License-Identifier: Apache-2.0
// The project's own small MPI test harness (Debian's doctest has no MPI extension).
// Every rank runs every test case; each case runs under a watchdog; failures are
// printed by the rank that saw them; rank 0 prints one line per case and a summary;
// the exit code is agreed across ranks, so mpirun fails iff some rank failed.
//
//   GS_MPI_TEST("ring sums exactly", 60) { ... GS_CHECK(x == y); ... }
//
// Harness collectives (barrier, gathers) use nonblocking MPI polled with the same
// backoff as transport::mpi: blocking MPI calls busy-poll and crawl when 6 ranks share
// 2 cores.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <gradsync/core/deadline.hpp>
#include <gradsync/core/error.hpp>
#include <gradsync/transport/mpi/poll.hpp>

#include "text.hpp"  // contains(), for the cases' message checks

namespace gradsync::testbed {

struct mpi_test_case {
  std::string name;
  void (*fn)();
  double watchdog_s;
  bool timing = false;  // its wall time is mostly deliberate waits (GS_MPI_TIMING_TEST)
};

/// Every case registered in this executable, in registration order.
inline std::vector<mpi_test_case>& mpi_registry() {
  static std::vector<mpi_test_case> cases;
  return cases;
}

struct mpi_registrar {
  mpi_registrar(const char* name, void (*fn)(), double watchdog_s, bool timing = false) {
    mpi_registry().push_back({name, fn, watchdog_s, timing});
  }
};

/// What the running case can ask of the harness.
struct mpi_test_state {
  int rank = 0;
  int size = 1;
  int failures = 0;  // in the running case, on this rank
  std::string case_name;
};
inline mpi_test_state& mpi_state() {
  static mpi_test_state s;
  return s;
}
/// Objects kept alive until just before MPI_Finalize (see keep_until_exit).
inline std::vector<std::shared_ptr<void>>& mpi_graveyard() {
  static std::vector<std::shared_ptr<void>> kept;
  return kept;
}

/// Keeps `obj` (e.g. a transport a late rank may still send on) alive until the end of
/// the run. A communicator freed while a peer's message to it is in flight is a race
/// (MPI_Comm_free is collective): Open MPI reuses the context id, and the stale message
/// would then be delivered into the next communicator created.
template <class T>
void keep_until_exit(T&& obj) {
  mpi_graveyard().push_back(std::make_shared<std::remove_reference_t<T>>(std::forward<T>(obj)));
}

inline std::size_t world_rank() {
  return static_cast<std::size_t>(mpi_state().rank);
}
inline std::size_t world_size() {
  return static_cast<std::size_t>(mpi_state().size);
}

/// Thrown by GS_SKIP (the case is reported as skipped) and GS_REQUIRE (case aborted).
struct mpi_skip {
  std::string why;
};
struct mpi_require_failed {};

inline void report_failure(const char* file, int line, const std::string& what) {
  ++mpi_state().failures;
  std::fprintf(stderr, "[rank %d] %s:%d: FAILED in '%s': %s\n", mpi_state().rank, file, line,
               mpi_state().case_name.c_str(), what.c_str());
  std::fflush(stderr);
}

/// Waits for a harness request on MPI_COMM_WORLD; a stuck harness collective aborts.
inline void harness_wait(MPI_Request& req, const char* what) {
  MPI_Status st;
  const int rc = transport::detail::mpi_poll(req, st, deadline::after(seconds_d{120}));
  if (rc != MPI_SUCCESS) {
    std::fprintf(stderr, "[rank %d] harness %s did not complete (rc %d); aborting\n",
                 mpi_state().rank, what, rc);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
}

inline void world_barrier() {
  MPI_Request req;
  MPI_Ibarrier(MPI_COMM_WORLD, &req);
  harness_wait(req, "barrier");
}

/// Every rank's `k` values (rank-major), on every rank.
inline std::vector<std::uint64_t> world_allgather(const std::vector<std::uint64_t>& mine) {
  std::vector<std::uint64_t> all(mine.size() * world_size());
  MPI_Request req;
  MPI_Iallgather(mine.data(), static_cast<int>(mine.size()), MPI_UINT64_T, all.data(),
                 static_cast<int>(mine.size()), MPI_UINT64_T, MPI_COMM_WORLD, &req);
  harness_wait(req, "allgather");
  return all;
}

/// True on every rank iff every rank passed the same `mine` (e.g. a hash of its output).
inline bool same_on_all_ranks(const std::vector<std::uint64_t>& mine) {
  const auto all = world_allgather(mine);
  for (std::size_t r = 1; r < world_size(); ++r) {
    for (std::size_t i = 0; i < mine.size(); ++i) {
      if (all[r * mine.size() + i] != all[i]) return false;
    }
  }
  return true;
}

/// Runs f, expects a gradsync::error with `code`, and returns its message ("" if none).
template <class F>
std::string expect_error(F&& f, errc code, const char* expr, const char* file, int line) {
  try {
    f();
  } catch (const gradsync::error& e) {
    if (e.code() != code) {
      report_failure(file, line,
                     std::string(expr) + " threw " + std::string(errc_name(e.code())) +
                         " instead of " + std::string(errc_name(code)) + ": " + e.what());
    }
    return e.what();
  } catch (const std::exception& e) {
    report_failure(file, line, std::string(expr) + " threw a non-gradsync exception: " + e.what());
    return e.what();
  }
  report_failure(
      file, line,
      std::string(expr) + " did not throw (expected " + std::string(errc_name(code)) + ")");
  return {};
}

/// Runs the registered cases whose names contain one of `filters` (all when empty);
/// returns the exit code every rank agrees on. Call between MPI init and finalize.
int run_mpi_tests(const std::vector<std::string>& filters, const char* flavour);

}  // namespace gradsync::testbed

#define GS_MPI_CAT2(a, b) a##b
#define GS_MPI_CAT(a, b) GS_MPI_CAT2(a, b)
// The names are numbered by __COUNTER__, not __LINE__: a grouped build compiles several
// test files as one unit (tests/meson.build), where two cases can share a line number.
#define GS_MPI_CASE(name, watchdog_s, timing) GS_MPI_CASE_N(name, watchdog_s, timing, __COUNTER__)
#define GS_MPI_CASE_N(name, watchdog_s, timing, n)                            \
  static void GS_MPI_CAT(gs_mpi_case_, n)();                                  \
  static const ::gradsync::testbed::mpi_registrar GS_MPI_CAT(gs_mpi_reg_, n){ \
      name, &GS_MPI_CAT(gs_mpi_case_, n), watchdog_s, timing};                \
  static void GS_MPI_CAT(gs_mpi_case_, n)()
/// Defines a test case every rank runs; `watchdog_s` bounds its wall time.
#define GS_MPI_TEST(name, watchdog_s) GS_MPI_CASE(name, watchdog_s, false)
/// A case whose wall time is mostly deliberate waits (deadlines running out, late ranks).
/// A job run with GRADSYNC_TEST_TIMING=0 skips it, one with "only" runs nothing else:
/// tests/mpi/meson.build says which rank counts run these cases (2, 3 and 6 between the
/// MPIs: direct and relayed waits alike).
#define GS_MPI_TIMING_TEST(name, watchdog_s) GS_MPI_CASE(name, watchdog_s, true)

/// Records a failure (and goes on) unless cond holds; `info` is built only on failure.
#define GS_CHECK_MSG(cond, info)                                                      \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      ::gradsync::testbed::report_failure(__FILE__, __LINE__,                         \
                                          std::string("CHECK(" #cond ") ") + (info)); \
    }                                                                                 \
  } while (0)
#define GS_CHECK(cond) GS_CHECK_MSG(cond, "")
/// Like GS_CHECK, but ends the case on failure.
#define GS_REQUIRE(cond)                                                             \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      ::gradsync::testbed::report_failure(__FILE__, __LINE__, "REQUIRE(" #cond ")"); \
      throw ::gradsync::testbed::mpi_require_failed{};                               \
    }                                                                                \
  } while (0)
/// Expects `expr` to throw gradsync::error with errc `code`; evaluates to its message.
#define GS_CHECK_ERROR(expr, code) \
  ::gradsync::testbed::expect_error([&] { expr; }, code, #expr, __FILE__, __LINE__)
/// Skips the running case (on every rank: call it under a condition all ranks share).
#define GS_SKIP(why)                    \
  throw ::gradsync::testbed::mpi_skip { \
    why                                 \
  }
