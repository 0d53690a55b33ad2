// SPDX-License-Identifier: Apache-2.0
// --shard-optimizer (ZeRO stage 1): the gradient is reduce-scattered so that rank r holds
// the averaged gradient of its shard r of the parameters, updates that shard's weights
// and momentum (kept for its shard only: 1/n of the momentum memory), and the updated
// shards are allgathered into every rank's full weights. The per-element arithmetic is
// the unsharded step's, so with --exact-grads the weights are bitwise those of a plain run.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include <gradsync/gradsync.hpp>

#include "model.hpp"

namespace mini_trainer {

template <class Tr>  ///< a gradsync::transport_policy, or a two_level
class sharded_optimizer {
 public:
  /// Over `params` parameters, padded to n shards of equal size.
  sharded_optimizer(Tr& t, std::size_t params)
      : t_(t),
        p_(params),
        m_((params + t.size() - 1) / t.size()),
        gpad_(t.size() * m_, 0.0f),
        wpad_(t.size() * m_, 0.0f),
        g_(m_),
        w_(m_),
        v_(m_, 0.0f) {}

  /// Floats of momentum this rank keeps (its shard; the padding included).
  std::size_t momentum_floats() const { return m_; }

  /// Takes this rank's shard of a full momentum vector (a fresh start or a checkpoint's).
  void load_momentum(const std::vector<float>& full) {
    const std::size_t lo = lo_();
    std::fill(v_.begin(), v_.end(), 0.0f);
    for (std::size_t i = lo; i < std::min(p_, lo + m_); ++i) v_[i - lo] = full[i];
  }
  /// Every rank's shard of the momentum, gathered (for checkpoints; collective).
  std::vector<float> full_momentum() {
    gradsync::allgather(t_, std::span<const float>(v_), std::span<float>(wpad_));
    return std::vector<float>(wpad_.begin(), wpad_.begin() + static_cast<std::ptrdiff_t>(p_));
  }

  /// One step: `g` is this rank's gradient (scaled so that op::avg gives the global mean);
  /// `w` ends updated, identical on every rank.
  void step(std::vector<float>& w, const std::vector<float>& g, float lr, float mu) {
    std::copy(g.begin(), g.end(), gpad_.begin());
    gradsync::reduce_scatter(t_, std::span<const float>(gpad_), std::span<float>(g_),
                             gradsync::op::avg);
    const std::size_t lo = lo_();
    std::fill(w_.begin(), w_.end(), 0.0f);
    for (std::size_t i = lo; i < std::min(p_, lo + m_); ++i) w_[i - lo] = w[i];
    sgd_momentum_step(w_, v_, g_, lr, mu);  // the padding stays 0: its gradient is 0
    gradsync::allgather(t_, std::span<const float>(w_), std::span<float>(wpad_));
    std::copy(wpad_.begin(), wpad_.begin() + static_cast<std::ptrdiff_t>(p_), w.begin());
  }

 private:
  std::size_t lo_() const { return t_.rank() * m_; }

  Tr& t_;
  std::size_t p_, m_;
  std::vector<float> gpad_, wpad_;  // n shards: the gradient in, the weights out
  std::vector<float> g_, w_, v_;    // this rank's shard: gradient, weights, momentum
};

}  // namespace mini_trainer
