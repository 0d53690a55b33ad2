// SPDX-License-Identifier: Apache-2.0
// Deadlines: every wait in gradsync has one. The default is 300 s, overridden by the
// GRADSYNC_TIMEOUT environment variable (seconds) or per call. A timeout longer than the
// clock can count (`inf`, `1e30`: past ~292 years) means no deadline; NaN is refused.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>
#include <string_view>

#include "gradsync/core/error.hpp"

namespace gradsync {

using clock = std::chrono::steady_clock;
using seconds_d = std::chrono::duration<double>;

namespace detail {
/// Seconds from environment variable `name`, or `fallback` when it is unset or empty; a
/// value that is not a number, or not > 0 (>= 0 with `allow_zero`), is an
/// invalid_argument error naming the variable.
inline seconds_d env_seconds(const char* name, seconds_d fallback, bool allow_zero = false) {
  const char* s = std::getenv(name);
  if (!s || !*s) return fallback;
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  if (end != s && *end == '\0' && (v > 0 || (allow_zero && v == 0))) return seconds_d{v};
  throw error(errc::invalid_argument, {},
              std::string(name) + " must be a " +
                  (allow_zero ? "number of seconds >= 0" : "positive number of seconds") +
                  ", got '" + s + "'");
}
}  // namespace detail

/// Reads GRADSYNC_TIMEOUT (seconds, > 0); falls back to 300 s.
inline seconds_d read_timeout_env() {
  return detail::env_seconds("GRADSYNC_TIMEOUT", seconds_d{300.0});
}

/// GRADSYNC_TIMEOUT, read once per process: getenv costs ~100 ns, which is a third of an
/// 8-byte allreduce over shm (a bad value still throws on every call).
inline seconds_d default_timeout() {
  static const seconds_d cached = read_timeout_env();
  return cached;
}

namespace detail {
/// Reads an on/off variable: "1" on, "0" or unset off; anything else is an
/// invalid_argument error naming the variable.
inline bool read_flag_env(const char* name) {
  const char* s = std::getenv(name);
  if (!s || !*s || std::string_view(s) == "0") return false;
  if (std::string_view(s) == "1") return true;
  throw error(errc::invalid_argument, {}, std::string(name) + " must be 0 or 1, got '" + s + "'");
}
}  // namespace detail

/// GRADSYNC_VERIFY, read once per process (call_options' default for `verify`).
inline bool default_verify() {
  static const bool cached = detail::read_flag_env("GRADSYNC_VERIFY");
  return cached;
}

/// GRADSYNC_CHECK_FINITE, read once per process (call_options' default for
/// `check_finite`).
inline bool default_check_finite() {
  static const bool cached = detail::read_flag_env("GRADSYNC_CHECK_FINITE");
  return cached;
}

/// How long one collective may run before it counts as a stall (the metrics' stall
/// count): GRADSYNC_STALL_WARN seconds (> 0) when set, else a tenth of `deadline`, at
/// least 5 s. Read when an allreducer is made.
inline seconds_d stall_threshold(seconds_d deadline) {
  return detail::env_seconds("GRADSYNC_STALL_WARN", std::max(deadline / 10, seconds_d{5}));
}

namespace detail {
/// `from + d` on the steady clock, saturated: a `d` past what the clock can count
/// (GRADSYNC_TIMEOUT=inf, 1e30) gives time_point::max(), never reached, where a
/// duration_cast would overflow (undefined; on x86 a deadline in the past). NaN gives
/// max() too, but the callers refuse it first, naming where it came from.
inline clock::time_point time_after(clock::time_point from, seconds_d d) {
  // One second of margin covers the rounding of the room to a double.
  if (!(d < seconds_d(clock::time_point::max() - from) - seconds_d{1}))
    return clock::time_point::max();
  if (d <= -seconds_d(from.time_since_epoch())) return clock::time_point{};
  return from + std::chrono::duration_cast<clock::duration>(d);
}
}  // namespace detail

/// A point in time after which a wait gives up with errc::timeout.
struct deadline {
  clock::time_point at;

  /// `d` from now; `d` past ~292 years means never (time_point::max()). NaN is an
  /// invalid_argument error.
  static deadline after(seconds_d d) {
    if (std::isnan(d.count()))
      throw error(errc::invalid_argument, {}, "a timeout of NaN seconds (give a number, or inf)");
    return {detail::time_after(clock::now(), d)};
  }
  bool expired() const { return clock::now() >= at; }
  double seconds_left() const { return seconds_d(at - clock::now()).count(); }
};

}  // namespace gradsync
