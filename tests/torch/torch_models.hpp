// SPDX-License-Identifier: Apache-2.0
// Small libtorch models and data for the data_parallel tests: a CNN whose start and
// batches are fixed by a seed, a one-process reference training (plain SGD, no gradsync)
// and the weights' hash every run is compared with.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include <gradsync/torch/replicas.hpp>

namespace torch_test {

/// conv -> relu -> fc1 -> relu -> fc2 (+ an optional layer the forward never uses).
struct net_impl : torch::nn::Module {
  explicit net_impl(bool with_unused = false, std::int64_t hidden = 16) {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3)));
    fc1 = register_module("fc1", torch::nn::Linear(4 * 6 * 6, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, 4));
    if (with_unused) unused = register_module("unused", torch::nn::Linear(3, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = torch::relu(conv->forward(x)).flatten(1);
    return fc2->forward(torch::relu(fc1->forward(h)));
  }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, unused{nullptr};
};
TORCH_MODULE_IMPL(net, net_impl);

/// A batch of 8x8 one-channel images and 4-class labels.
struct batch {
  torch::Tensor x, y;
};

/// `steps` batches of `size`, the same for every caller with the same seed.
inline std::vector<batch> batches(std::size_t steps, std::int64_t size, std::uint64_t seed) {
  torch::Generator g = torch::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<batch> v;
  for (std::size_t s = 0; s < steps; ++s) {
    v.push_back({torch::randn({size, 1, 8, 8}, g), torch::randint(0, 4, {size}, g)});
  }
  return v;
}

/// The parameters of a net built from `seed` (copied: the caller's start).
inline std::vector<torch::Tensor> initial_params(std::uint64_t seed, bool with_unused = false) {
  torch::manual_seed(seed);
  net m(with_unused);
  std::vector<torch::Tensor> v;
  for (auto& p : m->parameters()) v.push_back(p.detach().clone());
  return v;
}

/// Writes `init` (plus `offset`: a rank's own start, which rank 0's broadcast replaces).
inline void load(net& m, const std::vector<torch::Tensor>& init, float offset = 0) {
  torch::NoGradGuard no_grad;
  auto ps = m->parameters();
  for (std::size_t i = 0; i < ps.size(); ++i) ps[i].copy_(init[i] + offset);
}

/// One SGD step's forward and backward on batch b.
inline torch::Tensor loss_of(net& m, const batch& b) {
  return torch::nn::functional::cross_entropy(m->forward(b.x), b.y);
}

/// Plain SGD over `data`, one step per batch (with or without a data_parallel on m).
inline void train(net& m, const std::vector<batch>& data, double lr) {
  torch::optim::SGD opt(m->parameters(), lr);
  for (const auto& b : data) {
    opt.zero_grad();
    loss_of(m, b).backward();
    opt.step();
  }
}

/// Trains one process on `data` from `init` without gradsync: the reference.
inline std::uint64_t reference_hash(const std::vector<torch::Tensor>& init,
                                    const std::vector<batch>& data, double lr) {
  net m;
  load(m, init);
  train(m, data, lr);
  return gradsync::torch::replicas::hash(m->parameters());
}

}  // namespace torch_test
