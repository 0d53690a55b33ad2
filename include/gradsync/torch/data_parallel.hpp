// SPDX-License-Identifier: Apache-2.0
// gradsync::torch::data_parallel: data-parallel training of a libtorch module over any
// allreducer composition (what DistributedDataParallel does in Python; libtorch's C++ API
// has none). At construction every rank takes rank 0's parameters and buffers, the
// parameters are registered and the plan is agreed across ranks, and each parameter's
// .grad becomes a tensor gradsync reduces in place: a view into the allreducer's arena
// with fusion::zero_copy (nothing copied, as DDP's gradient_as_bucket_view), else a
// tensor of its own that gradsync packs. During backward a post hook on each gradient
// accumulator (as PyTorch's Reducer; Tensor::register_hook fires before accumulation)
// marks the parameter ready, so buckets go out while backward still runs; the end of
// backward waits for the step (or the caller calls wait()).
// Only code that links libtorch includes this folder; the umbrella header does not.
#pragma once

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/nn/module.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gradsync/allreducer.hpp"
#include "gradsync/broadcast.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/fusion/concept.hpp"
#include "gradsync/torch/replicas.hpp"
#include "gradsync/torch/tensors.hpp"

namespace gradsync::torch {

/// True for gradsync::allreducer<Tr, A, F, C>.
template <class T>
inline constexpr bool is_allreducer_v = false;
template <class Tr, class A, class F, class C>
inline constexpr bool is_allreducer_v<allreducer<Tr, A, F, C>> = true;

/// Construction options of a data_parallel.
struct data_parallel_options {
  allreducer_options sync{};        ///< the allreducer's: deadline, bucket cap, timeline, metrics
  bool broadcast_from_root = true;  ///< start every rank from rank 0's parameters and buffers
  bool finish_in_backward = true;   ///< backward() returns once the step is synced (as DDP)
  std::size_t check_replicas_every = 0;  ///< steps between replica hash checks; 0: never
};

/// When a step's first and last gradients were marked ready, and when it completed.
struct step_times {
  std::chrono::steady_clock::time_point first_ready{};  ///< the first hook of the step
  std::chrono::steady_clock::time_point last_ready{};   ///< the last hook: backward's end
  std::chrono::steady_clock::time_point done{};         ///< every gradient averaged
};

template <class Sync>  ///< a gradsync::allreducer<Transport, Algorithm, Fusion, Compression>
class data_parallel {
  static_assert(is_allreducer_v<Sync>,
                "gradsync::torch::data_parallel<Sync>: Sync must be a gradsync::allreducer<"
                "Transport, Algorithm, Fusion, Compression>, e.g. allreducer<transport::mpi, "
                "algo::auto_select, fusion::zero_copy<25 << 20>>");
  static_assert(Sync::transport_type::memory == memory_space::host,
                "gradsync::torch::data_parallel: libtorch here is CPU-only; use a host "
                "transport (local, shm, mpi or a two_level)");
  using transport_type = typename Sync::transport_type;
  static constexpr bool zero_copy = fusion::is_zero_copy_v<typename Sync::fusion_type>;

 public:
  /// Wraps `module` (it must outlive this object) over `t`. Collective: every rank
  /// constructs it with the same model, or every rank throws errc::mismatch naming the
  /// first parameter that differs.
  data_parallel(::torch::nn::Module& module, transport_type& t, data_parallel_options o = {})
      : o_(std::move(o)), sync_(t, o_.sync) {
    collect(module);
    for (auto& p : params_) register_param(p);
    sync_.commit(op::avg, element_types<float, bfloat16>{});  // checked across ranks
    if (o_.broadcast_from_root) broadcast_state(module);
    for (std::size_t i = 0; i < params_.size(); ++i) {
      attach_home(params_[i]);
      params_[i].accumulator = ::torch::autograd::impl::grad_accumulator(params_[i].value);
      params_[i].hook_key =
          params_[i].accumulator->add_post_hook(std::make_unique<ready_hook>(this, i));
    }
  }
  data_parallel(const data_parallel&) = delete;
  data_parallel& operator=(const data_parallel&) = delete;

  /// Removes the hooks; gradients that live in the arena get a copy of their own, so
  /// the module's .grad stays valid after the arena is gone.
  ~data_parallel() {
    for (auto& p : params_) {
      if (p.accumulator) p.accumulator->del_post_hook(p.hook_key);
      if (zero_copy && aliases_home(p)) p.value.mutable_grad() = p.home.clone();
    }
  }

