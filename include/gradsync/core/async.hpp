// SPDX-License-Identifier: Apache-2.0
// Asynchronous operation: `pending` (the handle allreduce_async returns) and
// `progress_thread` (the background thread an allreducer owns; it runs queued jobs in
// order, so every rank issues its collectives in the same order as it queued them).
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "gradsync/config.hpp"
#include "gradsync/core/error.hpp"

namespace gradsync {

namespace detail {

/// Raises the calling thread's nice value by `steps` (at most to 19), so that it yields
/// its core to the process's other threads when they wake up. Linux keeps a nice value
/// per thread; elsewhere, or when the system refuses, nothing changes.
GRADSYNC_DECL void lower_this_thread_priority(int steps);

/// GRADSYNC_PROGRESS_NICE (an integer 0..19) if set, else `fallback`: the nice steps an
/// allreducer's progress thread lowers its priority by (allreducer_options::progress_nice).
GRADSYNC_DECL int progress_nice_from_env(int fallback);

/// Shared state of one asynchronous operation made of `remaining` jobs.
class completion {
 public:
  explicit completion(std::size_t jobs = 0) : remaining_(jobs) {}

  void add_jobs(std::size_t k) {
    std::lock_guard lk(m_);
    remaining_ += k;
  }
  /// One job finished; `e` is its failure, if any (the first one is kept).
  void finish_one(const std::exception_ptr& e = nullptr) {
    std::lock_guard lk(m_);
    if (e && !err_) err_ = e;
    if (remaining_ > 0 && --remaining_ == 0) cv_.notify_all();
  }
  bool done() const {
    std::lock_guard lk(m_);
    return remaining_ == 0;
  }
  std::exception_ptr error() const {
    std::lock_guard lk(m_);
    return err_;
  }
  bool failed() const {
    std::lock_guard lk(m_);
    return err_ != nullptr;
  }
  /// Blocks until every job finished; returns the first failure.
  std::exception_ptr wait() const {
    std::unique_lock lk(m_);
    cv_.wait(lk, [&] { return remaining_ == 0; });
    return err_;
  }
  /// Records that the owner of a handle waited for the operation (see allreducer::wait).
  void mark_waited() {
    std::lock_guard lk(m_);
    waited_ = true;
  }
  bool waited() const {
    std::lock_guard lk(m_);
    return waited_;
  }

 private:
  mutable std::mutex m_;
  mutable std::condition_variable cv_;
  std::size_t remaining_;
  std::exception_ptr err_;
  bool waited_ = false;
};

}  // namespace detail

/// Handle of an asynchronous allreduce. wait() blocks until it is complete and rethrows
/// the error raised on the background thread, if any; test() polls. The buffers passed
/// to the call must stay alive and untouched until the handle is complete. A handle may
/// outlive its allreducer: work the allreducer could not start is failed, not lost.
class pending {
 public:
  pending() = default;
  explicit pending(std::shared_ptr<detail::completion> c) : c_(std::move(c)) {}

  /// True when the handle refers to an operation.
  bool valid() const { return c_ != nullptr; }
  /// True when every part of the operation has finished (successfully or not).
  bool test() const { return !c_ || c_->done(); }
  /// Blocks until complete; rethrows the operation's error (gradsync::error).
  void wait() const {
    if (!c_) return;
    auto e = c_->wait();
    c_->mark_waited();
    if (e) std::rethrow_exception(e);
  }
  /// The operation's error once it has failed (nullptr while running or on success).
  std::exception_ptr error() const { return c_ ? c_->error() : nullptr; }

 private:
  std::shared_ptr<detail::completion> c_;
};

/// When the progress thread picked a job, and since when it had been idle.
struct job_times {
  std::chrono::steady_clock::time_point idle_since;  ///< == picked when it was busy
  std::chrono::steady_clock::time_point picked;
};

/// The background thread of an allreducer. Jobs run one at a time in the order they
/// were posted. When the thread is not enabled, post() runs the job on the caller.
class progress_thread {
 public:
  /// run(times) does the work; cancel(e) fails the job without running it.
  struct job {
    std::function<void(const job_times&)> run;
    std::function<void(std::exception_ptr)> cancel;
  };

  /// `enabled`: false runs every job on the caller. `nice`: how many steps the thread
  /// lowers its own priority by (detail::lower_this_thread_priority; 0 keeps it).
  explicit progress_thread(bool enabled, int nice = 0) : enabled_(enabled), nice_(nice) {}
  progress_thread(const progress_thread&) = delete;
  progress_thread& operator=(const progress_thread&) = delete;
  ~progress_thread() { stop(); }

  bool enabled() const { return enabled_; }
  /// True when called from the progress thread itself.
  bool on_this_thread() const { return th_.get_id() == std::this_thread::get_id(); }

  GRADSYNC_DECL void post(job j);

  /// Blocks until every posted job has finished.
  void drain() {
    std::unique_lock lk(m_);
    idle_cv_.wait(lk, [&] { return q_.empty() && !busy_; });
  }
  bool idle() const {
    std::lock_guard lk(m_);
    return q_.empty() && !busy_;
  }

  /// Fails the jobs that have not started, lets the running one finish (every transport
  /// wait has a deadline, so it does) and joins the thread.
  GRADSYNC_DECL void stop();

 private:
  GRADSYNC_DECL void loop();

  bool enabled_;
  int nice_;
  mutable std::mutex m_;
  std::condition_variable cv_, idle_cv_;
  std::deque<job> q_;
  bool started_ = false, stop_ = false, busy_ = false;
  std::chrono::steady_clock::time_point idle_since_{};
  std::thread th_;
};

}  // namespace gradsync

#if GRADSYNC_HEADER_ONLY
#include "gradsync/core/async.ipp"
#endif
