// SPDX-License-Identifier: Apache-2.0
// Which buckets of the open step may launch: ready(i) marks a registered tensor's
// gradient final, and buckets launch in plan order (the same order on every rank) as
// soon as every tensor of the next one is marked — never out of order, so ranks that
// mark tensors in different orders still issue the same collectives in the same order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gradsync/fusion/plan.hpp"

namespace gradsync::detail {

class step_gate {
 public:
  /// Starts a step of plan p: nothing marked, nothing launched.
  void open(const fusion::plan& p) {
    plan_ = &p;
    ready_.assign(p.tensor_bucket.size(), 0);
    missing_.resize(p.buckets.size());
    for (std::size_t k = 0; k < p.buckets.size(); ++k) missing_[k] = p.buckets[k].tensors.size();
    next_ = 0;
  }
  /// Marks tensor i; false when it was marked already in this step.
  bool mark(std::size_t i) {
    if (ready_[i]) return false;
    ready_[i] = 1;
    --missing_[plan_->tensor_bucket[i]];
    return true;
  }
  /// Marks every tensor not marked yet.
  void mark_rest() {
    for (std::size_t i = 0; i < ready_.size(); ++i) mark(i);
  }
  /// Takes the next bucket in plan order if it may start now (every tensor marked) and
  /// returns it, else `none`. The caller launches it: the gate only counts.
  std::size_t take_next() {
    return next_ < missing_.size() && missing_[next_] == 0 ? next_++ : none;
  }
  static constexpr std::size_t none = static_cast<std::size_t>(-1);
  /// The first bucket not launched yet (the bucket count when all were).
  std::size_t next() const { return next_; }

 private:
  const fusion::plan* plan_ = nullptr;
  std::vector<std::uint8_t> ready_;   // tensor -> marked ready in this step
  std::vector<std::size_t> missing_;  // bucket -> tensors not yet ready
  std::size_t next_ = 0;              // next bucket to launch (plan order)
};

}  // namespace gradsync::detail
