// SPDX-License-Identifier: Apache-2.0
// The MLP's layer widths and where each tensor lives in the flat parameter arena
// (W1, b1, W2, b2, ...): shared by the CPU model, checkpoints and the CUDA trainer.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <gradsync/fusion/tensor.hpp>

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
    for (std::size_t i = 0; i < dims.size(); ++i) {
      if (i) s += '-';
      s += std::to_string(dims[i]);
    }
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

/// He-uniform weights from `seed`, zero biases; the same on every rank and device.
inline void init_params(const mlp_shape& s, std::uint64_t seed, std::vector<float>& p) {
  p.assign(s.param_count(), 0.0f);
  rng r(seed ^ 0x5eed'1417'0000'0001ull);
  for (std::size_t l = 0; l < s.layers(); ++l) {
    const float a = std::sqrt(6.0f / static_cast<float>(s.dims[l]));
    float* w = p.data() + s.weight_offset(l);
    for (std::size_t i = 0; i < s.dims[l + 1] * s.dims[l]; ++i) w[i] = r.uniform(a);
  }
}

}  // namespace mini_trainer
