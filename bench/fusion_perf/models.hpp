// SPDX-License-Identifier: Apache-2.0
// Gradient tensor lists of real models, in registration (forward) order, as element
// counts of float32 tensors: ResNet-50 (torchvision layout: 161 parameter tensors,
// 25,557,032 parameters), BERT-base (embeddings, 12 encoder layers of 16 tensors, pooler:
// 199 tensors, 109,482,240 parameters; fewer layers on request), and N x 4 KiB.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace gradsync::bench {

struct model {
  std::string name;
  std::vector<std::size_t> counts;  // registration order

  std::size_t params() const {
    std::size_t s = 0;
    for (auto c : counts) s += c;
    return s;
  }
};

/// torchvision resnet50: conv1+bn1, layers [3, 4, 6, 3] of bottlenecks (1x1, 3x3, 1x1
/// convolutions without bias, each followed by a batch norm with weight and bias; the
/// first block of each layer has a downsample conv + bn), then fc (weight, bias).
inline model resnet50() {
  model m{"resnet50", {}};
  auto conv = [&](std::size_t in, std::size_t out, std::size_t k) {
    m.counts.push_back(in * out * k * k);
  };
  auto bn = [&](std::size_t c) {
    m.counts.push_back(c);
    m.counts.push_back(c);
  };
  conv(3, 64, 7);
  bn(64);
  std::size_t in = 64;
  const std::size_t blocks[] = {3, 4, 6, 3}, widths[] = {64, 128, 256, 512};
  for (int l = 0; l < 4; ++l) {
    const std::size_t w = widths[l], out = 4 * w;
    for (std::size_t b = 0; b < blocks[l]; ++b) {
      conv(in, w, 1);
      bn(w);
      conv(w, w, 3);
      bn(w);
      conv(w, out, 1);
      bn(out);
      if (b == 0) {
        conv(in, out, 1);
        bn(out);
      }
      in = out;
    }
  }
  m.counts.push_back(2048 * 1000);
  m.counts.push_back(1000);
  return m;
}

/// bert-base-uncased: word/position/token-type embeddings + LayerNorm, `layers` encoder
/// layers (q, k, v, attention output, LayerNorm, intermediate, output, LayerNorm; each
/// dense layer with weight and bias), pooler.
inline model bert_base(std::size_t layers = 12) {
  model m{layers == 12 ? "bert-base" : "bert-base-" + std::to_string(layers) + "L", {}};
  const std::size_t h = 768, ff = 3072;
  m.counts = {30522 * h, 512 * h, 2 * h, h, h};
  for (std::size_t l = 0; l < layers; ++l) {
    for (int k = 0; k < 4; ++k) {  // query, key, value, attention output dense
      m.counts.push_back(h * h);
      m.counts.push_back(h);
    }
    m.counts.push_back(h);  // attention LayerNorm
    m.counts.push_back(h);
    m.counts.push_back(h * ff);  // intermediate
    m.counts.push_back(ff);
    m.counts.push_back(ff * h);  // output
    m.counts.push_back(h);
    m.counts.push_back(h);  // output LayerNorm
    m.counts.push_back(h);
  }
  m.counts.push_back(h * h);  // pooler
  m.counts.push_back(h);
  return m;
}

/// n tensors of 4 KiB (1024 floats).
inline model small_tensors(std::size_t n = 1000) {
  return {std::to_string(n) + "x4KiB", std::vector<std::size_t>(n, 1024)};
}

}  // namespace gradsync::bench
