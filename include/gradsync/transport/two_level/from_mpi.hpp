// SPDX-License-Identifier: Apache-2.0
// transport::two_level_from_mpi — shm inside each node, mpi across nodes, from one MPI
// communicator (collective over it):
//
//   auto t = gradsync::transport::two_level_from_mpi(MPI_COMM_WORLD);
//   gs::allreduce<gs::algo::hierarchical<gs::algo::native>>(t, std::span<float>(g), gs::op::avg);
//
// The ranks of `comm` that share memory (MPI_Comm_split_type, MPI_COMM_TYPE_SHARED)
// form a node; or, with node_color >= 0, the ranks that pass the same color do (they
// must share one host, else every rank gets errc::invalid_argument: e.g. to split one
// big host into NUMA-local groups, or to run a multi-node layout on one machine in
// tests). Inside a node the shm group is ordered as `comm`; the ranks with the same
// local index form one mpi transport, nodes ordered by their lowest rank in `comm`, so
// two_level::rank() numbers every rank once.
#pragma once

#include <mpi.h>

#include <string>
#include <utility>

#include "gradsync/core/error.hpp"
#include "gradsync/transport/mpi.hpp"
#include "gradsync/transport/mpi/types.hpp"
#include "gradsync/transport/shm/from_mpi.hpp"
#include "gradsync/transport/two_level.hpp"

namespace gradsync::transport {

/// two_level<shm, mpi> over `comm`; node_color < 0: nodes are the shared-memory domains.
/// `inter` configures the mpi transport across nodes (e.g. mpi_options::network).
inline two_level<shm, mpi> two_level_from_mpi(MPI_Comm comm, const shm_options& base = {},
                                              int node_color = -1, const mpi_options& inter = {}) {
  auto check = [](int rc, const char* call) { detail::check_mpi(rc, call, {}); };
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm node = MPI_COMM_NULL;
  if (node_color < 0) {
    check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
          "MPI_Comm_split_type");
  } else {
    check(MPI_Comm_split(comm, node_color, 0, &node), "MPI_Comm_split");
  }
  int local_rank = 0, leader = 0;
  MPI_Comm_rank(node, &local_rank);
  const int rc = MPI_Allreduce(&rank, &leader, 1, MPI_INT, MPI_MIN, node);
  if (rc != MPI_SUCCESS) MPI_Comm_free(&node);
  check(rc, "MPI_Allreduce");
  shm intra = [&] {
    try {
      return shm_from_mpi(node, base);
    } catch (...) {
      MPI_Comm_free(&node);
      throw;
    }
  }();
  int node_size = 0;
  MPI_Comm_size(node, &node_size);
  MPI_Comm_free(&node);
  // A color whose ranks are on several hosts: shm joined only this host's part of it.
  // Every rank learns whether any node was split, so all fail together.
  int split = intra.size() != static_cast<std::size_t>(node_size) ? 1 : 0, any_split = 0;
  check(MPI_Allreduce(&split, &any_split, 1, MPI_INT, MPI_MAX, comm), "MPI_Allreduce");
  if (any_split) {
    const std::string where = split ? "only " + std::to_string(intra.size()) + " of this color's " +
                                          std::to_string(node_size) + " ranks share memory here"
                                    : "seen by another rank";
    throw error(errc::invalid_argument, {},
                "two_level_from_mpi: the ranks of one node_color are on several hosts (" + where +
                    "): give the ranks of each host their own colors, or pass node_color -1");
  }
  mpi across = mpi(comm, inter).split(local_rank, leader);
  return two_level<shm, mpi>(std::move(intra), std::move(across));
}

}  // namespace gradsync::transport
