// SPDX-License-Identifier: Apache-2.0
// fork_group: N processes of one host made by fork(), with a shared anonymous mapping
// for a barrier and a small allgather: the bootstrap of transport::cuda_ipc when there is
// no MPI (bench/gpu_check.sh, tests). fork() must happen BEFORE the parent touches CUDA
// (a CUDA context does not survive fork), so run_forked() is the first thing main does.
#pragma once

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <thread>

#include "gradsync/core/deadline.hpp"
#include "gradsync/core/error.hpp"

namespace gradsync::transport {

class fork_group {
 public:
  static constexpr std::size_t max_ranks = 16;
  static constexpr std::size_t slot_bytes = 4096;

  std::size_t rank() const { return rank_; }
  std::size_t size() const { return size_; }

  /// Every rank's `bytes` (<= slot_bytes) of `mine` into all[r * bytes].
  void allgather(const void* mine, void* all, std::size_t bytes) {
    if (bytes > slot_bytes) {
      throw error(errc::invalid_argument, {rank_}, "fork_group allgather is limited to 4096 bytes");
    }
    std::memcpy(shared_->slots[rank_], mine, bytes);
    barrier();
    for (std::size_t r = 0; r < size_; ++r) {
      std::memcpy(static_cast<std::byte*>(all) + r * bytes, shared_->slots[r], bytes);
    }
    barrier();  // nobody overwrites a slot before everyone has read it
  }

  /// Sense-reversing barrier over the shared counter; errc::timeout after `seconds`.
  void barrier(double seconds = 120.0) {
    const deadline d = deadline::after(seconds_d{seconds});
    const std::uint32_t gen = shared_->generation.load(std::memory_order_acquire);
    if (shared_->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == size_) {
      shared_->arrived.store(0, std::memory_order_relaxed);
      shared_->generation.store(gen + 1, std::memory_order_release);
      return;
    }
    while (shared_->generation.load(std::memory_order_acquire) == gen) {
      if (d.expired()) {
        throw error(errc::timeout, {rank_}, "fork_group barrier: a peer process did not arrive");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  /// Forks `n` processes that each run body(group) and exit with its return value;
  /// returns 0 if every child returned 0, else the first non-zero status (77 if all
  /// non-zero statuses were 77, i.e. skipped).
  template <class F>
  static int run_forked(std::size_t n, F body) {
    void* mem =
        mmap(nullptr, sizeof(shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) throw error(errc::transport, {}, "mmap for fork_group failed");
    auto* sh = new (mem) shared{};
    pid_t pids[max_ranks] = {};
    for (std::size_t r = 0; r < n && r < max_ranks; ++r) {
      pids[r] = fork();
      if (pids[r] == 0) {
        fork_group g;
        g.rank_ = r;
        g.size_ = n;
        g.shared_ = sh;
        int rc = 1;
        try {
          rc = body(g);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "rank %zu: %s\n", r, e.what());
        }
        std::fflush(stdout);
        _exit(rc);
      }
    }
    int result = 0;
    bool all_skip = true;
    for (std::size_t r = 0; r < n && r < max_ranks; ++r) {
      int st = 0;
      waitpid(pids[r], &st, 0);
      const int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      if (rc != 0 && result == 0) result = rc;
      if (rc != 77) all_skip = false;
    }
    munmap(mem, sizeof(shared));
    return all_skip ? 77 : (result == 77 ? 1 : result);
  }

 private:
  struct shared {
    std::atomic<std::uint32_t> arrived{0};
    std::atomic<std::uint32_t> generation{0};
    unsigned char slots[max_ranks][slot_bytes];
  };
  static_assert(std::atomic<std::uint32_t>::is_always_lock_free,
                "fork_group needs lock-free atomics to share them between processes");

  std::size_t rank_ = 0, size_ = 1;
  shared* shared_ = nullptr;
};

}  // namespace gradsync::transport
