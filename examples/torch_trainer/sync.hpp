// SPDX-License-Identifier: Apache-2.0
// How torch_trainer's gradients reach gradsync, behind one small interface so the
// training loop compiles once per transport:
//   --sync overlap        gradsync::torch::data_parallel over allreducer<Tr, A, F, C>:
//                         hooks launch buckets during backward, backward's end waits;
//   --sync per-parameter  libtorch's distributed example: after backward, one blocking
//                         gradsync::allreduce<A> per parameter, in order.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <gradsync/gradsync.hpp>
#include <gradsync/torch/data_parallel.hpp>
#include <gradsync/torch/tensors.hpp>

#include "config.hpp"

namespace torch_trainer {

/// What the training loop needs from a gradient synchronizer.
class grad_sync {
 public:
  virtual ~grad_sync() = default;
  /// After backward(): returns once every gradient holds the average over all ranks.
  virtual void after_backward() = 0;
  /// Seconds of the last step the caller waited for communication after its backward
  /// computation ended (the exposed, not overlapped, part).
  virtual double exposed_seconds() const = 0;
  /// Bytes this rank sent in the last step (< 0: not counted).
  virtual double wire_bytes() const { return -1; }
  /// Compares the ranks' weights; gradsync::error (diverged) naming the odd ranks.
  virtual void check_replicas(std::size_t step) = 0;
};

/// --sync overlap: data_parallel over the allreducer Sync.
template <class Sync>  ///< a gradsync::allreducer<Transport, Algorithm, Fusion, Compression>
class overlap_sync final : public grad_sync {
 public:
  overlap_sync(typename Sync::transport_type& t, torch::nn::Module& m, const config& cfg)
      : dp_(m, t, options(cfg)) {}
  void after_backward() override { dp_.wait(); }  // backward's end already waited
  double exposed_seconds() const override {
    const auto& s = dp_.last_step();
    return std::chrono::duration<double>(s.done - s.last_ready).count();
  }
  double wire_bytes() const override {
    return static_cast<double>(dp_.sync().last_stats().bytes_wire);
  }
  void check_replicas(std::size_t) override { dp_.check_replicas(); }

 private:
  static gradsync::torch::data_parallel_options options(const config& cfg) {
    gradsync::torch::data_parallel_options o;
    if constexpr (!std::is_same_v<typename Sync::fusion_type, gradsync::fusion::none>) {
      o.sync.bucket_bytes = static_cast<std::size_t>(cfg.bucket_mb * 1048576.0);
    }
    return o;
  }
  gradsync::torch::data_parallel<Sync> dp_;
};

/// --sync per-parameter: one blocking allreduce per parameter after backward.
template <class Transport,  ///< a gradsync::transport_policy, or a two_level
          class Algorithm>  ///< an algorithm for Transport (hierarchical on a two_level)
class per_parameter_sync final : public grad_sync {
 public:
  per_parameter_sync(Transport& t, torch::nn::Module& m, const config&)
      : t_(t), params_(m.parameters()) {}
  void after_backward() override {
    const auto t0 = std::chrono::steady_clock::now();
    for (auto& p : params_) {
      const at::Tensor g = p.grad();
      if (!g.defined()) continue;  // the same parameters on every rank (same graph)
      gradsync::allreduce<Algorithm>(t_, gradsync::torch::span_of<float>(g), gradsync::op::avg);
    }
    exposed_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  double exposed_seconds() const override { return exposed_; }
  void check_replicas(std::size_t step) override {
    gradsync::torch::replicas::check(t_, params_, step, {});
  }

 private:
  Transport& t_;
  std::vector<torch::Tensor> params_;
  double exposed_ = 0;
};

}  // namespace torch_trainer
