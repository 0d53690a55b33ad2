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
// products with the weights are not on a grid; they are computed one sample at a time by
// exact_math.hpp's fixed-order dot product, so their rounding depends neither on how
// many samples share a GEMM nor on the device (the CUDA trainer runs the same code).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include <cblas.h>

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
  batch_stats forward(const std::vector<float>& params, const std::uint8_t* y, std::size_t m) {
    const std::size_t L = shape_.layers();
    for (std::size_t l = 0; l < L; ++l) {
      const std::size_t in = shape_.dims[l], out = shape_.dims[l + 1];
      const float* w = params.data() + shape_.weight_offset(l);
      const float* b = params.data() + shape_.bias_offset(l);
      float* z = acts_[l + 1].data();
      if (exact_) {
        for (std::size_t s = 0; s < m; ++s) {
          for (std::size_t j = 0; j < out; ++j) {
            z[s * out + j] = exact::dot(w + j * in, 1, acts_[l].data() + s * in, 1, in);
          }
        }
      } else if (m) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(out), int(in), 1.0f,
                    acts_[l].data(), int(in), w, int(in), 0.0f, z, int(out));
      }
      const bool hidden = l + 1 < L;
      for (std::size_t s = 0; s < m; ++s) {
        float* row = z + s * out;
        for (std::size_t j = 0; j < out; ++j)
          row[j] = exact::activation(row[j], b[j], hidden, exact_);
      }
    }
    // Softmax cross-entropy; the probabilities overwrite the logits.
    batch_stats st;
    const std::size_t k = shape_.dims[L];
    float* p = acts_[L].data();
    for (std::size_t s = 0; s < m; ++s) {
      bool hit = false;
      st.loss_sum += exact::softmax_xent(p + s * k, k, y[s], exact_, &hit);
      st.correct += hit;
    }
    return st;
  }

  /// Backward pass after forward(): writes the gradient of the summed loss, times
  /// `scale`, into `grads` (same layout as params), last layer first; calls
  /// `layer_done(l)` as soon as layer l's weight and bias gradients are final.
  void backward(const std::vector<float>& params, const std::uint8_t* y, std::size_t m, float scale,
                std::vector<float>& grads,
                const std::function<void(std::size_t)>& layer_done = {}) {
    const std::size_t L = shape_.layers();
    const std::size_t k = shape_.dims[L];
    float* d = deltas_[L].data();
    const float* p = acts_[L].data();
    for (std::size_t s = 0; s < m; ++s) {
      for (std::size_t j = 0; j < k; ++j) {
        d[s * k + j] = exact::output_delta(p[s * k + j], j == y[s], exact_);
      }
    }
    for (std::size_t l = L; l-- > 0;) {
      const std::size_t in = shape_.dims[l], out = shape_.dims[l + 1];
      const float* w = params.data() + shape_.weight_offset(l);
      float* gw = grads.data() + shape_.weight_offset(l);
      float* gb = grads.data() + shape_.bias_offset(l);
      const float* dl = deltas_[l + 1].data();
      const float* a = acts_[l].data();
      // dW = D^T A (out x in), summed over the shard's samples.
      if (m) {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(out), int(in), int(m), scale, dl,
                    int(out), a, int(in), 0.0f, gw, int(in));
      } else {
        std::fill(gw, gw + out * in, 0.0f);
      }
      for (std::size_t j = 0; j < out; ++j) gb[j] = 0.0f;
      for (std::size_t s = 0; s < m; ++s)
        for (std::size_t j = 0; j < out; ++j) gb[j] += dl[s * out + j];
      for (std::size_t j = 0; j < out; ++j) gb[j] *= scale;
      if (l > 0) {
        // D_prev = (D W) masked by ReLU' (a > 0 exactly where the pre-activation was).
        float* dp = deltas_[l].data();
        if (exact_) {
          for (std::size_t s = 0; s < m; ++s) {
            for (std::size_t i = 0; i < in; ++i) {
              dp[s * in + i] = exact::dot(dl + s * out, 1, w + i, in, out);
            }
          }
        } else if (m) {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(m), int(in), int(out), 1.0f,
                      dl, int(out), w, int(in), 0.0f, dp, int(in));
        }
        for (std::size_t i = 0; i < m * in; ++i) dp[i] = exact::relu_delta(a[i], dp[i], exact_);
      }
      if (layer_done) layer_done(l);
    }
  }

 private:
  mlp_shape shape_;
  bool exact_;
  std::vector<std::vector<float>> acts_;    // acts_[0] = input, acts_[L] = probabilities
  std::vector<std::vector<float>> deltas_;  // dLoss/dZ per layer output
};

/// SGD with momentum, PyTorch convention: v = mu v + g; w -= lr v.
inline void sgd_momentum_step(std::vector<float>& w, std::vector<float>& v,
                              const std::vector<float>& g, float lr, float mu) {
  const std::size_t n = w.size();
  float* __restrict wp = w.data();
  float* __restrict vp = v.data();
  const float* __restrict gp = g.data();
  for (std::size_t i = 0; i < n; ++i) exact::sgd_momentum(wp[i], vp[i], gp[i], lr, mu);
}

}  // namespace mini_trainer
