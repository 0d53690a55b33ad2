// SPDX-License-Identifier: Apache-2.0
// Bootstrapping transport::shm from an MPI communicator: the ranks of `comm` that share
// this node (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED) form one shm group; node
// rank 0 makes up a job id and broadcasts it. Kept apart from shm.hpp so that shm.hpp
// needs no MPI.
//
//   MPI_Init(&argc, &argv);
//   auto t = gradsync::transport::shm_from_mpi(MPI_COMM_WORLD);  // collective over comm
//   gs::allreduce<gs::algo::direct_two_shot>(t, std::span<float>(grad), gs::op::sum);
//
// Works with Open MPI and MPICH. The node communicator is freed before returning.
#pragma once

#include <mpi.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "gradsync/core/error.hpp"
#include "gradsync/transport/mpi/types.hpp"
#include "gradsync/transport/shm.hpp"

namespace gradsync::transport {

/// The shm options for this process's node-local group of `comm` (collective over comm).
/// `base` supplies the buffer sizes and the bootstrap timeout.
inline shm_options shm_options_from_mpi(MPI_Comm comm, shm_options base = {}) {
  auto check = [](int rc, const char* call) { detail::check_mpi(rc, call, {}); };
  MPI_Comm node = MPI_COMM_NULL;
  check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
        "MPI_Comm_split_type");
  int rank = 0, size = 0;
  MPI_Comm_rank(node, &rank);
  MPI_Comm_size(node, &size);
  char job[64] = {};
  if (rank == 0) {  // pid + time + address: unique among concurrent jobs on this host
    timespec ts{};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    std::snprintf(job, sizeof job, "mpi-%d-%lld-%ld", static_cast<int>(::getpid()),
                  static_cast<long long>(ts.tv_sec), static_cast<long>(ts.tv_nsec));
  }
  int rc = MPI_Bcast(job, sizeof job, MPI_CHAR, 0, node);
  // For error messages: each node rank's rank in the job, and this host's name.
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  std::vector<int> world(static_cast<std::size_t>(size));
  if (rc == MPI_SUCCESS)
    rc = MPI_Allgather(&world_rank, 1, MPI_INT, world.data(), 1, MPI_INT, node);
  MPI_Comm_free(&node);
  check(rc, "MPI_Bcast/MPI_Allgather");
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(host, &len);
  base.job_ranks.assign(world.begin(), world.end());
  base.host.assign(host, static_cast<std::size_t>(len));
  base.rank = static_cast<std::size_t>(rank);
  base.size = static_cast<std::size_t>(size);
  base.job = job;
  return base;
}

/// An shm transport over the node-local ranks of `comm` (collective over comm).
inline shm shm_from_mpi(MPI_Comm comm, const shm_options& base = {}) {
  return shm(shm_options_from_mpi(comm, base));
}

}  // namespace gradsync::transport
