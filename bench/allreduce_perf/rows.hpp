// SPDX-License-Identifier: Apache-2.0
// The gradsync rows, one translation unit per transport (rows_local.cpp, rows_shm_core.cpp,
// rows_mpi.cpp, rows_two_level.cpp) so that they compile in parallel; main.cpp only sees these
// declarations. The shm rows need MPI only to bootstrap (rows_shm.cpp): their instantiations
// (rows_shm_core.cpp) are compiled once, without MPI, for every MPI flavour.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "../common/group.hpp"
#include "../common/report.hpp"
#include "options.hpp"

#ifdef GRADSYNC_BENCH_MPI
#include <mpi.h>
#endif

namespace gradsync::transport {
class local;
struct shm_options;
}  // namespace gradsync::transport

namespace gradsync::bench {

/// What run_gradsync_rows measured.
struct gradsync_totals {
  std::uint64_t wrong = 0;  ///< wrong elements over every checked row
  std::size_t tables = 0;   ///< transport x algorithm combinations swept
  std::size_t checked = 0;  ///< rows whose result was checked
  gradsync_totals& operator+=(const gradsync_totals& o) {
    wrong += o.wrong;
    tables += o.tables;
    checked += o.checked;
    return *this;
  }
};

/// Every requested algorithm over the in-process transport `t` (rank g.rank()).
gradsync_totals run_local_rows(transport::local& t, group& g, const options& o, csv_writer& csv,
                               const std::string& mpi_name);

class partner_source;

/// Every requested algorithm over a transport::shm made from `so` (the ranks of g);
/// `partner` (or nullptr) as in run_gradsync_rows. Compiled without MPI.
gradsync_totals run_shm_rows_on(const transport::shm_options& so, group& g, const options& o,
                                csv_writer& csv, const std::string& mpi_name, bool registered,
                                partner_source* partner);

#ifdef GRADSYNC_BENCH_MPI
/// Every requested algorithm over transport::shm bootstrapped from `comm` (the ranks of g).
/// Prints a note and returns nothing measured when shm is not part of this build.
/// `registered`: every buffer is allocated in the transport's heap (rows "shm_reg"),
/// so direct_two_shot reads peers' buffers in place.
gradsync_totals run_shm_rows(MPI_Comm comm, group& g, const options& o, csv_writer& csv,
                             const std::string& mpi_name, bool registered = false);
/// Every requested algorithm over transport::mpi on `comm` (the ranks of g).
gradsync_totals run_mpi_rows(MPI_Comm comm, group& g, const options& o, csv_writer& csv,
                             const std::string& mpi_name);
/// algo::hierarchical over two_level_from_mpi(comm): shm inside each node (a host, or
/// o.node_ranks consecutive ranks), mpi across nodes.
gradsync_totals run_two_level_rows(MPI_Comm comm, group& g, const options& o, csv_writer& csv,
                                   const std::string& mpi_name);
#endif

}  // namespace gradsync::bench
