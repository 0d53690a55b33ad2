// SPDX-License-Identifier: Apache-2.0
// The threads that complete a process group's futures. Completing a c10 future runs its
// callbacks on the completing thread, and a callback may issue a collective and wait for
// it (torch's PowerSGD hook calls .wait() inside .then()). So futures are never completed
// on the worker that runs the collectives (it would wait for itself), and this pool starts
// another thread whenever a task is queued and no thread is idle: a callback that blocks
// never holds up the completion it waits for. One thread stays; the others end after
// `linger` without work, so a burst of completions leaves no crowd of threads behind.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace gradsync_torch {

class completion_pool {
 public:
  /// At most `max_threads` threads (callbacks nested deeper than that would wait).
  explicit completion_pool(std::size_t max_threads = 64,
                           std::chrono::milliseconds linger = std::chrono::seconds(1))
      : max_threads_(max_threads), linger_(linger) {}
  completion_pool(const completion_pool&) = delete;
  completion_pool& operator=(const completion_pool&) = delete;
  ~completion_pool() { stop(); }

  /// Runs f on a pool thread, after the tasks posted before it have started.
  void post(std::function<void()> f) {
    std::unique_lock lk(st_->mu);
    st_->tasks.push_back(std::move(f));
    if (st_->idle < st_->tasks.size() && st_->live < max_threads_ && !st_->stopping) {
      ++st_->live;
      // Detached: a thread that ends by itself (linger) cannot be joined by anyone.
      std::thread([st = st_, linger = linger_] { loop(*st, linger); }).detach();
    } else {
      st_->work.notify_one();
    }
  }

  /// Runs what was posted, then waits until every thread has ended. Called from a pool
  /// thread (the last reference to the process group dropped in a callback), it waits for
  /// the others; that thread ends when its task returns, and the state it shares outlives
  /// the pool.
  void stop() {
    std::unique_lock lk(st_->mu);
    st_->stopping = true;
    st_->work.notify_all();
    const auto me = std::this_thread::get_id();
    const std::size_t self =
        static_cast<std::size_t>(std::count(st_->threads.begin(), st_->threads.end(), me));
    st_->ended.wait(lk, [&] { return st_->live <= self; });
  }

 private:
  struct state {
    std::mutex mu;
    std::condition_variable work, ended;
    std::deque<std::function<void()>> tasks;
    std::vector<std::thread::id> threads;  // the live threads
    std::size_t idle = 0, live = 0;
    bool stopping = false;
  };

  static void loop(state& st, std::chrono::milliseconds linger) {
    std::unique_lock lk(st.mu);
    st.threads.push_back(std::this_thread::get_id());
    for (;;) {
      ++st.idle;
      const bool woken =
          st.work.wait_for(lk, linger, [&st] { return st.stopping || !st.tasks.empty(); });
      --st.idle;
      if (st.tasks.empty()) {
        if (st.stopping || (!woken && st.live > 1)) break;
        continue;
      }
      std::function<void()> f = std::move(st.tasks.front());
      st.tasks.pop_front();
      lk.unlock();
      f();  // never under the lock: f completes a future, whose callbacks may post again
      f = nullptr;
      lk.lock();
    }
    st.threads.erase(std::find(st.threads.begin(), st.threads.end(), std::this_thread::get_id()));
    --st.live;
    st.ended.notify_all();
  }

  std::shared_ptr<state> st_ = std::make_shared<state>();  // shared with every thread
  std::size_t max_threads_;
  std::chrono::milliseconds linger_;
};

}  // namespace gradsync_torch
