// SPDX-License-Identifier: Apache-2.0
// Deadlines: every wait in gradsync has one. The default is 300 s, overridden by the
// GRADSYNC_TIMEOUT environment variable (seconds) or per call.
#pragma once

#include <algorithm>
#include <chrono>
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

/// A point in time after which a wait gives up with errc::timeout.
struct deadline {
  clock::time_point at;

  static deadline after(seconds_d d) {
    return {clock::now() + std::chrono::duration_cast<clock::duration>(d)};
  }
  bool expired() const { return clock::now() >= at; }
  double seconds_left() const { return seconds_d(at - clock::now()).count(); }
};

}  // namespace gradsync
