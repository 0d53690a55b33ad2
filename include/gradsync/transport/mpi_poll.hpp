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
#include <thread>

#include "gradsync/core/deadline.hpp"

namespace gradsync::transport::detail {

/// Paces one polling loop: spin briefly (lowest latency when every rank has a core of
/// its own), then sched_yield (a peer sharing the core gets to run), then short sleeps
/// (a long wait, e.g. for a late rank, stops burning a core others need).
class mpi_backoff {
 public:
  /// Polls spent spinning before the first yield.
  static constexpr unsigned spin_polls = 64;
  /// How long a wait keeps yielding before it starts to sleep between polls.
  static constexpr std::chrono::microseconds yield_for{2000};
  /// Sleep between polls once yielding has gone on for yield_for.
  static constexpr std::chrono::microseconds sleep_for{50};

  void pause() {
    if (polls_ < spin_polls) {
      ++polls_;
      relax();
      return;
    }
    const auto now = clock::now();
    if (polls_ == spin_polls) {
      ++polls_;
      yield_until_ = now + yield_for;
    }
    if (now < yield_until_) {
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
  unsigned polls_ = 0;
  clock::time_point yield_until_{};
};

/// What mpi_poll returns when the deadline passed (MPI's own codes are >= 0).
inline constexpr int mpi_poll_timed_out = -1;

/// Polls `req` with MPI_Test until it completes (returns MPI_SUCCESS or MPI's error code,
/// `st` filled in) or `d` passes (returns mpi_poll_timed_out, `req` still active).
inline int mpi_poll(MPI_Request& req, MPI_Status& st, deadline d) {
  mpi_backoff b;
  for (;;) {
    int done = 0;
    const int rc = MPI_Test(&req, &done, &st);
    if (rc != MPI_SUCCESS) return rc;
    if (done) return MPI_SUCCESS;
    if (d.expired()) return mpi_poll_timed_out;
    b.pause();
  }
}

}  // namespace gradsync::transport::detail
