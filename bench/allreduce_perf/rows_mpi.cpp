// SPDX-License-Identifier: Apache-2.0
// gradsync rows over transport::mpi.
#include <mpi.h>

#include <cstdio>
#include <string>

#include "rows.hpp"

#if __has_include("gradsync/transport/mpi.hpp")
#include "gradsync/transport/mpi.hpp"
#include "gradsync_rows.hpp"
#include "partner.hpp"
#include "peer_mpi.hpp"
#define GRADSYNC_BENCH_HAVE_MPI_TRANSPORT 1
#endif

namespace gradsync::bench {

#ifdef GRADSYNC_BENCH_HAVE_MPI_TRANSPORT
static_assert(net_msg_auto == transport::mpi_options::network_auto,
              "options.hpp's net_msg_auto must equal mpi_options::network_auto");
#endif

gradsync_totals run_mpi_rows(MPI_Comm comm, group& g, const options& o, csv_writer& csv,
                             const std::string& mpi_name) {
#ifdef GRADSYNC_BENCH_HAVE_MPI_TRANSPORT
  transport::mpi t(comm, {.network_message_bytes = o.net_msg, .stage_limit_bytes = o.mpi_stage});
  if (g.rank() == 0 && t.crosses_network()) {
    std::printf(
        "#\n# transport=mpi: network_message_bytes %zu, link %.2f Gbit/s measured (0: not)\n",
        t.options().network_message_bytes, t.link_gbps());
  }
  mpi_peer_maker maker(comm, mpi_name);
  partner_of<mpi_peer_maker> partner(maker);
  partner_source* p = o.interleave ? &partner : nullptr;  // one instantiation either way
  return run_gradsync_rows(t, g, o, csv, mpi_name, false, p);
#else
  (void)comm, (void)o, (void)csv, (void)mpi_name;
  if (g.rank() == 0) {
    std::printf(
        "#\n# transport=mpi: not in this build (gradsync/transport/mpi.hpp is "
        "missing); skipped\n");
  }
  return {};
#endif
}

}  // namespace gradsync::bench
