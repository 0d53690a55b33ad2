// SPDX-License-Identifier: Apache-2.0
// The model's math (model.hpp): compiled once, at -O2 or more, whatever the level of the
// policy instantiations that call it (-Dtrainer_optimization).
#include "model.hpp"

#include <cblas.h>

namespace mini_trainer {

mlp::batch_stats mlp::forward(const std::vector<float>& params, const std::uint8_t* y,
                              std::size_t m) {
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

void mlp::backward(const std::vector<float>& params, const std::uint8_t* y, std::size_t m,
                   float scale, std::vector<float>& grads,
                   const std::function<void(std::size_t)>& layer_done) {
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
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(m), int(in), int(out), 1.0f, dl,
                    int(out), w, int(in), 0.0f, dp, int(in));
      }
      for (std::size_t i = 0; i < m * in; ++i) dp[i] = exact::relu_delta(a[i], dp[i], exact_);
    }
    if (layer_done) layer_done(l);
  }
}

void sgd_momentum_step(std::vector<float>& w, std::vector<float>& v, const std::vector<float>& g,
                       float lr, float mu) {
  const std::size_t n = w.size();
  float* __restrict wp = w.data();
  float* __restrict vp = v.data();
  const float* __restrict gp = g.data();
  for (std::size_t i = 0; i < n; ++i) exact::sgd_momentum(wp[i], vp[i], gp[i], lr, mu);
}

}  // namespace mini_trainer
