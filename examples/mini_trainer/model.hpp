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
// produce the same bits. The per-sample forward/backward is done one sample at a time
// (sgemv), so its rounding cannot depend on how many samples share a GEMM.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <gradsync/fusion/tensor.hpp>

#include <cblas.h>

#include "rng.hpp"

namespace mini_trainer {

/// Layer widths, input first: {784, 256, 128, 10}.
struct mlp_shape {
  std::vector<std::size_t> dims;

  std::size_t layers() const { return dims.size() - 1; }
  std::size_t weight_offset(std::size_t l) const {
    std::size_t off = 0;
    for (std::size_t i = 0; i < l; ++i) off += dims[i + 1] * (dims[i] + 1);
    return off;
  }
  std::size_t bias_offset(std::size_t l) const { return weight_offset(l) + dims[l + 1] * dims[l]; }
  std::size_t param_count() const { return weight_offset(layers()); }
  std::string str() const {
    std::string s;
    for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? "-" : "") + std::to_string(dims[i]);
    return s;
  }
  /// The matrix shape of W1, b1, W2, b2, ...: W_l is out x in (row-major), biases none.
  std::vector<gradsync::matrix_shape> matrix_shapes() const {
    std::vector<gradsync::matrix_shape> s;
    for (std::size_t l = 0; l < layers(); ++l) {
      s.push_back({dims[l + 1], dims[l]});
      s.push_back({});
    }
    return s;
  }
  /// Spans for W1, b1, W2, b2, ... into an arena laid out like the parameters.
  std::vector<std::span<float>> tensors(std::vector<float>& arena) const {
    std::vector<std::span<float>> t;
    for (std::size_t l = 0; l < layers(); ++l) {
      t.emplace_back(arena.data() + weight_offset(l), dims[l + 1] * dims[l]);
      t.emplace_back(arena.data() + bias_offset(l), dims[l + 1]);
    }
    return t;
  }
};

namespace detail {
inline float quantize(float x, float lo, float hi) {
  constexpr float step = 0x1.0p-6f, inv = 0x1.0p6f;
  return std::clamp(std::nearbyint(x * inv) * step, lo, hi);
}
constexpr float act_hi = 2.0f - 0x1.0p-6f;  // activations in [0, 2)
constexpr float delta_lim = 2.0f;           // deltas in [-2, 2]
}  // namespace detail

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

  /// He-uniform weights from `seed`, zero biases; the same on every rank.
  static void init_params(const mlp_shape& s, std::uint64_t seed, std::vector<float>& p) {
    p.assign(s.param_count(), 0.0f);
    rng r(seed ^ 0x5eed'1417'0000'0001ull);
    for (std::size_t l = 0; l < s.layers(); ++l) {
      const float a = std::sqrt(6.0f / static_cast<float>(s.dims[l]));
      float* w = p.data() + s.weight_offset(l);
      for (std::size_t i = 0; i < s.dims[l + 1] * s.dims[l]; ++i) w[i] = r.uniform(a);
    }
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
          cblas_sgemv(CblasRowMajor, CblasNoTrans, int(out), int(in), 1.0f, w, int(in),
                      acts_[l].data() + s * in, 1, 0.0f, z + s * out, 1);
        }
      } else if (m) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(out), int(in), 1.0f,
                    acts_[l].data(), int(in), w, int(in), 0.0f, z, int(out));
      }
      const bool hidden = l + 1 < L;
      for (std::size_t s = 0; s < m; ++s) {
        float* row = z + s * out;
        for (std::size_t j = 0; j < out; ++j) {
          float v = row[j] + b[j];
          if (hidden) {
            v = v > 0.0f ? v : 0.0f;
            if (exact_) v = detail::quantize(v, 0.0f, detail::act_hi);
          }
          row[j] = v;
        }
      }
    }
    // Softmax cross-entropy; the probabilities overwrite the logits.
    batch_stats st;
    const std::size_t k = shape_.dims[L];
    float* p = acts_[L].data();
    for (std::size_t s = 0; s < m; ++s) {
      float* row = p + s * k;
      const std::size_t arg = static_cast<std::size_t>(std::max_element(row, row + k) - row);
      const float mx = row[arg];
      double sum = 0;
      for (std::size_t j = 0; j < k; ++j) {
        row[j] = std::exp(row[j] - mx);
        sum += row[j];
      }
      st.loss_sum += std::log(sum) - std::log(static_cast<double>(row[y[s]]));
      const float inv = static_cast<float>(1.0 / sum);
      for (std::size_t j = 0; j < k; ++j) row[j] *= inv;
      st.correct += arg == y[s];
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
        float v = p[s * k + j] - (j == y[s] ? 1.0f : 0.0f);
        if (exact_) v = detail::quantize(v, -1.0f, 1.0f);
        d[s * k + j] = v;
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
            cblas_sgemv(CblasRowMajor, CblasTrans, int(out), int(in), 1.0f, w, int(in),
                        dl + s * out, 1, 0.0f, dp + s * in, 1);
          }
        } else if (m) {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(m), int(in), int(out), 1.0f,
                      dl, int(out), w, int(in), 0.0f, dp, int(in));
        }
        for (std::size_t i = 0; i < m * in; ++i) {
          float v = a[i] > 0.0f ? dp[i] : 0.0f;
          if (exact_) v = detail::quantize(v, -detail::delta_lim, detail::delta_lim);
          dp[i] = v;
        }
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
  for (std::size_t i = 0; i < n; ++i) {
    vp[i] = mu * vp[i] + gp[i];
    wp[i] -= lr * vp[i];
  }
}

}  // namespace mini_trainer
