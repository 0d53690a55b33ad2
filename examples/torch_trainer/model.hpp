// SPDX-License-Identifier: Apache-2.0
// torch_trainer's two jobs, each a model and its data: a CNN on Fashion-MNIST (the
// mini-trainer's data and loader), and a small GPT-style language model over the bytes
// of a plain-text corpus (Debian's fortunes). Compiled once (model.cpp): nothing here
// depends on gradsync's policies.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config.hpp"

namespace torch_trainer {

/// A model that maps a batch of inputs to logits over its classes (or next bytes).
struct model : torch::nn::Module {
  virtual torch::Tensor logits(const torch::Tensor& x) = 0;
};

/// A training job: the model it trains, its data, its loss and its test metric.
class task {
 public:
  virtual ~task() = default;
  /// "cnn" or "transformer".
  virtual std::string name() const = 0;
  /// A fresh model (its weights drawn from torch's generator).
  virtual std::shared_ptr<model> make_model() const = 0;
  /// Training samples per epoch (images, or sequences of context + 1 bytes).
  virtual std::size_t train_samples() const = 0;
  /// Test samples.
  virtual std::size_t test_samples() const = 0;
  /// Inputs and targets of training samples idx (or test samples with `test`).
  virtual void batch(const std::vector<std::uint32_t>& idx, bool test, torch::Tensor& x,
                     torch::Tensor& y) const = 0;
  /// Mean cross-entropy of `logits` against `y` (over every predicted position).
  torch::Tensor loss(const torch::Tensor& logits, const torch::Tensor& y) const {
    return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}),
                                                y.reshape({-1}));
  }
  /// Predictions a sample counts for in the metric (1 per image, context per sequence).
  virtual std::size_t positions() const = 0;
  /// "test_acc=0.8123" or "perplexity=5.43" from summed correct predictions and loss.
  virtual std::string metric(double correct, double loss_sum, double positions) const = 0;
  /// One line about the model: parameters and tensors.
  std::string describe() const;
};

/// The job of --model, with its data loaded from cfg.data_dir (usage_error naming the
/// file or directory when it cannot be read).
std::unique_ptr<task> make_task(const config& cfg);

/// The starting weights of cfg.seed: every rank of a run starts from them.
std::vector<torch::Tensor> initial_params(const task& job, std::uint64_t seed);

/// Copies `init` into m's parameters.
void load_params(model& m, const std::vector<torch::Tensor>& init);

}  // namespace torch_trainer
