// SPDX-License-Identifier: Apache-2.0
// gradsync rows over transport::two_level<shm, mpi> (algo::hierarchical): shm inside each
// node, mpi across nodes. Nodes are the hosts, or --node-ranks K consecutive ranks (to
// try a multi-node layout on one host: the same memory then carries both levels).
#include <mpi.h>

#include <cstdio>
#include <stdexcept>
#include <string>

#include "rows.hpp"

#if __has_include("gradsync/transport/two_level/from_mpi.hpp")
#include "gradsync/transport/two_level/from_mpi.hpp"
#include "gradsync_rows.hpp"
#include "partner.hpp"
#include "peer_mpi.hpp"
#define GRADSYNC_BENCH_HAVE_TWO_LEVEL 1
#endif

namespace gradsync::bench {

gradsync_totals run_two_level_rows(MPI_Comm comm, group& g, const options& o, csv_writer& csv,
                                   const std::string& mpi_name) {
#ifdef GRADSYNC_BENCH_HAVE_TWO_LEVEL
  if (o.node_ranks && g.size() % o.node_ranks) {
    throw std::invalid_argument("--node-ranks " + std::to_string(o.node_ranks) +
                                " does not divide the " + std::to_string(g.size()) + " ranks");
  }
  const int color = o.node_ranks ? static_cast<int>(g.rank() / o.node_ranks) : -1;
  auto t = transport::two_level_from_mpi(comm, {}, color, {.network_message_bytes = o.net_msg});
  if (g.rank() == 0) {
    std::printf("#\n# transport=two_level: %zu node(s) of %zu rank(s) (shm inside, mpi across)\n",
                t.inter().size(), t.intra().size());
    std::printf("# across: network_message_bytes %zu, link %.2f Gbit/s measured (0: not)\n",
                t.inter().options().network_message_bytes, t.inter().link_gbps());
  }
  mpi_peer_maker maker(comm, mpi_name);
  partner_of<mpi_peer_maker> partner(maker);
  partner_source* p = o.interleave ? &partner : nullptr;  // one instantiation either way
  return run_gradsync_rows(t, g, o, csv, mpi_name, false, p);
#else
  (void)comm, (void)o, (void)csv, (void)mpi_name;
  if (g.rank() == 0) {
    std::printf(
        "#\n# transport=two_level: not in this build (gradsync/transport/two_level/from_mpi.hpp "
        "is missing); skipped\n");
  }
  return {};
#endif
}

}  // namespace gradsync::bench
