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

#include "gradsync/transport/shm_segment.hpp"

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
/// at `slice` so health checks stay periodic.
template <class Progress, class Idle>
void sleep_wait(rank_ctl& me, const spin_budget& budget, clock::time_point until,
                Progress&& progress, Idle&& idle,
                std::chrono::milliseconds slice = std::chrono::milliseconds(20)) {
  if (progress()) return;
  const auto spin_until = clock::now() + budget.spin;
  for (std::uint32_t i = 1;; ++i) {
    if (progress()) return;
    cpu_relax();
    if ((i & 63) == 0 && clock::now() >= spin_until) break;
  }
  for (std::uint32_t i = 0; i < budget.yields; ++i) {
    if (progress()) return;
    ::sched_yield();
  }
  auto bell = shared_word(me.bell);
  auto sleeping = shared_word(me.sleeping);
  for (;;) {
    const auto now = clock::now();
    if (idle(now)) return;  // throws on a lost peer or a passed deadline
    const std::uint32_t seen = bell.load(std::memory_order_acquire);
    sleeping.store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (progress()) {
      sleeping.store(0, std::memory_order_relaxed);
      return;
    }
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(until - now);
    futex_wait(&me.bell, seen, std::min<std::chrono::nanoseconds>(left, slice));
    sleeping.store(0, std::memory_order_relaxed);
    if (progress()) return;
  }
}

}  // namespace gradsync::transport::detail
