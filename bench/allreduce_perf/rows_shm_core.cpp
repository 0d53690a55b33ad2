// SPDX-License-Identifier: Apache-2.0
// gradsync rows over transport::shm, compiled once without MPI (rows.hpp); the MPI
// bootstrap and the MPI_Allreduce partner come from rows_shm.cpp.
#include <string>

#include "gradsync/transport/shm.hpp"
#include "gradsync_rows.hpp"
#include "partner.hpp"
#include "rows.hpp"

namespace gradsync::bench {

gradsync_totals run_shm_rows_on(const transport::shm_options& so, group& g, const options& o,
                                csv_writer& csv, const std::string& mpi_name, bool registered,
                                partner_source* partner) {
  transport::shm t(so);
  return run_gradsync_rows(t, g, o, csv, mpi_name, registered, partner);
}

}  // namespace gradsync::bench
