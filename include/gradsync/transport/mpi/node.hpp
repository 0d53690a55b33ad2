// SPDX-License-Identifier: Apache-2.0
// Which ranks of a communicator share a host, for transport::mpi and the MPI bootstraps
// of shm and two_level, found with polled nonblocking calls (poll.hpp says why) and
// under a deadline. One MPI_Iallgather of each rank's host name, boot id and /dev/shm
// decides when they all agree (one host: MPI_COMM_TYPE_SHARED would say the same);
// otherwise MPI_Comm_split_type, the only blocking call left, says where the nodes are.
// On 6 MPICH ranks sharing 2 cores MPI_Comm_split_type alone takes ~160 ms.
#pragma once

#include <mpi.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gradsync/config.hpp"
#include "gradsync/core/deadline.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/transport/mpi/poll.hpp"
#include "gradsync/transport/mpi/types.hpp"

namespace gradsync::transport::detail {

/// One rank of a communicator: where it runs.
struct rank_place {
  int world = 0;     ///< its rank in MPI_COMM_WORLD
  int leader = 0;    ///< the lowest rank of the communicator on its host
  std::string host;  ///< MPI_Get_processor_name (at most 47 characters)
};

/// MPI_Iallgather of `bytes` per rank from `mine` into `all`, polled until `until`
/// (collective over comm; poll_collective says what a timeout leaves).
GRADSYNC_DECL void allgather_polled(MPI_Comm comm, const void* mine, std::size_t bytes,
                                    std::vector<char>& all, std::size_t size, deadline until,
                                    const char* what);

/// Where every rank of `comm` runs (collective over comm).
GRADSYNC_DECL std::vector<rank_place> place_ranks(MPI_Comm comm, deadline until);

}  // namespace gradsync::transport::detail

#if GRADSYNC_HEADER_ONLY
#include "gradsync/transport/mpi/node.ipp"
#endif
