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
// ranks on each side of the cut time out (GRADSYNC_TIMEOUT) and exit. The launcher may
// still wait for an unreachable host (Open MPI's mpirun until TCP gives up on it), so
// abort_job first prints "[gradsync] rank R: ending the job ..." (end_of_job_mark), which
// scripts/elastic-run watches for to bound the launcher's life. finalize_job ends a good
// run: every rank calls it instead of MPI_Finalize.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

namespace gradsync::transport {

/// abort_job prints "[gradsync] rank R: <end_of_job_mark> ..."; scripts/elastic-run
/// matches that text.
inline constexpr const char* end_of_job_mark = "ending the job";

/// MPI_Abort(comm, code), but this process exits with `code` after `grace` at the
/// latest. Safe to call from any thread; never returns.
[[noreturn]] inline void abort_job(MPI_Comm comm, int code,
                                   std::chrono::milliseconds grace = std::chrono::seconds(10)) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  int rank = -1;  // -1: MPI is not running, so there is no rank to name
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fflush(stdout);
  std::fprintf(stderr, "[gradsync] rank %d: %s (MPI_Abort, exit status %d)\n", rank,
               end_of_job_mark, code);
  std::fflush(stderr);
  std::thread([code, grace] {
    std::this_thread::sleep_for(grace);
    std::fprintf(stderr, "[gradsync] MPI_Abort did not end the job within %lld ms; exiting\n",
                 static_cast<long long>(grace.count()));
    std::fflush(stderr);
    std::_Exit(code);
  }).detach();
  if (initialized && !finalized) MPI_Abort(comm, code);
  std::_Exit(code);
}

/// MPI_Finalize, then returns `rc`, within a bounded time. The ranks first meet in a
/// barrier on MPI_COMM_WORLD; while some rank has not arrived this one says so on stderr
/// after `note_every`, then after each doubling of that wait (so a long `grace` is not
/// silent), and after `grace` it exits with `rc`. Past the barrier every rank has finished,
/// and MPI_Finalize gets `after_barrier` before this rank exits with `rc` and a note. MPICH
/// before 4.2 over UCX's TCP transport hangs there across hosts in most jobs whose ranks
/// talked across the link: a rank still closing its connections waits for a peer that
/// already sits in the launcher's final barrier (pmodels/mpich#6596). The launcher may then
/// report the job as failed although every rank finished: the note tells why. A healthy
/// MPI_Finalize after a barrier takes milliseconds (0.01-0.04 s across simulated hosts).
inline int finalize_job(int rc, std::chrono::milliseconds grace = std::chrono::seconds(10),
                        std::chrono::milliseconds after_barrier = std::chrono::seconds(3),
                        std::chrono::milliseconds note_every = std::chrono::seconds(10)) {
  using clock = std::chrono::steady_clock;
  using ms = std::chrono::milliseconds;
  std::fflush(stdout);
  std::fflush(stderr);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return rc;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // When the barrier ended (0: not yet), for the watchdog; shared, so that the detached
  // thread never outlives what it reads.
  auto passed = std::make_shared<std::atomic<clock::rep>>(0);
  const auto start = clock::now();
  std::thread([passed, rank, rc, grace, after_barrier, note_every, start] {
    auto next_note = std::max(note_every, ms(1));
    for (;;) {
      const auto now = clock::now();
      const clock::rep at = passed->load();
      const auto waited = std::chrono::duration_cast<ms>(now - start);
      if (at == 0 && waited >= grace) {
        std::fprintf(stderr,
                     "[gradsync] rank %d: not every rank reached the end of the job within "
                     "%lld ms (MPI_Barrier before MPI_Finalize); exiting with status %d\n",
                     rank, static_cast<long long>(grace.count()), rc);
        break;
      }
      if (at == 0 && waited >= next_note) {
        std::fprintf(stderr,
                     "[gradsync] rank %d: waiting for the other ranks to reach the end of the "
                     "job: %lld ms so far, at most %lld ms\n",
                     rank, static_cast<long long>(waited.count()),
                     static_cast<long long>(grace.count()));
        std::fflush(stderr);
        next_note *= 2;
      }
      if (at != 0 && now - clock::time_point(clock::duration(at)) >= after_barrier) {
        std::fprintf(stderr,
                     "[gradsync] rank %d: MPI_Finalize did not return within %lld ms (every "
                     "rank had finished); exiting with status %d\n",
                     rank, static_cast<long long>(after_barrier.count()), rc);
        break;
      }
      std::this_thread::sleep_for(ms(10));
    }
    std::fflush(stderr);
    std::_Exit(rc);
  }).detach();
  MPI_Barrier(MPI_COMM_WORLD);
  passed->store(std::max<clock::rep>(1, clock::now().time_since_epoch().count()));
  MPI_Finalize();
  return rc;
}

}  // namespace gradsync::transport
