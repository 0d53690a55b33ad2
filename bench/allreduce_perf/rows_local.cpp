// SPDX-License-Identifier: Apache-2.0
// gradsync rows over transport::local (threads as ranks).
#include "gradsync/transport/local.hpp"
#include "gradsync_rows.hpp"
#include "rows.hpp"

namespace gradsync::bench {

gradsync_totals run_local_rows(transport::local& t, group& g, const options& o, csv_writer& csv,
                               const std::string& mpi_name) {
  return run_gradsync_rows(t, g, o, csv, mpi_name);
}

}  // namespace gradsync::bench
