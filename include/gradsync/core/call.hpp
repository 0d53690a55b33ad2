// SPDX-License-Identifier: Apache-2.0
// Everything about one collective call that every layer sees: the user's per-call options,
// what an algorithm's run() receives with the data, and the tags its messages carry.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

#include "gradsync/core/deadline.hpp"

namespace gradsync {

class flight_recorder;  // core/flight_recorder.hpp

/// Per-call options shared by every allreduce entry point.
struct call_options {
  seconds_d timeout{-1.0};  ///< how long any wait may take; < 0 means default_timeout()
  bool check = true;        ///< agree on (seq, count, type, op, algorithm) before data moves
  /// After the call, ranks compare a hash of their results; errc::diverged on every rank
  /// if any differs (check/verify.hpp). Host memory only. Default: GRADSYNC_VERIFY, else off.
  bool verify = default_verify();
  /// Before data moves, every rank looks for NaN and Inf in its input and the ranks share
  /// what they found: errc::non_finite on every rank, naming the first rank with one, the
  /// tensor and the index, instead of a result every replica trains on (check/finite.hpp).
  /// Host memory, floating types. Default: GRADSYNC_CHECK_FINITE, else off.
  bool check_finite = default_check_finite();
  /// Names the call in stall warnings (core/stall.hpp), e.g. an allreducer's bucket; the
  /// text must outlive the call.
  std::string_view label = {};
  /// Records the call (core/flight_recorder.hpp) and writes the record out when it fails;
  /// an allreducer sets its own. nullptr: not recorded.
  flight_recorder* recorder = nullptr;

  /// `timeout`, or default_timeout() when it is < 0; NaN is an invalid_argument error
  /// naming the option (inf, or any value past ~292 years, means no deadline).
  seconds_d resolved_timeout() const {
    if (std::isnan(timeout.count()))
      throw error(errc::invalid_argument, {},
                  "call_options::timeout must be a number of seconds (inf: no deadline; < 0: "
                  "GRADSYNC_TIMEOUT's default), got NaN");
    return timeout.count() < 0 ? default_timeout() : timeout;
  }
  /// The deadline of a call starting now.
  deadline make_deadline() const { return deadline::after(resolved_timeout()); }
};

/// Everything an algorithm's run() gets besides the data.
struct call_context {
  deadline until;     ///< every wait gives up at this point
  std::uint64_t seq;  ///< the call's sequence number (same on every rank)
  std::uint32_t tag;  ///< tag for this call's messages (data_tag(seq))
  /// The algorithm checks the input for NaN and Inf itself, in its own first pass
  /// (set only for algorithms that declare checks_finite, e.g. algo::direct_two_shot).
  bool check_finite = false;
};

/// The tag an algorithm's messages carry in call `seq` (15 bits: MPI guarantees 32767).
inline constexpr std::uint32_t data_tag(std::uint64_t seq) {
  return static_cast<std::uint32_t>(seq & 0x3fff);
}
/// The tag of the consistency exchange of call `seq`; never equal to a data tag.
inline constexpr std::uint32_t consistency_tag(std::uint64_t seq) {
  return 0x4000u | static_cast<std::uint32_t>(seq & 0x3fff);
}

}  // namespace gradsync
