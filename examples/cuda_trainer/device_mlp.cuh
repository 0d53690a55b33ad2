// SPDX-License-Identifier: Apache-2.0
// The CPU trainer's MLP (examples/mini_trainer/model.hpp) with everything in device
// memory: parameters, gradients and momentum in three flat arenas with the CPU layout
// (W1, b1, W2, b2, ...), activations and deltas per layer. Dense products go through
// cuBLAS; the per-element math is exact_math.hpp's, shared with the CPU trainer, so
// --exact-grads gives the same bits as the CPU trainer:
//  - forward and back-propagated products with the weights: one thread per (sample,
//    unit) runs exact::dot (fixed lanes and order, in double) in exact mode, cuBLAS
//    SGEMM otherwise;
//  - weight gradients: cuBLAS SGEMM in both modes (exact mode: every partial sum is on
//    a grid and exact, so cuBLAS's order cannot change a bit; pedantic math keeps it off
//    reduced-precision tensor cores all the same);
//  - bias gradients: one thread per unit, summing the samples in order like the CPU.
// All work is enqueued on one stream (the transport's), so the allreduces are ordered
// after the gradients they read and before the update that reads their result.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <gradsync/core/cuda_check.hpp>

#include "../mini_trainer/exact_math.hpp"
#include "../mini_trainer/shape.hpp"

namespace cuda_trainer {

namespace ex = mini_trainer::exact;

/// cuBLAS failures as exceptions naming the call.
inline void cublas_check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string(what) + " failed: cuBLAS status " +
                             std::to_string(static_cast<int>(s)));
  }
}

namespace kernels {

constexpr unsigned block = 256;

inline unsigned grid(std::size_t n) {
  return static_cast<unsigned>((n + block - 1) / block);
}

/// z[s][j] = act(W[j] . a[s] + b[j]) with exact::dot (exact mode).
__global__ void exact_linear(const float* w, const float* b, const float* a, float* z,
                             std::size_t m, std::size_t in, std::size_t out, bool hidden) {
  const std::size_t t = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (t >= m * out) return;
  const std::size_t s = t / out, j = t % out;
  z[t] = ex::activation(ex::dot(w + j * in, 1, a + s * in, 1, in), b[j], hidden, true);
}

/// z[s][j] = act(z[s][j] + b[j]) after cuBLAS wrote the products.
__global__ void bias_activation(const float* b, float* z, std::size_t m, std::size_t out,
                                bool hidden) {
  const std::size_t t = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (t >= m * out) return;
  z[t] = ex::activation(z[t], b[t % out], hidden, false);
}

/// Per sample: softmax cross-entropy over k logits (overwritten by the probabilities),
/// its loss and hit, and the output layer's delta.
__global__ void softmax_delta(float* p, float* d, const std::uint8_t* y, double* loss,
                              unsigned char* hit, std::size_t m, std::size_t k, bool exact) {
  const std::size_t s = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (s >= m) return;
  float* row = p + s * k;
  bool h = false;
  loss[s] = ex::softmax_xent(row, k, y[s], exact, &h);
  hit[s] = h;
  for (std::size_t j = 0; j < k; ++j) d[s * k + j] = ex::output_delta(row[j], j == y[s], exact);
}

/// gb[j] = scale * sum over samples of d[s][j], summed in sample order like the CPU.
__global__ void bias_grad(const float* d, float* gb, std::size_t m, std::size_t out, float scale) {
  const std::size_t j = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (j >= out) return;
  float acc = 0.0f;
  for (std::size_t s = 0; s < m; ++s) acc += d[s * out + j];
  gb[j] = acc * scale;
}

/// dp[s][i] = relu'(a) * (d[s] . W[:, i]) with exact::dot (exact mode).
__global__ void exact_backprop(const float* w, const float* d, const float* a, float* dp,
                               std::size_t m, std::size_t in, std::size_t out) {
  const std::size_t t = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (t >= m * in) return;
  const std::size_t s = t / in, i = t % in;
  dp[t] = ex::relu_delta(a[t], ex::dot(d + s * out, 1, w + i, in, out), true);
}

/// dp = relu'(a) * dp after cuBLAS wrote the products.
__global__ void relu_mask(const float* a, float* dp, std::size_t n) {
  const std::size_t t = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (t < n) dp[t] = ex::relu_delta(a[t], dp[t], false);
}

/// SGD with momentum over the whole parameter arena.
__global__ void sgd(float* w, float* v, const float* g, std::size_t n, float lr, float mu) {
  const std::size_t t = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (t < n) ex::sgd_momentum(w[t], v[t], g[t], lr, mu);
}

}  // namespace kernels

