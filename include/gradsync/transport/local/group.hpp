// SPDX-License-Identifier: Apache-2.0
// Shared state of an in-process group: one mailbox per rank where posted sends and
// receives meet. Whichever side posts second copies the bytes (one memcpy, no staging).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gradsync/core/abort.hpp"
#include "gradsync/core/error.hpp"

namespace gradsync::transport::detail {

/// One posted point-to-point message (a send or a receive waiting for its partner).
struct local_msg {
  std::size_t src = 0, dst = 0;
  std::uint32_t tag = 0;
  const void* sbuf = nullptr;
  void* rbuf = nullptr;
  std::size_t bytes = 0;
  bool is_send = false;
  std::atomic<bool> done{false};
  std::atomic<bool> size_mismatch{false};
  std::size_t other_bytes = 0;  // the partner's size when they differ
};

class local_group {
 public:
  explicit local_group(std::size_t n) : ranks_(n), entered_(n) {
    if (n == 0) throw error(errc::invalid_argument, {}, "a local group needs at least one rank");
  }

  /// The stall inspector's board (core/stall.hpp): how many calls each rank has entered.
  void publish_entered(std::size_t rank, std::uint64_t entered) {
    entered_[rank].store(entered, std::memory_order_relaxed);
  }
  std::uint64_t entered(std::size_t rank) const {
    return entered_[rank].load(std::memory_order_relaxed);
  }

  std::size_t size() const { return ranks_.size(); }

  /// A group split from another (local::split): each member's rank in the group that
  /// was split first, for error messages. Set before any member uses the group.
  void set_origin(std::vector<std::size_t> ranks) { origin_ = std::move(ranks); }
  /// Rank q as the first group numbered it (q itself in a group that was not split).
  std::size_t origin_rank(std::size_t q) const { return q < origin_.size() ? origin_[q] : q; }
  bool is_split() const { return !origin_.empty(); }

  /// Posts a send from `src` to `dst`; matches a waiting receive if there is one.
  std::shared_ptr<local_msg> post(std::shared_ptr<local_msg> m) {
    auto& box = ranks_[m->dst];  // both sends and receives meet in the receiver's box
    std::shared_ptr<local_msg> partner;
    {
      std::lock_guard lk(box.m);
      auto& other = m->is_send ? box.recvs : box.sends;
      for (auto it = other.begin(); it != other.end(); ++it) {
        if ((*it)->src == m->src && (*it)->tag == m->tag) {
          partner = *it;
          other.erase(it);
          break;
        }
      }
      if (!partner) (m->is_send ? box.sends : box.recvs).push_back(m);
    }
    if (partner) complete(m->is_send ? *m : *partner, m->is_send ? *partner : *m);
    return m;
  }

  /// Removes a still-unmatched message (on error paths); if it was already matched,
  /// waits for the partner's copy to finish so no buffer is touched afterwards.
  void cancel(const std::shared_ptr<local_msg>& m) {
    if (m->done.load(std::memory_order_acquire)) return;
    auto& box = ranks_[m->dst];
    {
      std::lock_guard lk(box.m);
      auto& q = m->is_send ? box.sends : box.recvs;
      for (auto it = q.begin(); it != q.end(); ++it) {
        if (it->get() == m.get()) {
          q.erase(it);
          return;
        }
      }
    }
    while (!m->done.load(std::memory_order_acquire)) std::this_thread::yield();
  }

  /// Blocks rank `me` until `m` is done, its peer has left, the deadline passes or `stop`
  /// is raised. Returns 0 when done, 1 when the peer left, 2 on timeout, 3 when stopped.
  /// `idle(now)` runs between the slices of a blocked wait (the stall inspector).
  /// Spins 64 rounds, then yields for up to `yield_for` of wall time, then blocks on the
  /// rank's condition variable. The yield phase is bounded by time, not by a count: when
  /// another process holds the core, each yield can give it a whole time slice (several
  /// ms, longer for a thread at a raised nice value such as the allreducer's progress
  /// thread), and 2000 counted yields once took 11 s past a 0.3 s deadline.
  template <class Idle>
  int wait(std::size_t me, const local_msg& m, std::size_t peer,
           std::chrono::steady_clock::time_point until, const abort_switch& stop, Idle&& idle) {
    // The condition variable is waited on in slices: abort() may come from a signal
    // handler, which cannot notify it.
    constexpr auto slice = std::chrono::milliseconds(10);
    constexpr auto yield_for = std::chrono::milliseconds(1);
    for (int spin = 0; spin < 64; ++spin) {
      if (m.done.load(std::memory_order_acquire)) return 0;
    }
    const auto yield_until = std::min(until, std::chrono::steady_clock::now() + yield_for);
    while (!m.done.load(std::memory_order_acquire)) {
      if (std::chrono::steady_clock::now() >= yield_until) break;
      if (stop.raised()) return 3;
      std::this_thread::yield();
    }
    auto& r = ranks_[me];
    std::unique_lock lk(r.m);
    for (;;) {
      if (m.done.load(std::memory_order_acquire)) return 0;
      if (ranks_[peer].left.load(std::memory_order_acquire)) return 1;
      if (stop.raised()) return 3;
      const auto now = std::chrono::steady_clock::now();
      if (now >= until) return m.done.load(std::memory_order_acquire) ? 0 : 2;
      lk.unlock();
      idle(now);
      lk.lock();
      if (m.done.load(std::memory_order_acquire)) return 0;
      r.cv.wait_until(lk, std::min(until, now + slice));
    }
  }

  /// Marks a rank as gone (its function returned or threw) and wakes everyone.
  void leave(std::size_t rank) {
    ranks_[rank].left.store(true, std::memory_order_release);
    for (auto& r : ranks_) {
      std::lock_guard lk(r.m);
      r.cv.notify_all();
    }
  }

  bool has_left(std::size_t rank) const {
    return ranks_[rank].left.load(std::memory_order_acquire);
  }

 private:
  struct rank_state {
    std::mutex m;  // guards the queues, and is the mutex `cv` waits with
    std::condition_variable cv;
    std::deque<std::shared_ptr<local_msg>> sends;  // unmatched sends to this rank
    std::deque<std::shared_ptr<local_msg>> recvs;  // unmatched receives of this rank
    std::atomic<bool> left{false};
  };

  std::vector<std::size_t> origin_;  // per rank: its rank in the group split first

  void complete(local_msg& s, local_msg& r) {
    if (s.bytes != r.bytes) {
      s.other_bytes = r.bytes;
      r.other_bytes = s.bytes;
      s.size_mismatch.store(true, std::memory_order_relaxed);
      r.size_mismatch.store(true, std::memory_order_relaxed);
    } else if (s.bytes) {
      std::memcpy(r.rbuf, s.sbuf, s.bytes);
    }
    s.done.store(true, std::memory_order_release);
    r.done.store(true, std::memory_order_release);
    notify(s.src);
    notify(s.dst);
  }

  void notify(std::size_t rank) {
    auto& r = ranks_[rank];
    std::lock_guard lk(r.m);
    r.cv.notify_all();
  }

  std::vector<rank_state> ranks_;
  std::vector<std::atomic<std::uint64_t>> entered_;  // per rank: calls entered (stall board)
};

}  // namespace gradsync::transport::detail
