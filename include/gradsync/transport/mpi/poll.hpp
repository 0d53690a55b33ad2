// SPDX-License-Identifier: Apache-2.0
// How transport::mpi waits: MPI_Test polling paced by a backoff, never a blocking MPI
// call. MPI_Wait and blocking collectives busy-poll inside the library (MPICH's ch4
// does, whatever its settings), which on an oversubscribed host (6 ranks on 2 cores)
// turns a 50 us barrier into 25 ms. Polling ourselves lets a rank give its core to
// the peer it is waiting for, and lets every wait honour its deadline.
#pragma once

#include <mpi.h>
#include <sched.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <thread>

#include "gradsync/core/abort.hpp"
#include "gradsync/core/deadline.hpp"
#include "gradsync/core/error.hpp"

namespace gradsync::transport::detail {

/// Paces one polling loop. Every wait first spins for a few microseconds (a peer that
/// has a core of its own answers within that). Then:
///  - a small message (a latency-bound wait for a peer) sleeps ~50 us between polls,
///    so ranks sharing a core, and everything else on the host, get to run;
///  - a bulk transfer keeps polling, with sched_yield in between, and never sleeps:
///    MPI moves large messages inside MPI_Test (Open MPI's copy-in/copy-out fragments,
///    its nonblocking-collective schedules), so a sleeping rank stalls its own data.
/// Measurements: docs/perf/tuning.md, "how waits poll".
class mpi_backoff {
 public:
  /// How long a wait spins before it yields or sleeps.
  static constexpr std::chrono::microseconds spin_for{20};
  /// Sleep between polls (the kernel's timer slack adds ~50 us).
  static constexpr std::chrono::microseconds sleep_for{50};

  explicit mpi_backoff(bool bulk = false) : bulk_(bulk) {}

  void pause() {
    const auto now = clock::now();
    if (!started_) {
      started_ = true;
      spin_until_ = now + spin_for;
    }
    if (now < spin_until_) {
      relax();
    } else if (bulk_) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(sleep_for);
    }
  }

 private:
  static void relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  bool bulk_;
  bool started_ = false;
  clock::time_point spin_until_{};
};

/// Transfers of at least this many bytes wait as bulk transfers (see mpi_backoff).
inline constexpr std::size_t mpi_bulk_bytes = std::size_t{64} << 10;

/// What mpi_poll returns when the deadline passed (MPI's own codes are >= 0).
inline constexpr int mpi_poll_timed_out = -1;
/// What mpi_poll returns when the transport was aborted (abort()).
inline constexpr int mpi_poll_aborted = -2;

/// What mpi_poll returns when a peer announced its failure (the idle hook said so).
inline constexpr int mpi_poll_peer_failed = -3;

/// Nothing to do between polls.
struct no_idle {
  bool operator()(clock::time_point) const { return false; }
};

/// Polls `req` with MPI_Test until it completes (returns MPI_SUCCESS or MPI's error code,
/// `st` filled in), `d` passes (returns mpi_poll_timed_out, `req` still active) or `stop`
/// is raised (mpi_poll_aborted, likewise). `bulk`: the request moves at least
/// mpi_bulk_bytes (see mpi_backoff). `idle(now)` runs between polls (the stall
/// inspector, mpi/stall.hpp); when it returns true (a peer announced its failure) the
/// wait ends with mpi_poll_peer_failed, `req` still active.
template <class Idle = no_idle>
int mpi_poll(MPI_Request& req, MPI_Status& st, deadline d, bool bulk = false,
             const abort_switch* stop = nullptr, Idle&& idle = {}) {
  mpi_backoff b(bulk);
  for (;;) {
    int done = 0;
    const int rc = MPI_Test(&req, &done, &st);
    if (rc != MPI_SUCCESS) return rc;
    if (done) return MPI_SUCCESS;
    if (stop && stop->raised()) return mpi_poll_aborted;
    const auto now = clock::now();
    if (now >= d.at) return mpi_poll_timed_out;
    if (idle(now)) return mpi_poll_peer_failed;
    b.pause();
  }
}

/// Waits by `d` for a nonblocking collective that every rank posts at setup (a
/// communicator's idup, a bootstrap's allgather or broadcast). After a timeout MPI may
/// still write its buffers, so `keep()` first leaves them allocated (releases them from
/// their owners); then errc::timeout says `what` did not complete and that every rank
/// must take part. MPI's own error codes are returned.
template <class Keep>
int poll_collective(MPI_Request& req, deadline d, Keep&& keep, const error_site& where,
                    const std::string& what) {
  MPI_Status st;
  const int rc = mpi_poll(req, st, d);
  if (rc == mpi_poll_timed_out) {
    keep();
    throw error(errc::timeout, where,
                what +
                    " did not complete before the deadline: every rank of the communicator "
                    "must take part (set GRADSYNC_TIMEOUT to wait longer)");
  }
  return rc;
}

}  // namespace gradsync::transport::detail
