// SPDX-License-Identifier: Apache-2.0
// The functions from_mpi.hpp declares: inline in a header-only build, compiled once by
// <gradsync/src_mpi.hpp> under GRADSYNC_SEPARATE_COMPILATION (config.hpp).
#pragma once

#include "gradsync/transport/two_level/from_mpi.hpp"

namespace gradsync::transport {

GRADSYNC_DECL two_level<shm, mpi> two_level_from_mpi(MPI_Comm comm, const shm_options& base,
                                                     int node_color, const mpi_options& inter) {
  const deadline until = deadline::after(
      base.bootstrap_timeout.count() < 0 ? default_timeout() : base.bootstrap_timeout);
  const std::vector<detail::rank_place> places = detail::place_ranks(comm, until);
  const std::size_t n = places.size();
  // node[r]: the lowest rank of r's node, the node's name in what follows.
  std::vector<int> node(n);
  for (std::size_t r = 0; r < n; ++r) node[r] = places[r].leader;
  if (node_color >= 0) {
    std::vector<char> raw;
    detail::allgather_polled(comm, &node_color, sizeof node_color, raw, n, until,
                             "two_level_from_mpi's node colors");
    std::vector<int> color(n);
    std::memcpy(color.data(), raw.data(), raw.size());
    for (std::size_t r = 0; r < n; ++r) {
      std::size_t q = 0;
      while (color[q] != color[r]) ++q;
      // Every rank sees the same table, so all of them throw together.
      if (places[q].leader != places[r].leader) {
        throw error(errc::invalid_argument, {},
                    "two_level_from_mpi: the ranks of node_color " + std::to_string(color[r]) +
                        " are on several hosts (rank " + std::to_string(q) + " on " +
                        places[q].host + ", rank " + std::to_string(r) + " on " + places[r].host +
                        "): give the ranks of each host their own colors, or pass node_color -1");
      }
      node[r] = static_cast<int>(q);
    }
  }
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  const auto me = static_cast<std::size_t>(rank);
  const int leader = node[me];
  int local_rank = 0;
  for (std::size_t q = 0; q < me; ++q) local_rank += node[q] == leader ? 1 : 0;
  shm intra = shm(detail::shm_options_for_group(comm, places, node, base, until));
  mpi across = mpi(comm, inter).split(local_rank, leader);
  return two_level<shm, mpi>(std::move(intra), std::move(across));
}

}  // namespace gradsync::transport
