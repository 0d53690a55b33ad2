// SPDX-License-Identifier: Apache-2.0
// gradsync rows over transport::shm, bootstrapped from an MPI communicator; the rows
// themselves are in rows_shm_core.cpp (compiled once, without MPI).
#include <mpi.h>

#include <string>
#include <vector>

#include "gradsync/transport/shm/from_mpi.hpp"
#include "partner.hpp"
#include "peer_mpi.hpp"
#include "rows.hpp"

namespace gradsync::bench {

gradsync_totals run_shm_rows(MPI_Comm comm, group& g, const options& o, csv_writer& csv,
                             const std::string& mpi_name, bool registered) {
  transport::shm_options base;
  if (registered) {  // room for the largest buffer of the sweep, whatever the type
    const std::vector<std::size_t> sizes = sweep_sizes(o, 1);
    base.heap_bytes = sizes.empty() ? 0 : sizes.back() + 4096;
  }
  const transport::shm_options so = transport::shm_options_from_mpi(comm, base);
  mpi_peer_maker maker(comm, mpi_name);
  partner_of<mpi_peer_maker> partner(maker);
  return run_shm_rows_on(so, g, o, csv, mpi_name, registered, o.interleave ? &partner : nullptr);
}

}  // namespace gradsync::bench
