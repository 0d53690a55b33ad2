// SPDX-License-Identifier: Apache-2.0
// transport::two_level_from_mpi — shm inside each node, mpi across nodes, from one MPI
// communicator (collective over it):
//
//   auto t = gradsync::transport::two_level_from_mpi(MPI_COMM_WORLD);
//   gs::allreduce<gs::algo::hierarchical<gs::algo::native>>(t, std::span<float>(g), gs::op::avg);
//
// The ranks of `comm` that share memory (mpi/node.hpp)
// form a node; or, with node_color >= 0, the ranks that pass the same color do (they
// must share one host, else every rank gets errc::invalid_argument: e.g. to split one
// big host into NUMA-local groups, or to run a multi-node layout on one machine in
// tests). Inside a node the shm group is ordered as `comm`; the ranks with the same
// local index form one mpi transport, nodes ordered by their lowest rank in `comm`, so
// two_level::rank() numbers every rank once.
#pragma once

#include <mpi.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "gradsync/config.hpp"
#include "gradsync/core/deadline.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/transport/mpi.hpp"
#include "gradsync/transport/mpi/node.hpp"
#include "gradsync/transport/shm/from_mpi.hpp"
#include "gradsync/transport/two_level.hpp"

namespace gradsync::transport {

/// two_level<shm, mpi> over `comm`; node_color < 0: nodes are the shared-memory domains.
/// `inter` configures the mpi transport across nodes (e.g. mpi_options::network).
GRADSYNC_DECL two_level<shm, mpi> two_level_from_mpi(MPI_Comm comm, const shm_options& base = {},
                                                     int node_color = -1,
                                                     const mpi_options& inter = {});

}  // namespace gradsync::transport

#if GRADSYNC_HEADER_ONLY
#include "gradsync/transport/two_level/from_mpi.ipp"
#endif
