// SPDX-License-Identifier: Apache-2.0
// The threads that complete a process group's futures. Completing a c10 future runs its
// callbacks on the completing thread, and a callback may issue a collective and wait for
// it (torch's PowerSGD hook calls .wait() inside .then()). So futures are never completed
// on the worker that runs the collectives (it would wait for itself), and this pool grows
// a thread whenever every thread it has is busy: a callback that blocks never holds up
// the completion it waits for. Threads stay until the pool is destroyed; in practice a
// pool has one or two.
#pragma once

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
  completion_pool() = default;
  completion_pool(const completion_pool&) = delete;
  completion_pool& operator=(const completion_pool&) = delete;
  ~completion_pool() { stop(); }

  /// Runs f on a pool thread, after the tasks posted before it have started.
  void post(std::function<void()> f) {
    std::unique_lock lk(st_->mu);
    st_->tasks.push_back(std::move(f));
    if (st_->idle < st_->tasks.size() && !st_->stopping) {
      threads_.emplace_back([st = st_] { loop(*st); });
    } else {
      st_->cv.notify_one();
    }
  }

  /// Runs what was posted, then joins the threads. A pool thread that calls it (the last
  /// reference to the process group dropped in a callback) cannot join itself: it is
  /// detached, and the state it shares stays alive with it.
  void stop() {
    std::vector<std::thread> threads;
    {
      std::lock_guard lk(st_->mu);
      st_->stopping = true;
      threads.swap(threads_);
    }
    st_->cv.notify_all();
    for (auto& t : threads) {
      if (t.get_id() == std::this_thread::get_id()) {
        t.detach();
      } else if (t.joinable()) {
        t.join();
      }
    }
  }

 private:
  struct state {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::function<void()>> tasks;
    std::size_t idle = 0;
    bool stopping = false;
  };

  static void loop(state& st) {
    std::unique_lock lk(st.mu);
    for (;;) {
      ++st.idle;
      st.cv.wait(lk, [&st] { return st.stopping || !st.tasks.empty(); });
      --st.idle;
      if (st.tasks.empty()) return;  // stopping, and nothing left
      std::function<void()> f = std::move(st.tasks.front());
      st.tasks.pop_front();
      lk.unlock();
      f();  // never under the lock: f completes a future, whose callbacks may post again
      f = nullptr;
      lk.lock();
    }
  }

  std::shared_ptr<state> st_ = std::make_shared<state>();  // shared with every thread
  std::vector<std::thread> threads_;                       // under st_->mu
};

}  // namespace gradsync_torch
