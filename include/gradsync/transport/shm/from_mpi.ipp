// SPDX-License-Identifier: Apache-2.0
// The functions from_mpi.hpp declares: inline in a header-only build, compiled once by
// <gradsync/src_mpi.hpp> under GRADSYNC_SEPARATE_COMPILATION (config.hpp).
#pragma once

#include "gradsync/transport/shm/from_mpi.hpp"

namespace gradsync::transport {

GRADSYNC_DECL shm_options shm_options_from_mpi(MPI_Comm comm, shm_options base) {
  const deadline until = deadline::after(
      base.bootstrap_timeout.count() < 0 ? default_timeout() : base.bootstrap_timeout);
  const std::vector<detail::rank_place> places = detail::place_ranks(comm, until);
  std::vector<int> node(places.size());
  for (std::size_t r = 0; r < places.size(); ++r) node[r] = places[r].leader;
  return detail::shm_options_for_group(comm, places, node, std::move(base), until);
}

GRADSYNC_DECL shm shm_from_mpi(MPI_Comm comm, const shm_options& base) {
  return shm(shm_options_from_mpi(comm, base));
}

}  // namespace gradsync::transport

namespace gradsync::transport::detail {

GRADSYNC_DECL shm_options shm_options_for_group(MPI_Comm comm,
                                                const std::vector<rank_place>& places,
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

}  // namespace gradsync::transport::detail
