// SPDX-License-Identifier: Apache-2.0
// main() of the MPI test executables: initializes MPI (MPI_THREAD_MULTIPLE requested),
// runs the registered cases on every rank and exits with the code all ranks agreed on.
//
//   mpirun -n 4 ./test_mpi_openmpi [name-filter ...] [--list]
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <gradsync/core/error.hpp>
#include <gradsync/transport/mpi/exit.hpp>

#include "mpi_harness.hpp"
#include "watchdog.hpp"

#ifndef GS_MPI_FLAVOUR
#define GS_MPI_FLAVOUR "mpi"
#endif

namespace gradsync::testbed {

int run_mpi_tests(const std::vector<std::string>& filters, const char* flavour) {
  auto& st = mpi_state();
  int cases = 0, passed = 0, failed = 0, skipped = 0;
  // GRADSYNC_TEST_TIMING: "0" skips the timing cases, "only" runs nothing else (the job
  // tests/mpi/meson.build registers beside one with "0"), unset or anything else runs
  // every case. Every rank must see the same setting, or some would run a case the others
  // skip and wait for them until the watchdog.
  const char* timing_env = std::getenv("GRADSYNC_TEST_TIMING");
  const std::string_view mode = timing_env ? timing_env : "";
  const std::uint64_t timing = mode == "0" ? 0 : mode == "only" ? 2 : 1;
  for (const std::uint64_t t : world_allgather({timing})) {
    if (t != timing) {
      std::fprintf(stderr, "rank %d: GRADSYNC_TEST_TIMING differs between the ranks\n", st.rank);
      return 1;
    }
  }
  const auto t_all = std::chrono::steady_clock::now();
  for (const auto& c : mpi_registry()) {
    bool selected = filters.empty();
    for (const auto& f : filters) selected = selected || contains(c.name, f);
    if (!selected || (timing == 2 && !c.timing)) continue;
    ++cases;
    if (c.timing && !timing) {
      ++skipped;
      if (st.rank == 0) {
        std::printf("[SKIP] %s: a timing case, skipped under GRADSYNC_TEST_TIMING=0\n",
                    c.name.c_str());
      }
      continue;
    }
    world_barrier();  // every case starts together; a failed case cannot leak into the next
    st.case_name = c.name;
    st.failures = 0;
    int skip = 0;
    std::string skip_why;
    const auto t0 = std::chrono::steady_clock::now();
    {
      const watchdog wd(c.watchdog_s, "rank " + std::to_string(st.rank) + ": " + c.name);
      try {
        c.fn();
      } catch (const mpi_skip& s) {
        skip = 1;
        skip_why = s.why;
      } catch (const mpi_require_failed&) {
      } catch (const gradsync::error& e) {
        report_failure(__FILE__, __LINE__, std::string("uncaught gradsync::error: ") + e.what());
      } catch (const std::exception& e) {
        report_failure(__FILE__, __LINE__, std::string("uncaught exception: ") + e.what());
      } catch (...) {
        report_failure(__FILE__, __LINE__, "uncaught non-standard exception");
      }
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // Gather (failures, skipped) from every rank; rank 0 reports.
    const auto all = world_allgather(
        {static_cast<std::uint64_t>(st.failures), static_cast<std::uint64_t>(skip)});
    std::string bad;
    std::uint64_t nskip = 0;
    for (int r = 0; r < st.size; ++r) {
      const std::uint64_t f = all[2 * static_cast<std::size_t>(r)];
      nskip += all[2 * static_cast<std::size_t>(r) + 1];
      if (f) bad += " rank " + std::to_string(r) + " (" + std::to_string(f) + " failed checks)";
    }
    if (!bad.empty()) {
      ++failed;
    } else if (nskip) {
      ++skipped;
    } else {
      ++passed;
    }
    if (st.rank == 0) {
      if (!bad.empty()) {
        std::printf("[FAIL] %s (%.2f s):%s\n", c.name.c_str(), secs, bad.c_str());
      } else if (nskip) {
        std::printf("[SKIP] %s: %s\n", c.name.c_str(), skip_why.c_str());
      } else {
        std::printf("[ OK ] %s (%.2f s)\n", c.name.c_str(), secs);
      }
      std::fflush(stdout);
    }
  }
  world_barrier();
  const double total =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_all).count();
  if (st.rank == 0) {
    std::printf("%s, %d ranks: %d %scases, %d passed, %d failed, %d skipped (%.1f s)\n", flavour,
                st.size, cases, timing == 2 ? "timing " : "", passed, failed, skipped, total);
    std::fflush(stdout);
  }
  if (cases == 0) {
    if (st.rank == 0) std::fprintf(stderr, "no test case matches the filters\n");
    return 1;
  }
  return failed ? 1 : 0;  // every rank computed `failed` from the same gathered table
}

}  // namespace gradsync::testbed

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  auto& st = gradsync::testbed::mpi_state();
  MPI_Comm_rank(MPI_COMM_WORLD, &st.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &st.size);
  std::vector<std::string> filters;
  bool list = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--list")) {
      list = true;
    } else {
      filters.emplace_back(argv[i]);
    }
  }
  int rc = 0;
  if (list) {
    if (st.rank == 0) {
      for (const auto& c : gradsync::testbed::mpi_registry()) std::printf("%s\n", c.name.c_str());
    }
  } else {
    rc = gradsync::testbed::run_mpi_tests(filters, GS_MPI_FLAVOUR);
  }
  gradsync::testbed::world_barrier();
  gradsync::testbed::mpi_graveyard().clear();  // every rank is past every case now
  gradsync::testbed::world_barrier();
  // Bounded: MPICH before 4.2 over UCX's TCP transport may hang in MPI_Finalize across
  // hosts after every rank finished (transport/mpi/exit.hpp); the exit code was agreed above,
  // so 1 s (not the library's 3) after the barrier is enough: a healthy one takes ms.
  return gradsync::transport::finalize_job(rc, std::chrono::seconds(10), std::chrono::seconds(1));
}
