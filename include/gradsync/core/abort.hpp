// SPDX-License-Identifier: Apache-2.0
// A transport's abort switch. `t.abort()` raises it from any thread, or from a signal
// handler (raising is one store to a lock-free atomic, async-signal-safe), and every wait
// of that transport — the one in flight and every later one — checks it where it checks
// its deadline, so it fails within a few milliseconds with errc::aborted instead of
// waiting out the deadline. For a user's watchdog, a SIGTERM handler, or a framework
// that has decided the job is over. Peers learn it as they would learn of a failed rank
// (shm marks the rank failed; over MPI they time out or the job is ended).
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>

#include "gradsync/core/error.hpp"

namespace gradsync {

class abort_switch {
  static_assert(std::atomic<bool>::is_always_lock_free,
                "gradsync::abort_switch needs a lock-free atomic<bool> (signal safety)");

 public:
  abort_switch() : flag_(std::make_unique<std::atomic<bool>>(false)) {}
  /// An empty switch, never raised (the shell a transport is moved into before a swap).
  explicit abort_switch(std::nullptr_t) noexcept {}

  /// Raises the switch; async-signal-safe.
  void raise() noexcept {
    if (flag_) flag_->store(true, std::memory_order_relaxed);
  }
  /// Whether abort() was called.
  bool raised() const noexcept { return flag_ && flag_->load(std::memory_order_relaxed); }

  /// Throws errc::aborted at `site` when raised; `waiting` says what the rank was doing
  /// ("while this rank waited to receive from the peer").
  void throw_if_raised(const error_site& site, const std::string& waiting) const {
    if (raised()) throw_aborted(site, waiting);
  }
  [[noreturn]] static void throw_aborted(const error_site& site, const std::string& waiting) {
    throw error(errc::aborted, site,
                "the transport was aborted (abort() was called on this rank) " + waiting);
  }

 private:
  // Behind a pointer: transports move, and a signal handler keeps the switch's address.
  std::unique_ptr<std::atomic<bool>> flag_;
};

}  // namespace gradsync
