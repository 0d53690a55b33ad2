// SPDX-License-Identifier: Apache-2.0
// The model: a multi-layer perceptron (784-256-128-10 by default), ReLU, softmax
// cross-entropy, SGD with momentum. Dense math goes through CBLAS (OpenBLAS, one thread
// per rank). Parameters, gradients and momentum each live in one flat arena with the
// same layout (W1, b1, W2, b2, ...), so a checkpoint, a hash or a fused allreduce sees
// one contiguous buffer and a per-tensor allreduce sees spans into it.
//
// Exact mode (--exact-grads, for tests): activations and back-propagated deltas are
// rounded to a grid of 2^-6 (activations clamped to [0, 2), deltas to [-2, 2]) and the
// inputs are (byte - 64)/128 (multiples of 2^-7 in [-0.5, 1.5)). Every per-sample
// product in a weight gradient is then a multiple of 2^-13 (layer 1: delta x input, below
// 3) or 2^-12 (deeper layers: delta x activation, below 4), so a sum over <= 512 samples
// stays below 2^24 units of its grid: it fits in float's 24-bit significand and is exact
// in ANY order and grouping (bias gradients likewise) -- one rank's
// GEMM over 256 samples and four ranks' GEMMs over 64 samples each, summed by the ring,
// produce the same bits, on the CPU and on the GPU. The per-sample forward/backward
// products with the weights are not on a grid; each is exact_math.hpp's fixed-order dot
// product (model.cpp computes several at once with the same lanes and order), so their
// rounding depends neither on how many samples share a GEMM nor on the device (the CUDA
// trainer runs the same code).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "exact_math.hpp"
#include "rng.hpp"
#include "shape.hpp"

namespace mini_trainer {

/// Per-rank scratch for one shard of a batch and the math on it.
class mlp {
 public:
  mlp(mlp_shape shape, std::size_t max_batch, bool exact)
      : shape_(std::move(shape)), exact_(exact) {
    const std::size_t L = shape_.layers();
    acts_.resize(L + 1);
    deltas_.resize(L + 1);
    for (std::size_t l = 0; l <= L; ++l) {
      acts_[l].resize(std::max<std::size_t>(1, max_batch) * shape_.dims[l]);
      deltas_[l].resize(std::max<std::size_t>(1, max_batch) * shape_.dims[l]);
    }
  }

  const mlp_shape& shape() const { return shape_; }

  /// He-uniform weights from `seed`, zero biases (shape.hpp's init_params).
  static void init_params(const mlp_shape& s, std::uint64_t seed, std::vector<float>& p) {
    mini_trainer::init_params(s, seed, p);
  }

  /// Input buffer for up to max_batch samples (filled by gather_batch).
  float* input() { return acts_[0].data(); }

  struct batch_stats {
    double loss_sum = 0;  // summed cross-entropy over the shard
    std::size_t correct = 0;
  };

  /// Forward pass over the m samples in input(); returns loss and hits against y.
  batch_stats forward(const std::vector<float>& params, const std::uint8_t* y, std::size_t m);

  /// Backward pass after forward(): writes the gradient of the summed loss, times
  /// `scale`, into `grads` (same layout as params), last layer first; calls
  /// `layer_done(l)` as soon as layer l's weight and bias gradients are final.
  void backward(const std::vector<float>& params, const std::uint8_t* y, std::size_t m, float scale,
                std::vector<float>& grads, const std::function<void(std::size_t)>& layer_done = {});

 private:
  mlp_shape shape_;
  bool exact_;
  std::vector<std::vector<float>> acts_;    // acts_[0] = input, acts_[L] = probabilities
  std::vector<std::vector<float>> deltas_;  // dLoss/dZ per layer output
};

/// z[s * out + j] = exact::dot(w + j * in, 1, a + s * in, 1, in) for s < m, j < out (the
/// m activation rows against the out rows of w), bit for bit, several at a time.
void exact_dot_rows(const float* w, const float* a, std::size_t m, std::size_t in, std::size_t out,
                    float* z);
/// dp[i] = exact::dot(d, 1, w + i, in, out) for i < in (one delta row against the columns
/// of w, out x in), bit for bit, several at a time.
void exact_dot_cols(const float* d, const float* w, std::size_t in, std::size_t out, float* dp);

/// SGD with momentum, PyTorch convention: v = mu v + g; w -= lr v.
void sgd_momentum_step(std::vector<float>& w, std::vector<float>& v, const std::vector<float>& g,
                       float lr, float mu);

}  // namespace mini_trainer
