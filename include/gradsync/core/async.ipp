// SPDX-License-Identifier: Apache-2.0
// The functions async.hpp declares: inline in a header-only build, compiled once by
// <gradsync/src.hpp> under GRADSYNC_SEPARATE_COMPILATION (config.hpp).
#pragma once

#if defined(__linux__)
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#endif

#include "gradsync/core/async.hpp"

namespace gradsync::detail {

GRADSYNC_DECL void lower_this_thread_priority(int steps) {
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

GRADSYNC_DECL int progress_nice_from_env(int fallback) {
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

}  // namespace gradsync::detail

namespace gradsync {

GRADSYNC_DECL void progress_thread::post(job j) {
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

GRADSYNC_DECL void progress_thread::stop() {
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

GRADSYNC_DECL void progress_thread::loop() {
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

}  // namespace gradsync