/// A device allocation of n T's, freed with the object.
template <class T>
class device_array {
 public:
  device_array() = default;
  explicit device_array(std::size_t n) : n_(n) {
    if (n) GRADSYNC_CUDA_CHECK(cudaMalloc(&p_, n * sizeof(T)));
  }
  device_array(const device_array&) = delete;
  device_array& operator=(const device_array&) = delete;
  device_array(device_array&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
  device_array& operator=(device_array&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  ~device_array() {
    if (p_) cudaFree(p_);
  }
  T* get() const { return p_; }
  std::size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

/// One rank's model on the device; every call is enqueued on `stream`.
class device_mlp {
 public:
  device_mlp(mini_trainer::mlp_shape shape, std::size_t max_batch, bool exact, cudaStream_t stream)
      : shape_(std::move(shape)), exact_(exact), max_batch_(max_batch), stream_(stream) {
    const std::size_t L = shape_.layers(), P = shape_.param_count();
    params_ = device_array<float>(P);
    grads_ = device_array<float>(P);
    momentum_ = device_array<float>(P);
    for (std::size_t l = 0; l <= L; ++l) {
      acts_.emplace_back(max_batch * shape_.dims[l]);
      deltas_.emplace_back(max_batch * shape_.dims[l]);
    }
    labels_ = device_array<std::uint8_t>(max_batch);
    loss_ = device_array<double>(max_batch);
    hit_ = device_array<unsigned char>(max_batch);
    cublas_check(cublasCreate(&blas_), "cublasCreate");
    cublas_check(cublasSetStream(blas_, stream_), "cublasSetStream");
    if (exact_) cublas_check(cublasSetMathMode(blas_, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
  }
  device_mlp(const device_mlp&) = delete;
  device_mlp& operator=(const device_mlp&) = delete;
  ~device_mlp() { cublasDestroy(blas_); }

  const mini_trainer::mlp_shape& shape() const { return shape_; }
  float* params() const { return params_.get(); }
  float* grads() const { return grads_.get(); }
  float* momentum() const { return momentum_.get(); }
  std::size_t param_count() const { return params_.size(); }
  float* input() const { return acts_[0].get(); }
  std::uint8_t* labels() const { return labels_.get(); }
  const double* losses() const { return loss_.get(); }
  const unsigned char* hits() const { return hit_.get(); }

  /// Forward over the m samples in input() / labels(): per-sample losses and hits in
  /// losses() / hits(), the output deltas ready for backward().
  void forward(std::size_t m) {
    check_batch(m);
    const std::size_t L = shape_.layers();
    for (std::size_t l = 0; l < L; ++l) {
      const std::size_t in = shape_.dims[l], out = shape_.dims[l + 1];
      const float* w = params() + shape_.weight_offset(l);
      const float* b = params() + shape_.bias_offset(l);
      const float* a = acts_[l].get();
      float* z = acts_[l + 1].get();
      const bool hidden = l + 1 < L;
      if (m == 0) continue;
      if (exact_) {
        kernels::exact_linear<<<kernels::grid(m * out), kernels::block, 0, stream_>>>(
            w, b, a, z, m, in, out, hidden);
      } else {
        // Z (m x out, row-major) = A W^T, i.e. column-major Z^T = W A^T.
        const float one = 1.0f, zero = 0.0f;
        cublas_check(cublasSgemm(blas_, CUBLAS_OP_T, CUBLAS_OP_N, int(out), int(m), int(in), &one,
                                 w, int(in), a, int(in), &zero, z, int(out)),
                     "cublasSgemm (forward)");
        kernels::bias_activation<<<kernels::grid(m * out), kernels::block, 0, stream_>>>(
            b, z, m, out, hidden);
      }
      GRADSYNC_CUDA_CHECK(cudaGetLastError());
    }
    if (m == 0) return;
    const std::size_t k = shape_.dims[L];
    kernels::softmax_delta<<<kernels::grid(m), kernels::block, 0, stream_>>>(
        acts_[L].get(), deltas_[L].get(), labels_.get(), loss_.get(), hit_.get(), m, k, exact_);
    GRADSYNC_CUDA_CHECK(cudaGetLastError());
  }

  /// Backward after forward(): the gradient of the summed loss times `scale` into
  /// grads(), last layer first; layer_done(l) once layer l's gradients are enqueued.
  template <class LayerDone>
  void backward(std::size_t m, float scale, LayerDone&& layer_done) {
    check_batch(m);
    const std::size_t L = shape_.layers();
    for (std::size_t l = L; l-- > 0;) {
      const std::size_t in = shape_.dims[l], out = shape_.dims[l + 1];
      const float* w = params() + shape_.weight_offset(l);
      float* gw = grads() + shape_.weight_offset(l);
      float* gb = grads() + shape_.bias_offset(l);
      const float* d = deltas_[l + 1].get();
      const float* a = acts_[l].get();
      // dW (out x in, row-major) = scale D^T A: column-major dW^T = scale A^T D.
      const float zero = 0.0f;
      if (m) {
        cublas_check(cublasSgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_T, int(in), int(out), int(m), &scale,
                                 a, int(in), d, int(out), &zero, gw, int(in)),
                     "cublasSgemm (weight gradient)");
      } else {
        GRADSYNC_CUDA_CHECK(cudaMemsetAsync(gw, 0, out * in * sizeof(float), stream_));
      }
      kernels::bias_grad<<<kernels::grid(out), kernels::block, 0, stream_>>>(d, gb, m, out, scale);
      GRADSYNC_CUDA_CHECK(cudaGetLastError());
      if (l > 0 && m) {
        float* dp = deltas_[l].get();
        if (exact_) {
          kernels::exact_backprop<<<kernels::grid(m * in), kernels::block, 0, stream_>>>(
              w, d, a, dp, m, in, out);
        } else {
          // Dprev (m x in) = D W: column-major Dprev^T = W^T D^T.
          const float one = 1.0f;
          cublas_check(cublasSgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_N, int(in), int(m), int(out), &one,
                                   w, int(in), d, int(out), &zero, dp, int(in)),
                       "cublasSgemm (back-propagation)");
          kernels::relu_mask<<<kernels::grid(m * in), kernels::block, 0, stream_>>>(a, dp, m * in);
        }
        GRADSYNC_CUDA_CHECK(cudaGetLastError());
      }
      layer_done(l);
    }
  }

  /// w -= lr (v = mu v + g) over every parameter.
  void update(float lr, float mu) {
    const std::size_t n = param_count();
    kernels::sgd<<<kernels::grid(n), kernels::block, 0, stream_>>>(params(), momentum(), grads(), n,
                                                                   lr, mu);
    GRADSYNC_CUDA_CHECK(cudaGetLastError());
  }

 private:
  void check_batch(std::size_t m) const {
    if (m > max_batch_) {
      throw std::invalid_argument("batch of " + std::to_string(m) + " samples exceeds the " +
                                  std::to_string(max_batch_) + " the model was sized for");
    }
  }

  mini_trainer::mlp_shape shape_;
  bool exact_;
  std::size_t max_batch_;
  cudaStream_t stream_;
  cublasHandle_t blas_ = nullptr;
  device_array<float> params_, grads_, momentum_;
  std::vector<device_array<float>> acts_, deltas_;  // acts_[0] = input; deltas_[l]: dLoss/dZ_l
  device_array<std::uint8_t> labels_;
  device_array<double> loss_;
  device_array<unsigned char> hit_;
};

}  // namespace cuda_trainer
