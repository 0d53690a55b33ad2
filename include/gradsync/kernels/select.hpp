// SPDX-License-Identifier: Apache-2.0
// Top-k by magnitude (compress::topk): the k elements of largest |x|, ties going to the
// lower index, so the choice is a function of the values alone. One pass over the data
// in the common case: a strided sample fixes a threshold that admits about 2k candidates,
// one pass collects them, and an exact selection among the candidates decides (when the
// sample was unlucky and fewer than k pass, the threshold drops and the pass repeats).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>
#include <utility>
#include <vector>

#include "gradsync/config.hpp"
#include "gradsync/kernels/magnitude.hpp"

namespace gradsync::kernels {

/// The buffers of topk_indices, kept by the caller from call to call (compress::topk keeps
/// one per bucket): fresh megabyte-sized vectors cost more in page faults than the pass.
template <class T>
struct topk_scratch {
  std::vector<magnitude_key_t<T>> sample;
  std::vector<std::pair<magnitude_key_t<T>, std::uint32_t>> cand, order;
};

namespace detail {
// One candidate pass: (key, i) of every src[i] whose key reaches `threshold`, in index
// order. Chunks of 16: a vectorised test whether any key passes, the scalar push only
// for the few chunks where one does. With `add` (first pass with a carried residual):
// src[i] += add[i] as it goes, so the sum is read and written once.
template <class T>
void collect(std::vector<std::pair<magnitude_key_t<T>, std::uint32_t>>& cand,
             T* GRADSYNC_RESTRICT src, const T* GRADSYNC_RESTRICT add, std::size_t count,
             magnitude_key_t<T> threshold) {
  using K = magnitude_key_t<T>;
  cand.clear();
  constexpr std::size_t w = 16;
  const std::size_t body = count - count % w;
  auto push = [&](std::size_t i) {
    const K key = magnitude_key(src[i]);
    if (key >= threshold) cand.emplace_back(key, static_cast<std::uint32_t>(i));
  };
  for (std::size_t i = 0; i < body; i += w) {
    K any = 0;
    if (add) {
      for (std::size_t j = 0; j < w; ++j) {
        src[i + j] += add[i + j];
        any |= static_cast<K>(magnitude_key(src[i + j]) >= threshold);
      }
    } else {
      for (std::size_t j = 0; j < w; ++j)
        any |= static_cast<K>(magnitude_key(src[i + j]) >= threshold);
    }
    if (any) {
      for (std::size_t j = 0; j < w; ++j) push(i + j);
    }
  }
  for (std::size_t i = body; i < count; ++i) {
    if (add) src[i] += add[i];
    push(i);
  }
}
}  // namespace detail

/// idx[0..k) := the indices of the k largest |v[i]| (ties: lower index), ascending, where
/// v = x, or with `add`: v = x + add, left in x (the pass that reads x adds `add` in, so
/// error feedback's residual and the gradient are read once).
/// Needs k <= count < 2^32.
template <class T>
void topk_indices(std::uint32_t* idx, T* x, std::size_t count, std::size_t k, topk_scratch<T>& ws,
                  const T* add) {
  using K = magnitude_key_t<T>;
  if (k >= count || k == 0) {
    if (add) {
      for (std::size_t i = 0; i < count; ++i) x[i] += add[i];
    }
    for (std::size_t i = 0; i < k; ++i) idx[i] = static_cast<std::uint32_t>(i);
    return;
  }
  // Threshold from a strided sample of about 8192 keys: the key that about 2k of count
  // reach (rank 2k/count of the sample: off by a third at 3 sigma for k = 1 %). Each miss
  // doubles the sampled rank, down to the smallest key (everything).
  const std::size_t stride = std::max<std::size_t>(1, count / 8192);
  auto& sample = ws.sample;
  sample.clear();
  for (std::size_t i = 0; i < count; i += stride) {
    sample.push_back(magnitude_key(add ? T(x[i] + add[i]) : x[i]));
  }
  std::size_t want = std::min(sample.size() - 1, 2 * k * sample.size() / count + 1);
  auto& cand = ws.cand;
  cand.reserve(3 * k);
  for (bool first_pass = true;; first_pass = false) {
    K threshold = 0;
    if (want + 1 < sample.size()) {
      std::nth_element(sample.begin(), sample.begin() + static_cast<std::ptrdiff_t>(want),
                       sample.end(), std::greater<>());
      threshold = sample[want];
    }
    detail::collect(cand, x, first_pass ? add : nullptr, count, threshold);
    if (cand.size() >= k || threshold == K{0}) break;
    want = std::min(sample.size() - 1, 2 * want + 1);
  }
  // Larger key first; equal keys: lower index first (a strict total order). The k-th
  // candidate in that order decides; the candidates are in index order already, so one
  // scan keeps those at or before it, ascending.
  auto first = [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  auto& order = ws.order;
  order.assign(cand.begin(), cand.end());
  std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k - 1), order.end(),
                   first);
  const auto kth = order[k - 1];
  std::size_t j = 0;
  for (const auto& c : cand) {
    if (!first(kth, c)) idx[j++] = c.second;
  }
}

/// The same with buffers of its own.
template <class T>
void topk_indices(std::uint32_t* idx, const T* x, std::size_t count, std::size_t k) {
  topk_scratch<T> ws;
  // Without `add` nothing is written through x.
  topk_indices(idx, const_cast<T*>(x), count, k, ws, static_cast<const T*>(nullptr));
}

}  // namespace gradsync::kernels
