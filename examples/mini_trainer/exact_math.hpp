// SPDX-License-Identifier: Apache-2.0
// The per-element math of the MLP, written once for the CPU trainer (model.hpp) and the
// CUDA trainer's kernels (examples/cuda_trainer), so that --exact-grads gives the same
// bits on both. Every function here is deterministic across compilers and devices:
//  - exact_dot sums float products in double: a product of two floats is exact in double,
//    so a fused multiply-add and a separate multiply and add round the same way (nvcc
//    contracts, g++ may not); the lanes and their order are fixed here, not by a BLAS;
//  - exact_exp uses explicit fma() and a fixed polynomial, not the libm / CUDA exp (whose
//    last bits differ);
//  - quantize rounds to nearest-even with rint, which IEEE defines bit for bit.
// Outside exact mode the CPU trainer keeps OpenBLAS and float exp (faster; the CUDA
// trainer uses cuBLAS and expf there), and the two trainers agree only statistically.
#pragma once

#include <math.h>

#include <cstddef>

#if defined(__CUDACC__)
#define MT_HD __host__ __device__
#else
#define MT_HD
#endif

namespace mini_trainer::exact {

/// Grid of exact-mode activations and deltas: 2^-6; activations in [0, 2), deltas in
/// [-2, 2] (model.hpp explains why the gradient sums are then exact).
inline constexpr float step = 0x1.0p-6f;
inline constexpr float act_hi = 2.0f - 0x1.0p-6f;
inline constexpr float delta_lim = 2.0f;

/// x rounded to the 2^-6 grid (nearest, ties to even) and clamped to [lo, hi].
MT_HD inline float quantize(float x, float lo, float hi) {
  const float q = rintf(x * 0x1.0p6f) * step;
  return q < lo ? lo : (q > hi ? hi : q);
}

/// The end of dot: lanes `l` hold the products of the first n / 4 * 4 elements; the rest
/// go to lanes 0, 1, 2, then (l0 + l1) + (l2 + l3), rounded to float once. model.cpp's
/// tiled dots end through it too.
MT_HD inline float finish_dot(double (&l)[4], const float* x, std::size_t incx, const float* y,
                              std::size_t incy, std::size_t n) {
  for (std::size_t i = n / 4 * 4, k = 0; i < n; ++i, ++k) {
    l[k] += static_cast<double>(x[i * incx]) * static_cast<double>(y[i * incy]);
  }
  return static_cast<float>((l[0] + l[1]) + (l[2] + l[3]));
}

/// sum_i x[i * incx] * y[i * incy] in four double lanes (lane i % 4), added as
/// (l0 + l1) + (l2 + l3) and rounded to float once: the same bits on every device.
MT_HD inline float dot(const float* x, std::size_t incx, const float* y, std::size_t incy,
                       std::size_t n) {
  double l[4] = {0.0, 0.0, 0.0, 0.0};
  for (std::size_t i = 0; i + 4 <= n; i += 4) {
    for (std::size_t k = 0; k < 4; ++k) {
      l[k] += static_cast<double>(x[(i + k) * incx]) * static_cast<double>(y[(i + k) * incy]);
    }
  }
  return finish_dot(l, x, incx, y, incy, n);
}

/// e^x for x <= 0 (softmax arguments), to about 1e-15 relative, from explicit fma():
/// x = k ln2 + r with |r| <= ln2 / 2, a degree-13 Taylor polynomial in r, times 2^k.
MT_HD inline double exp_nonpositive(double x) {
  if (x < -708.0) return 0.0;
  constexpr double ln2_hi = 0x1.62e42fefa39efp-1, ln2_lo = 0x1.abc9e3b39803fp-56;
  const double k = rint(x * 0x1.71547652b82fep0);  // x / ln2
  const double r = fma(-k, ln2_lo, fma(-k, ln2_hi, x));
  double p = 1.0 / 6227020800.0;  // 1/13!
  const double inv_fact[13] = {1.0 / 479001600.0,
                               1.0 / 39916800.0,
                               1.0 / 3628800.0,
                               1.0 / 362880.0,
                               1.0 / 40320.0,
                               1.0 / 5040.0,
                               1.0 / 720.0,
                               1.0 / 120.0,
                               1.0 / 24.0,
                               1.0 / 6.0,
                               0.5,
                               1.0,
                               1.0};
  for (double c : inv_fact) p = fma(p, r, c);
  return ldexp(p, static_cast<int>(k));
}

/// Softmax cross-entropy of one sample's k logits: overwrites `row` with the
/// probabilities, returns the sample's loss; `*hit` = the argmax is the label.
/// Exact mode: exponentials and their sum in double (exp_nonpositive), probabilities
/// rounded to float once. Otherwise the CPU trainer's float arithmetic.
MT_HD inline double softmax_xent(float* row, std::size_t k, std::size_t label, bool exact,
                                 bool* hit) {
  std::size_t arg = 0;
  for (std::size_t j = 1; j < k; ++j) arg = row[j] > row[arg] ? j : arg;
  const float mx = row[arg];
  *hit = arg == label;
  double sum = 0;
  if (exact) {
    // Each exponential is computed twice (for the sum, then for the probability) rather
    // than stored: any k, no scratch, and the same bits both times.
    auto e = [&](std::size_t j) {
      return exp_nonpositive(static_cast<double>(row[j]) - static_cast<double>(mx));
    };
    for (std::size_t j = 0; j < k; ++j) sum += e(j);
    const double e_label = e(label);
    for (std::size_t j = 0; j < k; ++j) row[j] = static_cast<float>(e(j) / sum);
    return log(sum) - log(e_label);
  }
  for (std::size_t j = 0; j < k; ++j) {
    row[j] = expf(row[j] - mx);
    sum += row[j];
  }
  const double loss = log(sum) - log(static_cast<double>(row[label]));
  const float inv = static_cast<float>(1.0 / sum);
  for (std::size_t j = 0; j < k; ++j) row[j] *= inv;
  return loss;
}

/// The output layer's delta for probability p of a class (is_label: its one-hot bit).
MT_HD inline float output_delta(float p, bool is_label, bool exact) {
  const float v = p - (is_label ? 1.0f : 0.0f);
  return exact ? quantize(v, -1.0f, 1.0f) : v;
}

/// A hidden unit's activation from its pre-activation z and bias b: ReLU, on the grid in
/// exact mode; the output layer's logits are z + b.
MT_HD inline float activation(float z, float b, bool hidden, bool exact) {
  float v = z + b;
  if (hidden) {
    v = v > 0.0f ? v : 0.0f;
    if (exact) v = quantize(v, 0.0f, act_hi);
  }
  return v;
}

/// The back-propagated delta through ReLU: zero where the activation a was zero.
MT_HD inline float relu_delta(float a, float d, bool exact) {
  const float v = a > 0.0f ? d : 0.0f;
  return exact ? quantize(v, -delta_lim, delta_lim) : v;
}

/// SGD with momentum for one weight, PyTorch convention: v = mu v + g; w -= lr v. Two
/// roundings each, never fused: nvcc would contract them into fma (the _rn intrinsics
/// forbid it), and the CPU build targets x86-64 without FMA, so g++ cannot.
MT_HD inline void sgd_momentum(float& w, float& v, float g, float lr, float mu) {
#if defined(__CUDA_ARCH__)
  v = __fadd_rn(__fmul_rn(mu, v), g);
  w = __fsub_rn(w, __fmul_rn(lr, v));
#else
  v = mu * v + g;
  w -= lr * v;
#endif
}

}  // namespace mini_trainer::exact
