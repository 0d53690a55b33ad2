// SPDX-License-Identifier: Apache-2.0
// The stall inspector's part in every transport. A rank that has waited in one collective
// longer than GRADSYNC_STALL_WARN seconds (default: a tenth of the deadline, at least 5 s)
// logs one warning naming the ranks that have not entered that call yet, with the call's
// sequence number, what it is and, in an allreducer, its bucket; then again at most once
// per threshold while the wait lasts. Each transport keeps a stall_watch: the entry of
// each call (enter_call, from the entry points), and a check it runs between polls of its
// waits, which asks the transport's own board of where each rank is (local and shm: shared
// memory; mpi: a query answered from the peers' waits). Nothing goes on the wire, and no
// string is built, until a call has actually stalled.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gradsync/config.hpp"
#include "gradsync/core/deadline.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/log.hpp"
#include "gradsync/core/op.hpp"

namespace gradsync {

/// What a collective is, as the stall warning names it (plain values and views of static
/// or caller-owned text: noting a call builds nothing).
struct call_note {
  std::string_view kind = "allreduce";  ///< the collective
  std::string_view algorithm;           ///< A::name
  dtype type = dtype::f32;
  reduce_op op = reduce_op::sum;
  std::size_t count = 0;
  std::string_view label;  ///< call_options::label (an allreducer's bucket); may be empty
};

/// Where one peer stands, for the warning.
struct peer_position {
  std::size_t rank = 0;       ///< the peer as messages name it (describe_rank)
  std::string name;           ///< "rank 5 on node-b"
  bool known = true;          ///< false: it did not answer (not in a gradsync wait)
  std::uint64_t entered = 0;  ///< calls it has entered (its last call's seq + 1)
  /// The job rank it waits for on another level of a two_level, + 1 (0: none): it is in
  /// the call, but held up inside its node.
  std::uint64_t blocked_on = 0;
};

/// One transport's stall clock and the call it is in.
class stall_watch {
  using clock = std::chrono::steady_clock;

 public:
  /// The threshold from GRADSYNC_STALL_WARN (or the default timeout's tenth, >= 5 s).
  stall_watch() : warn_(stall_threshold(default_timeout())) {}
  /// A given threshold (no environment: cannot throw).
  explicit stall_watch(seconds_d warn) noexcept : warn_(warn) {}

  /// This rank enters call `seq` now.
  void enter(std::uint64_t seq, const call_note& note) {
    seq_ = seq;
    note_ = note;
    entered_ = seq + 1;
    start_ = clock::now();
    next_ = detail::time_after(start_, warn_);  // saturates: GRADSYNC_STALL_WARN=inf never warns
  }
  /// Calls this rank has entered (the last call's seq + 1; 0: none yet).
  std::uint64_t entered() const { return entered_; }

  /// True when a warning is due at `now` (the call has waited past the threshold and
  /// no warning was given within the last threshold); then the next is a threshold later.
  bool due(clock::time_point now) {
    if (entered_ == 0 || now < next_) return false;
    next_ = detail::time_after(now, warn_);
    return true;
  }
  /// The threshold.
  seconds_d threshold() const { return warn_; }

  /// Logs the warning from `positions` (every peer of the group), naming those that have
  /// not entered this call. `me`: this rank as messages name it.
  GRADSYNC_DECL void warn(std::size_t log_rank, const std::string& me,
                          const std::vector<peer_position>& positions) const;

 private:
  GRADSYNC_DECL std::string describe() const;

  seconds_d warn_;
  std::uint64_t seq_ = 0, entered_ = 0;
  call_note note_{};
  clock::time_point start_{}, next_{};
};

}  // namespace gradsync

#if GRADSYNC_HEADER_ONLY
#include "gradsync/core/stall.ipp"
#endif