  /// Ends the open step: parameters that got no gradient count as ready (with the
  /// gradient they hold, or zeros if it is undefined), then waits until every gradient
  /// is averaged. Rethrows the step's first error. With finish_in_backward the end of
  /// backward() already did this and wait() returns at once.
  void wait() { finish_step(); }

  /// Off: the hooks do nothing and gradients accumulate locally (several backward passes
  /// per step, as DDP's no_sync()); the next backward with it on syncs the sum.
  void require_sync(bool on) { sync_on_ = on; }

  /// Compares a hash of every parameter across ranks; errc::diverged on every rank,
  /// naming the ranks that differ from rank 0, if any does. Collective.
  void check_replicas() { replicas::check(sync_.transport(), parameters(), steps_, options()); }

  /// Every rank takes rank 0's buffers (BatchNorm statistics), as DDP does each forward.
  /// Collective; call it between steps.
  void broadcast_buffers() {
    for (auto& b : buffers_) broadcast_tensor(b.first, b.second);
  }

  /// The allreducer: statistics (last_stats, summary), timeline, transport.
  Sync& sync() { return sync_; }
  /// The allreducer, read-only.
  const Sync& sync() const { return sync_; }
  /// Completed steps.
  std::size_t steps() const { return steps_; }
  /// Timing of the last completed step.
  const step_times& last_step() const { return times_; }
  /// The synced parameters, in registration order (the module's).
  std::vector<at::Tensor> parameters() const {
    std::vector<at::Tensor> v;
    for (const auto& p : params_) v.push_back(p.value);
    return v;
  }
  /// Name of registered parameter i.
  const std::string& name(std::size_t i) const { return params_.at(i).name; }

 private:
  struct param {
    std::string name;
    at::Tensor value;
    at::Tensor home;                                       // where .grad lives and gradsync reduces
    std::size_t slot = 0;                                  // the allreducer's tensor index
    std::shared_ptr<::torch::autograd::Node> accumulator;  // held: the hook lives on it
    std::uintptr_t hook_key = 0;
  };

  /// Runs after the accumulator has added this step's gradient into .grad.
  struct ready_hook final : ::torch::autograd::FunctionPostHook {
    ready_hook(data_parallel* dp, std::size_t i) : dp_(dp), i_(i) {}
    ::torch::autograd::variable_list operator()(
        const ::torch::autograd::variable_list& outputs,
        const ::torch::autograd::variable_list& /*inputs*/) override {
#ifndef GRADSYNC_TORCH_TEST_NO_HOOK  // the mutation test's build: hooks that do nothing
      dp_->on_ready(i_);
#endif
      return outputs;
    }
    data_parallel* dp_;
    std::size_t i_;
  };

  const call_options& options() const {
    return sync_.options();
  }

  void collect(::torch::nn::Module& module) {
    for (const auto& item : module.named_parameters(/*recurse=*/true)) {
      const at::Tensor& v = item.value();
      if (!v.requires_grad()) continue;
      require_host_dense(v, item.key());
      if (v.scalar_type() != c10::kFloat && v.scalar_type() != c10::kBFloat16) {
        throw error(errc::invalid_argument, error_site{},
                    "data_parallel: parameter '" + item.key() + "' is " +
                        dtype_text(v.scalar_type()) + "; it syncs float32 and bfloat16 parameters");
      }
      params_.push_back({item.key(), v, {}, 0, nullptr, 0});
    }
    if (params_.empty()) {
      throw error(errc::invalid_argument, error_site{},
                  "data_parallel: the module has no parameter that requires a gradient");
    }
    for (const auto& item : module.named_buffers(/*recurse=*/true)) {
      buffers_.emplace_back(item.key(), item.value());
    }
    marked_.assign(params_.size(), 0);
  }

  /// Registers p in module order: the plan buckets in reverse registration order
  /// (fusion::order::reverse), so the last layer's gradients, ready first, fill bucket 0.
  void register_param(param& p) {
    const auto n = static_cast<std::size_t>(p.value.numel());
    const bool bf16 = p.value.scalar_type() == c10::kBFloat16;
    if constexpr (zero_copy) {
      p.slot =
          bf16 ? sync_.template add<bfloat16>(n, p.name) : sync_.template add<float>(n, p.name);
    } else {
      p.home = ::torch::zeros(p.value.sizes(), p.value.options().requires_grad(false));
      const matrix_shape shape = p.value.dim() >= 2
                                     ? matrix_shape{static_cast<std::size_t>(p.value.size(0)),
                                                    n / static_cast<std::size_t>(p.value.size(0))}
                                     : matrix_shape{};
      p.slot = bf16 ? sync_.add(span_of<bfloat16>(p.home), p.name, shape)
                    : sync_.add(span_of<float>(p.home), p.name, shape);
    }
  }

