// SPDX-License-Identifier: Apache-2.0
// Asynchronous operation: `pending` (the handle allreduce_async returns) and
// `progress_thread` (the background thread an allreducer owns; it runs queued jobs in
// order, so every rank issues its collectives in the same order as it queued them).
#pragma once

#if defined(__linux__)
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#endif

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

#include "gradsync/core/error.hpp"

namespace gradsync {

namespace detail {

/// Raises the calling thread's nice value by `steps` (at most to 19), so that it yields
/// its core to the process's other threads when they wake up. Linux keeps a nice value
/// per thread; elsewhere, or when the system refuses, nothing changes.
inline void lower_this_thread_priority(int steps) {
#if defined(__linux__)
  if (steps <= 0) return;
  const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
  errno = 0;
  const int now = ::getpriority(PRIO_PROCESS, tid);
  if (now == -1 && errno != 0) return;
  (void)::setpriority(PRIO_PROCESS, tid, std::min(now + steps, 19));
#else
  (void)steps;
#endif
}

/// GRADSYNC_PROGRESS_NICE (an integer 0..19) if set, else `fallback`: the nice steps an
/// allreducer's progress thread lowers its priority by (allreducer_options::progress_nice).
inline int progress_nice_from_env(int fallback) {
  const char* s = std::getenv("GRADSYNC_PROGRESS_NICE");
  if (!s || !*s) return fallback;
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < 0 || v > 19) {
    throw error(
        errc::invalid_argument, {},
        std::string("GRADSYNC_PROGRESS_NICE must be an integer from 0 to 19, got '") + s + "'");
  }
  return static_cast<int>(v);
}

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

  void post(job j) {
    if (!enabled_) {
      const auto now = std::chrono::steady_clock::now();
      j.run({now, now});
      return;
    }
    {
      std::lock_guard lk(m_);
      if (!started_) {
        started_ = true;
        idle_since_ = std::chrono::steady_clock::now();
        th_ = std::thread([this] { loop(); });
      }
      q_.push_back(std::move(j));
    }
    cv_.notify_all();
  }

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
  void stop() {
    std::deque<job> dropped;
    {
      std::lock_guard lk(m_);
      stop_ = true;
      dropped.swap(q_);
    }
    cv_.notify_all();
    auto e = std::make_exception_ptr(gradsync::error(
        errc::invalid_argument, {}, "the allreducer was destroyed before this operation started"));
    for (auto& j : dropped) {
      if (j.cancel) j.cancel(e);
    }
    if (th_.joinable()) th_.join();
  }

 private:
  void loop() {
    detail::lower_this_thread_priority(nice_);
    std::unique_lock lk(m_);
    for (;;) {
      cv_.wait(lk, [&] { return stop_ || !q_.empty(); });
      if (q_.empty()) return;  // stop_ and nothing left
      job j = std::move(q_.front());
      q_.pop_front();
      busy_ = true;
      const job_times times{idle_since_, std::chrono::steady_clock::now()};
      lk.unlock();
      j.run(times);  // jobs catch their own exceptions
      j = {};
      lk.lock();
      busy_ = false;
      idle_since_ = std::chrono::steady_clock::now();
      if (q_.empty()) idle_cv_.notify_all();
    }
  }

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
