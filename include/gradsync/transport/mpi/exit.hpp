// SPDX-License-Identifier: Apache-2.0
// How an MPI job ends within a bounded time: transport::abort_job after an error,
// transport::finalize_job at the end of a good run.
//
// abort_job: MPI_Abort asks the launcher to kill every rank; when the launcher cannot
// reach a host (its link went down), MPI_Abort may never return (Open MPI 4.1 and MPICH
// 4.0 both wait for the unreachable daemon), and the job hangs after the error was
// printed. abort_job flushes stdio, arms a watchdog that _Exit()s this process after
// `grace`, then calls MPI_Abort:
//
//   try { train(); } catch (const gradsync::error& e) {
//     std::fprintf(stderr, "error: %s\n", e.what());
//     gradsync::transport::abort_job(MPI_COMM_WORLD, 1);  // never returns
//   }
//
// Every rank that hits the error ends by itself, so a partitioned job ends too: the
// ranks on each side of the cut time out (GRADSYNC_TIMEOUT) and exit.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace gradsync::transport {

/// MPI_Abort(comm, code), but this process exits with `code` after `grace` at the
/// latest. Safe to call from any thread; never returns.
[[noreturn]] inline void abort_job(MPI_Comm comm, int code,
                                   std::chrono::milliseconds grace = std::chrono::seconds(10)) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::thread([code, grace] {
    std::this_thread::sleep_for(grace);
    std::fprintf(stderr, "[gradsync] MPI_Abort did not end the job within %lld ms; exiting\n",
                 static_cast<long long>(grace.count()));
    std::fflush(stderr);
    std::_Exit(code);
  }).detach();
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(comm, code);
  std::_Exit(code);
}

/// MPI_Finalize, then returns `rc`; if MPI_Finalize has not returned after `grace`,
/// says so on stderr and exits with `rc`. MPICH 4.0 over UCX 1.13's TCP transport
/// sometimes never returns from it across hosts: a rank still closing its connections
/// waits for a peer that already sits in the launcher's final barrier (raw MPI programs
/// too, about 1 run in 10 in the virtual cluster; openucx/ucx#8738). The launcher may
/// then report the job as failed although every rank finished: the note tells why.
/// A healthy MPI_Finalize takes well under a second: 10 s is ample, and bounds what a
/// hung one adds to a job (it was 30 s; the cluster tests waited that out in most MPICH jobs).
inline int finalize_job(int rc, std::chrono::milliseconds grace = std::chrono::seconds(10)) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::thread([rc, grace] {
    std::this_thread::sleep_for(grace);
    std::fprintf(stderr,
                 "[gradsync] MPI_Finalize did not return within %lld ms (every rank had "
                 "finished); exiting with status %d\n",
                 static_cast<long long>(grace.count()), rc);
    std::fflush(stderr);
    std::_Exit(rc);
  }).detach();
  MPI_Finalize();
  return rc;
}

}  // namespace gradsync::transport
