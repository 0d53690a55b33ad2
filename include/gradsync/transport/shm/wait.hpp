// SPDX-License-Identifier: Apache-2.0
// Waiting in transport::shm: spin briefly, then block on a futex word in the shared
// segment, so that 4 ranks on 2 cores do not starve each other. A waker only makes a
// system call when the waiting rank has announced that it sleeps.
#pragma once

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <thread>

#include "gradsync/transport/shm/segment.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace gradsync::transport::detail {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

/// FUTEX_WAIT on a word shared between processes (not FUTEX_PRIVATE). Returns early
/// when the word no longer holds `expected`, on a wake, or after `timeout`.
inline void futex_wait(std::uint32_t* word, std::uint32_t expected,
                       std::chrono::nanoseconds timeout) {
  if (timeout.count() <= 0) return;
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1000000000);
  ::syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, nullptr, 0);
}

inline void futex_wake_all(std::uint32_t* word) {
  ::syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

/// Number of CPUs this process may run on (for the spin budget).
inline std::size_t usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    return static_cast<std::size_t>(std::max(1, CPU_COUNT(&set)));
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

/// How long a waiter spins before it sleeps. With at least one CPU per rank the peer
/// is running (or will be within a scheduler tick), so spinning is cheapest: a rank
/// that sleeps hands its CPU to another process and pays a wake-up plus a preemption
/// to get it back (measured on the loaded 2-core CI VM: an 8-byte one-shot went from
/// ~0.3 us to ~10 us per call when the spin lasted 0.5 ms instead of 2 ms). When the
/// ranks outnumber the CPUs the peer we wait for probably needs our CPU, so we yield
/// almost at once and sleep soon after.
struct spin_budget {
  std::chrono::nanoseconds spin{0};  // spin (pause loops) this long before yielding
  std::uint32_t yields = 0;          // sched_yield calls before sleeping on the futex

  static spin_budget for_group(std::size_t ranks) {
    if (ranks <= usable_cpus()) return {std::chrono::milliseconds(2), 16};
    return {std::chrono::microseconds(5), 4};
  }
};

/// A spin budget that learns whether spinning pays. The group's size says nothing of
/// the other processes on the host (other jobs, or a virtual cluster whose "hosts" share
/// the cores): when waits keep outlasting the long spin, that spin burns the core the
/// peer needs, so waits switch to the brief budget and probe the long one again after
/// 64 waits, then after twice as many each time the probe fails (up to 4096).
/// 2 hosts x 2 ranks on 2 cores, 64 MiB: the node's reduce-scatter took 266 ms with
/// the long spin, 13 ms with the brief one (docs/cluster.md).
class spin_policy {
 public:
  explicit spin_policy(spin_budget full) : full_(full) {}

  /// The budget of the next wait; report how it went with outcome().
  const spin_budget& next() {
    probing_ = brief_left_ == 0;
    if (probing_) return full_;
    --brief_left_;
    return brief_;
  }
  /// The budget of a wait that will not report its outcome.
  const spin_budget& current() const { return brief_left_ > 0 ? brief_ : full_; }
  /// `spun`: the wait ended while spinning (before any yield or sleep).
  void outcome(bool spun) {
    if (!probing_) return;  // a brief wait tells nothing about the long spin
    if (spun) {
      misses_ = 0;
      backoff_ = first_backoff;
    } else if (++misses_ >= 2) {  // one long wait can be a late peer; two in a row, a pattern
      misses_ = 0;
      brief_left_ = backoff_;
      backoff_ = backoff_ * 2 > max_backoff ? max_backoff : backoff_ * 2;
    }
  }
  /// True while waits use the brief budget (for tests).
  bool brief() const { return brief_left_ > 0; }

 private:
  static constexpr std::uint32_t first_backoff = 64, max_backoff = 4096;
  spin_budget full_;
  spin_budget brief_{std::chrono::microseconds(5), 4};
  std::uint32_t misses_ = 0, brief_left_ = 0, backoff_ = first_backoff;
  bool probing_ = true;
};

/// Wakes rank `r` if it sleeps (or is about to). The caller has already published the
/// change `r` waits for; the seq_cst fence orders that store before reading `sleeping`
/// (the sleeper does the mirror image: store `sleeping`, fence, re-check its condition).
inline void wake_if_sleeping(rank_ctl& c) {  // the caller has issued the fence
  if (shared_word(c.sleeping).load(std::memory_order_relaxed) != 0) {
    shared_word(c.bell).fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(&c.bell);
  }
}
inline void wake_rank(rank_ctl& c) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  wake_if_sleeping(c);
}

/// Waits on this rank's own bell. `progress()` returns true when the awaited condition
/// holds; `idle(now)` is called between sleeps: it checks peers' health and the
/// deadline and throws, or returns true when a last look found the condition met. Sleeps are capped
/// at `slice` so health checks stay periodic. Returns true when the wait ended while
/// spinning (for spin_policy::outcome).
template <class Progress, class Idle>
bool sleep_wait(rank_ctl& me, const spin_budget& budget, clock::time_point until,
                Progress&& progress, Idle&& idle,
                std::chrono::milliseconds slice = std::chrono::milliseconds(20)) {
  if (progress()) return true;
  const auto spin_until = clock::now() + budget.spin;
  for (std::uint32_t i = 1;; ++i) {
    if (progress()) return true;
    cpu_relax();
    if ((i & 63) == 0 && clock::now() >= spin_until) break;
  }
  for (std::uint32_t i = 0; i < budget.yields; ++i) {
    if (progress()) return false;
    ::sched_yield();
  }
  auto bell = shared_word(me.bell);
  auto sleeping = shared_word(me.sleeping);
  for (;;) {
    const auto now = clock::now();
    if (idle(now)) return false;  // throws on a lost peer or a passed deadline
    const std::uint32_t seen = bell.load(std::memory_order_acquire);
    sleeping.store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (progress()) {
      sleeping.store(0, std::memory_order_relaxed);
      return false;
    }
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(until - now);
    futex_wait(&me.bell, seen, std::min<std::chrono::nanoseconds>(left, slice));
    sleeping.store(0, std::memory_order_relaxed);
    if (progress()) return false;
  }
}

/// sleep_wait with the budget `policy` gives, and the outcome reported back to it unless
/// `learn` is false: a wait for the peers to arrive at a call lasts as long as whatever
/// they did before it, which says nothing about whether spinning takes their CPU.
template <class Progress, class Idle>
void learning_wait(rank_ctl& me, spin_policy& policy, clock::time_point until, Progress&& progress,
                   Idle&& idle, bool learn = true) {
  if (!learn) {
    (void)sleep_wait(me, policy.current(), until, progress, idle);
    return;
  }
  const spin_budget& b = policy.next();
  policy.outcome(sleep_wait(me, b, until, progress, idle));
}

}  // namespace gradsync::transport::detail
