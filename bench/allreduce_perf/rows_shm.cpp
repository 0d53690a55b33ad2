// gradsync rows over transport::shm, bootstrapped from an MPI communicator.
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <string>

#include "rows.hpp"

#if __has_include("gradsync/transport/shm.hpp")
#include "gradsync/transport/shm.hpp"
#include "gradsync_rows.hpp"
#define GRADSYNC_BENCH_HAVE_SHM 1
#if __has_include("gradsync/transport/shm_mpi.hpp")
#include "gradsync/transport/shm_mpi.hpp"
#define GRADSYNC_BENCH_HAVE_SHM_MPI 1
#endif
#endif

namespace gradsync::bench {

gradsync_totals run_shm_rows(MPI_Comm comm, group& g, const options& o, csv_writer& csv,
                             const std::string& mpi_name) {
#ifdef GRADSYNC_BENCH_HAVE_SHM
#ifdef GRADSYNC_BENCH_HAVE_SHM_MPI
  transport::shm t = transport::shm_from_mpi(comm);
#else
  // Bootstrapped from the communicator: rank 0 names the job, everyone joins it.
  (void)comm;
  transport::shm_options so;
  so.rank = g.rank();
  so.size = g.size();
  so.job = g.broadcast("allreduce_perf-" + std::to_string(getpid()) + "-" +
                       std::to_string(std::time(nullptr)));
  transport::shm t(so);
#endif
  return run_gradsync_rows(t, g, o, csv, mpi_name);
#else
  (void)comm, (void)o, (void)csv, (void)mpi_name;
  if (g.rank() == 0) {
    std::printf(
        "#\n# transport=shm: not in this build (gradsync/transport/shm.hpp is "
        "missing); skipped\n");
  }
  return {};
#endif
}

}  // namespace gradsync::bench
