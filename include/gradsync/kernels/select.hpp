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

namespace gradsync::kernels {

/// The unsigned integer whose order is the order of |x| (its sign bit cleared; a NaN
/// sorts above Inf, so a NaN is always sent rather than silently dropped).
template <class T>
using magnitude_key_t = std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>;

template <class T>
GRADSYNC_HOST_DEVICE inline magnitude_key_t<T> magnitude_key(T v) {
  static_assert(std::is_floating_point_v<T>, "magnitude_key: float or double");
  magnitude_key_t<T> k;
  std::memcpy(&k, &v, sizeof k);
  return k & (~magnitude_key_t<T>{0} >> 1);
}

/// idx[0..k) := the indices of the k largest |x[i]| (ties: lower index), ascending.
/// Needs k <= count < 2^32.
template <class T>
void topk_indices(std::uint32_t* idx, const T* x, std::size_t count, std::size_t k) {
  using K = magnitude_key_t<T>;
  if (k == 0) return;
  if (k >= count) {
    for (std::size_t i = 0; i < count; ++i) idx[i] = static_cast<std::uint32_t>(i);
    return;
  }
  // Threshold from a sample of at most 4096 * 16 keys: the key that about 2k of count
  // reach. Each miss halves the sampled rank, down to the smallest key (everything).
  const std::size_t stride = std::max<std::size_t>(1, count / 65536);
  std::vector<K> sample;
  sample.reserve(count / stride + 1);
  for (std::size_t i = 0; i < count; i += stride) sample.push_back(magnitude_key(x[i]));
  std::sort(sample.begin(), sample.end(), std::greater<>());
  std::size_t want = std::min(sample.size() - 1, 2 * k * sample.size() / count + 1);
  std::vector<std::pair<K, std::uint32_t>> cand;
  for (;;) {
    const K threshold = want + 1 >= sample.size() ? K{0} : sample[want];
    cand.clear();
    for (std::size_t i = 0; i < count; ++i) {
      const K key = magnitude_key(x[i]);
      if (key >= threshold) cand.emplace_back(key, static_cast<std::uint32_t>(i));
    }
    if (cand.size() >= k || threshold == K{0}) break;
    want = std::min(sample.size() - 1, 2 * want + 1);
  }
  // Larger key first; equal keys: lower index first (a strict total order).
  auto first = [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  std::nth_element(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(k - 1), cand.end(),
                   first);
  for (std::size_t j = 0; j < k; ++j) idx[j] = cand[j].second;
  std::sort(idx, idx + k);
}

}  // namespace gradsync::kernels
