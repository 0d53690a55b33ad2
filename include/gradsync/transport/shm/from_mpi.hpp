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

#include "gradsync/core/deadline.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/transport/mpi/node.hpp"
#include "gradsync/transport/shm.hpp"

namespace gradsync::transport {

namespace detail {
/// The shm options of this rank's group: the ranks of `comm` whose `group` entry equals
/// its own (collective over comm: the group's lowest rank makes up the job id, and
/// every rank's id goes round in one polled MPI_Iallgather).
inline shm_options shm_options_for_group(MPI_Comm comm, const std::vector<rank_place>& places,
                                         const std::vector<int>& group, shm_options base,
                                         deadline until) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  char job[64] = {};  // pid + time: unique among concurrent jobs on this host
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  std::snprintf(job, sizeof job, "mpi-%d-%lld-%ld", static_cast<int>(::getpid()),
                static_cast<long long>(ts.tv_sec), static_cast<long>(ts.tv_nsec));
  std::vector<char> jobs;
  allgather_polled(comm, job, sizeof job, jobs, places.size(), until, "the shm bootstrap");
  const auto me = static_cast<std::size_t>(rank);
  base.job_ranks.clear();
  std::size_t first = places.size();
  for (std::size_t r = 0; r < places.size(); ++r) {
    if (group[r] != group[me]) continue;
    if (first == places.size()) first = r;
    if (r == me) base.rank = base.job_ranks.size();
    base.job_ranks.push_back(static_cast<std::size_t>(places[r].world));
  }
  base.size = base.job_ranks.size();
  base.job = std::string(jobs.data() + first * sizeof job);
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(host, &len);
  base.host.assign(host, static_cast<std::size_t>(len));
  return base;
}
}  // namespace detail

/// The shm options for this process's node-local group of `comm` (collective over comm).
/// `base` supplies the buffer sizes and the bootstrap timeout.
inline shm_options shm_options_from_mpi(MPI_Comm comm, shm_options base = {}) {
  const deadline until = deadline::after(
      base.bootstrap_timeout.count() < 0 ? default_timeout() : base.bootstrap_timeout);
  const std::vector<detail::rank_place> places = detail::place_ranks(comm, until);
  std::vector<int> node(places.size());
  for (std::size_t r = 0; r < places.size(); ++r) node[r] = places[r].leader;
  return detail::shm_options_for_group(comm, places, node, std::move(base), until);
}

/// An shm transport over the node-local ranks of `comm` (collective over comm).
inline shm shm_from_mpi(MPI_Comm comm, const shm_options& base = {}) {
  return shm(shm_options_from_mpi(comm, base));
}

}  // namespace gradsync::transport
