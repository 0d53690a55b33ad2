// SPDX-License-Identifier: Apache-2.0
// The benchmark's view of "the ranks taking part": rank, size, a barrier and the few
// collectives the harness itself needs (elementwise max of timings, sums of #wrong).
// Implemented over threads of one process (thread_group) and over an MPI communicator
// (mpi_group in mpi_group.hpp), so that each measurement is written once.
#pragma once

#include <algorithm>
#include <barrier>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace gradsync::bench {

/// Ranks of one benchmark run; every member calls each method in the same order.
class group {
 public:
  virtual ~group() = default;
  virtual std::size_t rank() const = 0;
  virtual std::size_t size() const = 0;
  /// Returns once every rank has entered.
  virtual void barrier() = 0;
  /// v[i] = max over ranks of v[i], on every rank (all ranks pass the same length).
  virtual void max_all(std::span<double> v) = 0;
  /// The sum over ranks of x, on every rank.
  virtual std::uint64_t sum_all(std::uint64_t x) = 0;
  /// Rank 0's string, on every rank.
  virtual std::string broadcast(const std::string& s) = 0;
};

namespace detail {
/// State shared by the threads of one thread_group.
struct thread_group_state {
  explicit thread_group_state(std::size_t n) : sync(static_cast<std::ptrdiff_t>(n)), slots(n) {}
  std::barrier<> sync;
  std::vector<std::vector<double>> slots;  // one contribution per rank
  std::vector<std::uint64_t> counts = std::vector<std::uint64_t>(slots.size());
  std::string text;
};
}  // namespace detail

/// Rank `rank` of a group whose ranks are threads sharing one thread_group_state.
class thread_group final : public group {
 public:
  thread_group(std::shared_ptr<detail::thread_group_state> s, std::size_t rank)
      : s_(std::move(s)), rank_(rank) {}
  static std::shared_ptr<detail::thread_group_state> make_state(std::size_t n) {
    return std::make_shared<detail::thread_group_state>(n);
  }

  std::size_t rank() const override { return rank_; }
  std::size_t size() const override { return s_->slots.size(); }
  void barrier() override { s_->sync.arrive_and_wait(); }

  void max_all(std::span<double> v) override {
    s_->slots[rank_].assign(v.begin(), v.end());
    barrier();
    for (const auto& other : s_->slots) {
      for (std::size_t i = 0; i < v.size() && i < other.size(); ++i)
        v[i] = std::max(v[i], other[i]);
    }
    barrier();  // nobody overwrites a slot before everyone has read it
  }

  std::uint64_t sum_all(std::uint64_t x) override {
    s_->counts[rank_] = x;
    barrier();
    std::uint64_t total = 0;
    for (auto c : s_->counts) total += c;
    barrier();
    return total;
  }

  std::string broadcast(const std::string& str) override {
    if (rank_ == 0) s_->text = str;
    barrier();
    std::string out = s_->text;
    barrier();
    return out;
  }

 private:
  std::shared_ptr<detail::thread_group_state> s_;
  std::size_t rank_;
};

}  // namespace gradsync::bench
