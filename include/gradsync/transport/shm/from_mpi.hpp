// SPDX-License-Identifier: Apache-2.0
// Bootstrapping transport::shm from an MPI communicator: the ranks of `comm` that share
// this node (mpi/node.hpp) form one shm group; its lowest rank's job id is everyone's.
// Polled MPI calls only, under the bootstrap deadline. Kept apart from shm.hpp so that
// shm.hpp needs no MPI.
//
//   MPI_Init(&argc, &argv);
//   auto t = gradsync::transport::shm_from_mpi(MPI_COMM_WORLD);  // collective over comm
//   gs::allreduce<gs::algo::direct_two_shot>(t, std::span<float>(grad), gs::op::sum);
//
// Works with Open MPI and MPICH.
#pragma once

#include <mpi.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "gradsync/config.hpp"
#include "gradsync/core/deadline.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/transport/mpi/node.hpp"
#include "gradsync/transport/shm.hpp"

namespace gradsync::transport {

namespace detail {
/// The shm options of this rank's group: the ranks of `comm` whose `group` entry equals
/// its own (collective over comm: the group's lowest rank makes up the job id, and
/// every rank's id goes round in one polled MPI_Iallgather).
GRADSYNC_DECL shm_options shm_options_for_group(MPI_Comm comm,
                                                const std::vector<rank_place>& places,
                                                const std::vector<int>& group, shm_options base,
                                                deadline until);
}  // namespace detail

/// The shm options for this process's node-local group of `comm` (collective over comm).
/// `base` supplies the buffer sizes and the bootstrap timeout.
GRADSYNC_DECL shm_options shm_options_from_mpi(MPI_Comm comm, shm_options base = {});

/// An shm transport over the node-local ranks of `comm` (collective over comm).
GRADSYNC_DECL shm shm_from_mpi(MPI_Comm comm, const shm_options& base = {});

}  // namespace gradsync::transport

#if GRADSYNC_HEADER_ONLY
#include "gradsync/transport/shm/from_mpi.ipp"
#endif