  /// Makes p's .grad its home (the arena view exists only after commit()), keeping the
  /// gradient it may already hold.
  void attach_home(param& p) {
    if constexpr (zero_copy) {
      void* data = p.value.scalar_type() == c10::kBFloat16
                       ? static_cast<void*>(sync_.template view<bfloat16>(p.slot).data())
                       : static_cast<void*>(sync_.template view<float>(p.slot).data());
      p.home = ::torch::from_blob(data, p.value.sizes(), p.value.options().requires_grad(false));
    }
    const at::Tensor g = p.value.grad();
    if (g.defined()) p.home.copy_(g);
    p.value.mutable_grad() = p.home;
  }

  bool aliases_home(const param& p) const {
    const at::Tensor& g = p.value.grad();
    return g.defined() && g.data_ptr() == p.home.data_ptr();
  }

  /// A .grad replaced by the caller (or reset to undefined) is copied back into its
  /// home, which becomes .grad again; zeros when it is undefined.
  void adopt_grad(param& p) {
    if (aliases_home(p)) return;
    const at::Tensor g = p.value.grad();
    ::torch::NoGradGuard no_grad;
    if (g.defined()) {
      p.home.copy_(g);
    } else {
      p.home.zero_();
    }
    p.value.mutable_grad() = p.home;
  }

  void on_ready(std::size_t i) {
    if (!sync_on_) return;
    const auto now = std::chrono::steady_clock::now();
    if (!open_) {
      open_ = true;
      times_.first_ready = now;
      std::fill(marked_.begin(), marked_.end(), 0);
      if (o_.finish_in_backward) {
        ::torch::autograd::Engine::get_default_engine().queue_callback([this] { finish_step(); });
      }
    }
    times_.last_ready = now;
    if (marked_[i]) {
      throw error(errc::invalid_argument, error_site{sync_.transport().rank()},
                  "data_parallel: parameter '" + params_[i].name +
                      "' got a second gradient in one step; call wait() after each "
                      "backward, or require_sync(false) while accumulating");
    }
    marked_[i] = 1;
    adopt_grad(params_[i]);
    sync_.ready(params_[i].slot);
  }

  void finish_step() {
    if (!open_) return;
    struct closer {
      bool& open;
      ~closer() { open = false; }
    } close{open_};
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (!marked_[i]) adopt_grad(params_[i]);  // its bucket has not started: safe to write
    }
    sync_.wait();
    times_.done = std::chrono::steady_clock::now();
    ++steps_;
    if (o_.check_replicas_every && steps_ % o_.check_replicas_every == 0) check_replicas();
  }

  void broadcast_state(::torch::nn::Module& module) {
    ::torch::NoGradGuard no_grad;
    for (const auto& item : module.named_parameters(/*recurse=*/true)) {
      broadcast_tensor(item.key(), item.value());
    }
    broadcast_buffers();
  }

  void broadcast_tensor(const std::string& name, const at::Tensor& x) {
    require_host_dense(x, name);
    try {
      const bool known = visit_element_type(x.scalar_type(), [&]<class T>() {
        gradsync::broadcast(sync_.transport(), span_of<T>(x), 0, options());
      });
      if (!known) {
        throw error(errc::invalid_argument, error_site{},
                    "its type " + dtype_text(x.scalar_type()) + " has no gradsync element type");
      }
    } catch (const error& e) {
      throw error(e.code(), error_site{},
                  "data_parallel: broadcasting '" + name + "' from rank 0: " + e.what());
    }
  }

  data_parallel_options o_;
  Sync sync_;
  std::vector<param> params_;
  std::vector<std::pair<std::string, at::Tensor>> buffers_;
  std::vector<char> marked_;  // this step's ready() calls, per parameter
  bool open_ = false;         // a step is between its first hook and its end
  bool sync_on_ = true;
  std::size_t steps_ = 0;
  step_times times_;
};

}  // namespace gradsync::torch
