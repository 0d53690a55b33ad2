// SPDX-License-Identifier: Apache-2.0
// A helper thread that runs a collective's pieces, in the order they are handed over,
// while the calling thread prepares the next pieces and finishes the done ones:
// algo::hierarchical's cross-node allreduce of each shard (algo/detail/level_pipeline.hpp)
// and a codec's allreduce of each piece of codes (compress/pieces.hpp). Only this thread
// calls the transport while it runs, so MPI needs MPI_THREAD_SERIALIZED, not MULTIPLE.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace gradsync::detail {

class piece_worker {
 public:
  /// `job(i)` runs piece i's collective; it is called for 0, 1, ... in order, each once
  /// handed over with ready(i). `idle()` runs every 20 ms while the helper waits for a
  /// piece (hierarchical's serves the stall inspector's queries).
  explicit piece_worker(std::function<void(std::size_t)> job, std::function<void()> idle = {})
      : job_(std::move(job)), idle_(std::move(idle)) {
    th_ = std::thread([this] { loop(); });
  }
  piece_worker(const piece_worker&) = delete;
  piece_worker& operator=(const piece_worker&) = delete;
  /// Stops taking pieces and joins (a piece under way finishes or fails by its deadline).
  ~piece_worker() {
    {
      std::lock_guard<std::mutex> g(m_);
      stop_ = true;
    }
    cv_.notify_all();
    th_.join();
  }

  /// Pieces 0..i may run now.
  void ready(std::size_t i) {
    {
      std::lock_guard<std::mutex> g(m_);
      handed_ = i + 1;
    }
    cv_.notify_all();
  }
  /// Blocks until piece i has run; rethrows the error of any piece that failed.
  void wait(std::size_t i) {
    std::unique_lock<std::mutex> g(m_);
    cv_.wait(g, [&] { return done_ > i || failure_; });
    if (failure_) std::rethrow_exception(failure_);
  }

 private:
  void loop() {
    for (std::size_t i = 0;; ++i) {
      {
        std::unique_lock<std::mutex> g(m_);
        while (
            !cv_.wait_for(g, std::chrono::milliseconds(20), [&] { return handed_ > i || stop_; })) {
          if (!idle_) continue;
          g.unlock();
          try {
            idle_();
          } catch (...) {  // serving is best effort; the next piece reports real failures
          }
          g.lock();
        }
        if (stop_) return;  // the caller gave up: run nothing more
      }
      try {
        job_(i);
      } catch (...) {
        std::lock_guard<std::mutex> g(m_);
        failure_ = std::current_exception();
        cv_.notify_all();
        return;
      }
      {
        std::lock_guard<std::mutex> g(m_);
        done_ = i + 1;
      }
      cv_.notify_all();
    }
  }

  std::function<void(std::size_t)> job_;
  std::function<void()> idle_;
  std::mutex m_;
  std::condition_variable cv_;
  std::size_t handed_ = 0, done_ = 0;
  bool stop_ = false;
  std::exception_ptr failure_;
  std::thread th_;  // last: starts once everything above exists
};

}  // namespace gradsync::detail
