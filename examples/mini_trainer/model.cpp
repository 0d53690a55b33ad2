// SPDX-License-Identifier: Apache-2.0
// The model's math (model.hpp): compiled once, at -O2 or more, whatever the level of the
// policy instantiations that call it (-Dtrainer_optimization).
#include "model.hpp"

#include <cblas.h>

#include <cstring>

namespace mini_trainer {
namespace {

// exact_dot_rows and exact_dot_cols (model.hpp): exact::dot keeps four double sums, and
// each add waits for the one before it in its lane; these run many dots at once, in
// vectors, each keeping its four lanes (lane i % 4, summed in order of i, then (l0 + l1) +
// (l2 + l3)), so the bits are exact::dot's. x86-64 builds get an AVX2 clone, picked at
// load time.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MT_EXACT_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define MT_EXACT_CLONES
#endif

using d4 = double __attribute__((vector_size(32)));
using f4 = float __attribute__((vector_size(16)));

// The vectors go by reference: by value, their ABI would differ between the clones.
inline void widen(d4& out, const float* p) {
  f4 v;
  std::memcpy(&v, p, sizeof v);
  out = __builtin_convertvector(v, d4);
}

/// exact::dot of x and y (n elements) from lanes s, which hold the first n / 4 * 4
/// products.
inline float finish_row(const d4& s, const float* x, const float* y, std::size_t n) {
  double l[4] = {s[0], s[1], s[2], s[3]};
  return exact::finish_dot(l, x, 1, y, 1, n);
}

/// One tile of exact_dot_rows: rows r[0..4) of w against S activation rows from a (rows
/// of `in` elements), into z (rows of `out`).
template <std::size_t S>
[[gnu::always_inline]] inline void dot_tile(const float* r, const float* a, std::size_t in,
                                            float* z, std::size_t out) {
  d4 acc[S][4] = {};
  for (std::size_t i = 0; i + 4 <= in; i += 4) {
    d4 x[S], y;
    for (std::size_t s = 0; s < S; ++s) widen(x[s], a + s * in + i);
    for (std::size_t k = 0; k < 4; ++k) {
      widen(y, r + k * in + i);
      for (std::size_t s = 0; s < S; ++s) acc[s][k] += y * x[s];
    }
  }
  for (std::size_t s = 0; s < S; ++s) {
    for (std::size_t k = 0; k < 4; ++k) {
      z[s * out + k] = finish_row(acc[s][k], r + k * in, a + s * in, in);
    }
  }
}

}  // namespace

// In tiles of four rows by two samples, the four rows staying in cache while every
// sample passes.
MT_EXACT_CLONES void exact_dot_rows(const float* w, const float* a, std::size_t m, std::size_t in,
                                    std::size_t out, float* z) {
  constexpr std::size_t S = 2;
  std::size_t j = 0;
  for (; j + 4 <= out; j += 4) {
    std::size_t s = 0;
    for (; s + S <= m; s += S) dot_tile<S>(w + j * in, a + s * in, in, z + s * out + j, out);
    for (; s < m; ++s) dot_tile<1>(w + j * in, a + s * in, in, z + s * out + j, out);
  }
  for (; j < out; ++j) {
    for (std::size_t s = 0; s < m; ++s)
      z[s * out + j] = exact::dot(w + j * in, 1, a + s * in, 1, in);
  }
}

// Four columns at once: vector lane t is column i + t, the four vectors exact::dot's lanes.
MT_EXACT_CLONES void exact_dot_cols(const float* d, const float* w, std::size_t in, std::size_t out,
                                    float* dp) {
  std::size_t i = 0;
  for (; i + 4 <= in; i += 4) {
    d4 l[4] = {}, y;
    std::size_t j = 0;
    for (; j + 4 <= out; j += 4) {
      for (std::size_t k = 0; k < 4; ++k) {
        widen(y, w + (j + k) * in + i);
        l[k] += y * static_cast<double>(d[j + k]);
      }
    }
    for (std::size_t k = 0; j < out; ++j, ++k) {
      widen(y, w + j * in + i);
      l[k] += y * static_cast<double>(d[j]);
    }
    const f4 r = __builtin_convertvector((l[0] + l[1]) + (l[2] + l[3]), f4);
    std::memcpy(dp + i, &r, sizeof r);
  }
  for (; i < in; ++i) dp[i] = exact::dot(d, 1, w + i, in, out);
}

mlp::batch_stats mlp::forward(const std::vector<float>& params, const std::uint8_t* y,
                              std::size_t m) {
  const std::size_t L = shape_.layers();
  for (std::size_t l = 0; l < L; ++l) {
    const std::size_t in = shape_.dims[l], out = shape_.dims[l + 1];
    const float* w = params.data() + shape_.weight_offset(l);
    const float* b = params.data() + shape_.bias_offset(l);
    float* z = acts_[l + 1].data();
    if (exact_) {
      exact_dot_rows(w, acts_[l].data(), m, in, out, z);
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
        for (std::size_t s = 0; s < m; ++s) exact_dot_cols(dl + s * out, w, in, out, dp + s * in);
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
