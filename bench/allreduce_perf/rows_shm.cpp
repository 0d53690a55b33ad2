// SPDX-License-Identifier: Apache-2.0
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
#include "peer_mpi.hpp"
#define GRADSYNC_BENCH_HAVE_SHM 1
#if __has_include("gradsync/transport/shm_mpi.hpp")
#include "gradsync/transport/shm_mpi.hpp"
#define GRADSYNC_BENCH_HAVE_SHM_MPI 1
#endif
#endif

namespace gradsync::bench {

gradsync_totals run_shm_rows(MPI_Comm comm, group& g, const options& o, csv_writer& csv,
                             const std::string& mpi_name, bool registered) {
#ifdef GRADSYNC_BENCH_HAVE_SHM
#ifdef GRADSYNC_BENCH_HAVE_SHM_MPI
  transport::shm_options base;
  if (registered) {  // room for the largest buffer of the sweep, whatever the type
    const std::vector<std::size_t> sizes = sweep_sizes(o, 1);
    base.heap_bytes = sizes.empty() ? 0 : sizes.back() + 4096;
  }
  transport::shm t(transport::shm_options_from_mpi(comm, base));
#else
  // Bootstrapped from the communicator: rank 0 names the job, everyone joins it.
  transport::shm_options so;
  if (registered) so.heap_bytes = sweep_sizes(o, 1).empty() ? 0 : sweep_sizes(o, 1).back() + 4096;
  so.rank = g.rank();
  so.size = g.size();
  so.job = g.broadcast("allreduce_perf-" + std::to_string(getpid()) + "-" +
                       std::to_string(std::time(nullptr)));
  transport::shm t(so);
#endif
  if (o.interleave) {
    mpi_peer_maker partner(comm, mpi_name);
    return run_gradsync_rows(t, g, o, csv, mpi_name, registered, &partner);
  }
  return run_gradsync_rows(t, g, o, csv, mpi_name, registered);
#else
  (void)comm, (void)o, (void)csv, (void)mpi_name, (void)registered;
  if (g.rank() == 0) {
    std::printf(
        "#\n# transport=shm: not in this build (gradsync/transport/shm.hpp is "
        "missing); skipped\n");
  }
  return {};
#endif
}

}  // namespace gradsync::bench
