// SPDX-License-Identifier: Apache-2.0
// What an allreducer has done, kept for its callers: the last call's statistics and the
// running totals, failed buckets by error code, the error that made it unusable, and the
// Prometheus file written from them (observe/metrics.hpp). Buckets finish on the progress
// thread while the caller reads, so everything here is under one mutex.
#pragma once

#include <array>
#include <cstddef>
#include <exception>
#include <mutex>
#include <string>
#include <utility>

#include "gradsync/core/error.hpp"
#include "gradsync/core/log.hpp"
#include "gradsync/observe/metrics.hpp"
#include "gradsync/observe/stats.hpp"

namespace gradsync::detail {

class call_ledger {
 public:
  /// `labels`: the composition's, on every metrics sample (transport="mpi",...).
  call_ledger(std::size_t rank, std::size_t ranks, const std::string& metrics_dir,
              const std::string& metrics_job, const std::string& metrics_job_id,
              const std::string& labels)
      : rank_(rank),
        ranks_(ranks),
        metrics_(metrics_dir, metrics_job, rank, labels, observe::metrics_file::env_interval(),
                 metrics_job_id) {}
  call_ledger(const call_ledger&) = delete;
  call_ledger& operator=(const call_ledger&) = delete;

  /// The last completed call's statistics and the totals, read together.
  std::pair<observe::call_stats, observe::cumulative_stats> snapshot() const {
    std::lock_guard lk(m_);
    return {last_, total_};
  }

  /// Rethrows the error that broke the allreducer, if one did.
  void throw_if_broken() const {
    std::lock_guard lk(m_);
    if (broken_) std::rethrow_exception(broken_);
  }

  /// A finished call: its statistics become the last call's (moved, per-bucket vector
  /// and all) and join the totals.
  void fold(observe::call_stats&& s) {
    std::lock_guard lk(m_);
    total_.add(s);
    window_bytes_ += s.bytes_in;
    window_seconds_ += s.seconds;
    last_ = std::move(s);
    publish_locked(false);
  }

  /// Bucket `bucket` failed with `e`: counted by its code and logged. Errors that leave
  /// the transport out of step (timeout, peer_lost, transport, anything not a
  /// gradsync::error) break the allreducer: every later call rethrows the first of them.
  void note_failure(const std::exception_ptr& e, std::size_t bucket) {
    bool breaks = true;
    std::string what = "unknown exception";
    std::size_t code = 0;  // errors_ index: the errc, 0 for other exceptions
    try {
      std::rethrow_exception(e);
    } catch (const error& x) {
      code = static_cast<std::size_t>(x.code());
      // Refused arguments, non-finite inputs and diverged results leave the transport in
      // step: every rank found them together.
      breaks = x.code() != errc::mismatch && x.code() != errc::invalid_argument &&
               x.code() != errc::diverged && x.code() != errc::non_finite;
      what = x.what();
    } catch (const std::exception& x) {
      what = x.what();
    } catch (...) {
    }
    log(log_level::warn, rank_, "bucket %zu failed%s: %s", bucket,
        breaks ? " (the allreducer is unusable from now on)" : "", what.c_str());
    std::lock_guard lk(m_);
    ++errors_[code < errors_.size() ? code : 0];
    if (breaks && !broken_) broken_ = e;
    publish_locked(true);  // a failure is worth a write now
  }

  /// Writes the metrics file now (the allreducer's destructor: the last values).
  void publish() {
    std::lock_guard lk(m_);
    publish_locked(true);
  }

 private:
  // The Prometheus file from the running totals, when due (or `now`); under m_.
  void publish_locked(bool now) {
    if (!metrics_.enabled() || (!now && !metrics_.due())) return;
    const bool ok = observe::write_allreducer_metrics(metrics_, total_, errors_, ranks_,
                                                      window_bytes_, window_seconds_);
    window_bytes_ = 0;
    window_seconds_ = 0;
    if (!ok && !metrics_warned_) {
      metrics_warned_ = true;
      log(log_level::warn, rank_, "cannot write metrics file %s", metrics_.path().c_str());
    }
  }

  std::size_t rank_, ranks_;
  mutable std::mutex m_;  // guards everything below
  observe::metrics_file metrics_;
  observe::call_stats last_;
  observe::cumulative_stats total_;
  std::array<std::size_t, errc_slots> errors_{};  // failed buckets by errc (0: other exceptions)
  std::size_t window_bytes_ = 0;                  // since the last metrics write
  double window_seconds_ = 0;
  bool metrics_warned_ = false;
  std::exception_ptr broken_;
};

}  // namespace gradsync::detail
