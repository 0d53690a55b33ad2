// SPDX-License-Identifier: Apache-2.0
// Top-k by magnitude (compress::topk): the k elements of largest |x|, ties going to the
// lower index, so the choice is a function of the values alone. One pass over the data
// in the common case: a strided sample fixes a threshold that admits about 2k candidates,
// one pass collects them, and an exact selection among the candidates decides (when the
// sample was unlucky and fewer than k pass, the threshold drops and the pass repeats).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gradsync/config.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/kernels/cpu_features.hpp"
#include "gradsync/kernels/magnitude.hpp"

#if GRADSYNC_HOST_AVX2
#include <immintrin.h>
#endif

namespace gradsync::kernels {

/// The buffers of topk_indices, kept by the caller from call to call (compress::topk keeps
/// one per bucket): fresh megabyte-sized vectors cost more in page faults than the pass.
template <class T>
struct topk_scratch {
  std::vector<magnitude_key_t<T>> sample, keys;
  std::vector<std::pair<magnitude_key_t<T>, std::uint32_t>> cand;
};

namespace detail {
#if GRADSYNC_HOST_AVX2
// passing16 on 32-byte vectors (inlined into collect_avx2, whose target it shares).
__attribute__((target("avx2"))) inline std::uint32_t passing16_avx2(const float* v, int lim) {
  const __m256i abs = _mm256_set1_epi32(0x7fffffff), l = _mm256_set1_epi32(lim);
  std::uint32_t m = 0;
  for (std::size_t q = 0; q < 2; ++q) {
    const __m256i k =
        _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + 8 * q)), abs);
    m |= static_cast<std::uint32_t>(
             _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(k, l))))
         << (8 * q);
  }
  return m;
}
#endif

// The bits j of a 16-element chunk whose key reaches `threshold`. Floats: SSE2 (or, in
// the AVX2 build, AVX2) compares and movemasks; keys < 2^31, so a signed compare orders
// them. The generic loop for double.
template <bool Avx2, class T>
GRADSYNC_ALWAYS_INLINE std::uint32_t passing16(const T* GRADSYNC_RESTRICT v,
                                               magnitude_key_t<T> threshold) {
#if GRADSYNC_HOST_SSE2
  if constexpr (std::is_same_v<T, float>) {
    // key >= threshold <=> key > threshold - 1 (threshold >= 1 here: 0 takes everything).
    const int lim = static_cast<int>(threshold) - 1;
#if GRADSYNC_HOST_AVX2
    if constexpr (Avx2) return passing16_avx2(v, lim);
#endif
    const __m128i abs = _mm_set1_epi32(0x7fffffff), l = _mm_set1_epi32(lim);
    std::uint32_t m = 0;
    for (std::size_t q = 0; q < 4; ++q) {
      const __m128i k =
          _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + 4 * q)), abs);
      m |= static_cast<std::uint32_t>(_mm_movemask_ps(_mm_castsi128_ps(_mm_cmpgt_epi32(k, l))))
           << (4 * q);
    }
    return m;
  }
#endif
  std::uint32_t m = 0;
  for (std::uint32_t j = 0; j < 16; ++j)
    m |= static_cast<std::uint32_t>(magnitude_key(v[j]) >= threshold) << j;
  return m;
}

// One candidate pass: (key, i) of every src[i] whose key reaches `threshold`, in index
// order. Chunks of 64: a vectorised mask of the keys that pass, then the set bits
// (about 1.3 % of the elements). Four slots are written for every chunk and the count
// moves by the bits: a loop per candidate mispredicts its exit at this density; only a
// chunk with more than four (about 0.2 % of them) loops. With `add` (first pass with a
// carried residual): src[i] += add[i] as it goes, so the sum is read and written once.
template <bool Avx2, class T>
GRADSYNC_ALWAYS_INLINE void collect_body(
    std::vector<std::pair<magnitude_key_t<T>, std::uint32_t>>& cand, T* GRADSYNC_RESTRICT src,
    const T* GRADSYNC_RESTRICT add, std::size_t count, magnitude_key_t<T> threshold) {
  using K = magnitude_key_t<T>;
  constexpr std::size_t w = 64, slots = 4;
  const std::size_t body = count - count % w;
  std::size_t pos = 0;
  cand.resize(std::max<std::size_t>(cand.capacity(), 1024));
  for (std::size_t i = 0; i < body; i += w) {
    if (add) {
      for (std::size_t j = 0; j < w; ++j) src[i + j] += add[i + j];
    }
    std::uint64_t m = ~std::uint64_t{0};
    if (threshold != K{0}) {
      m = 0;
      for (std::size_t q = 0; q < w; q += 16)
        m |= static_cast<std::uint64_t>(passing16<Avx2>(src + i + q, threshold)) << q;
    }
    if (pos + w > cand.size()) cand.resize(2 * cand.size() + w);
    auto* out = cand.data() + pos;
    const std::size_t pc = static_cast<std::size_t>(std::popcount(m));
    for (std::size_t s = 0; s < slots; ++s) {  // an empty mask's slots read src[i]
      const std::size_t j = i + (static_cast<std::size_t>(std::countr_zero(m)) & (w - 1));
      out[s] = {magnitude_key(src[j]), static_cast<std::uint32_t>(j)};
      m &= m - 1;
    }
    for (out += slots; m; m &= m - 1) {
      const std::size_t j = i + static_cast<std::size_t>(std::countr_zero(m));
      *out++ = {magnitude_key(src[j]), static_cast<std::uint32_t>(j)};
    }
    pos += pc;
  }
  cand.resize(pos);
  for (std::size_t i = body; i < count; ++i) {
    if (add) src[i] += add[i];
    const K key = magnitude_key(src[i]);
    if (key >= threshold) cand.emplace_back(key, static_cast<std::uint32_t>(i));
  }
}

template <class T>
void collect_generic(std::vector<std::pair<magnitude_key_t<T>, std::uint32_t>>& cand, T* src,
                     const T* add, std::size_t count, magnitude_key_t<T> threshold) {
  collect_body<false>(cand, src, add, count, threshold);
}
#if GRADSYNC_HOST_AVX2
template <class T>
__attribute__((target("avx2"))) void collect_avx2(
    std::vector<std::pair<magnitude_key_t<T>, std::uint32_t>>& cand, T* src, const T* add,
    std::size_t count, magnitude_key_t<T> threshold) {
  collect_body<true>(cand, src, add, count, threshold);
}
#endif

template <class T>
void collect(std::vector<std::pair<magnitude_key_t<T>, std::uint32_t>>& cand, T* src, const T* add,
             std::size_t count, magnitude_key_t<T> threshold) {
#if GRADSYNC_HOST_AVX2
  if (has_avx2()) return collect_avx2(cand, src, add, count, threshold);
#endif
  collect_generic(cand, src, add, count, threshold);
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
  // Threshold from a strided sample of about 16384 keys: of them, about ks = k * sample /
  // count lie above the k-th largest key; taking rank ks + 4 sqrt(ks) (4 sigma of that
  // count) admits about 1.3k candidates at k = 1 % (1.7k at 0.1 %), and fewer than k
  // with a chance of about 3e-5. Each miss doubles the rank, down to the smallest key.
  const std::size_t stride = std::max<std::size_t>(1, count / 16384);
  auto& sample = ws.sample;
  sample.clear();
  for (std::size_t i = 0; i < count; i += stride) {
    sample.push_back(magnitude_key(add ? T(x[i] + add[i]) : x[i]));
  }
  const double ks =
      static_cast<double>(k) * static_cast<double>(sample.size()) / static_cast<double>(count);
  std::size_t want =
      std::min(sample.size() - 1, static_cast<std::size_t>(ks + 4 * std::sqrt(ks)) + 1);
  auto& cand = ws.cand;
  cand.reserve(2 * k);
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
  // Larger key first; equal keys: lower index first. The k-th largest key decides: every
  // candidate above it is taken, and of those equal to it the first k - above in index
  // order (the candidates are in index order, so the scan emits idx ascending). The
  // selection runs on the bare keys: half the bytes of (key, index) pairs, and a plain
  // integer compare.
  auto& keys = ws.keys;
  keys.resize(cand.size());
  for (std::size_t j = 0; j < cand.size(); ++j) keys[j] = cand[j].first;
  std::nth_element(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(k - 1), keys.end(),
                   std::greater<>());
  const K kth = keys[k - 1];
  const std::size_t above = static_cast<std::size_t>(
      std::count_if(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(k - 1),
                    [&](K v) { return v > kth; }));
  std::size_t ties = k - above, j = 0;
  for (const auto& c : cand) {
    if (c.first > kth || (c.first == kth && ties > 0 && ties--)) idx[j++] = c.second;
  }
}

/// The same with buffers of its own.
template <class T>
void topk_indices(std::uint32_t* idx, const T* x, std::size_t count, std::size_t k) {
  topk_scratch<T> ws;
  // Without `add` nothing is written through x.
  topk_indices(idx, const_cast<T*>(x), count, k, ws, static_cast<const T*>(nullptr));
}

/// The first position of a top-k block (k indices, from another rank) that breaks what
/// every encoder sends, indices below `count` and strictly ascending (so distinct); k
/// when there is none. The decode checks each block before it writes anything.
inline std::size_t topk_first_bad(const std::uint32_t* idx, std::size_t k, std::size_t count) {
  for (std::size_t j = 0; j < k; ++j) {
    if (idx[j] >= count || (j > 0 && idx[j] <= idx[j - 1])) return j;
  }
  return k;
}

/// errc::mismatch on `rank`: `peer`'s top-k block holds `index` at `position`, outside a
/// bucket of `count` elements or (`previous`: the index before it) not above the one
/// before it. Every rank decodes the same allgathered blocks, so each raises this same
/// error in the same call, with no message more.
inline error topk_index_error(std::size_t rank, std::size_t peer, std::size_t position,
                              std::uint32_t index, std::size_t count,
                              const std::uint32_t* previous = nullptr) {
  const std::string where = "index " + std::to_string(index) + " at position " +
                            std::to_string(position) + " of its top-k block, ";
  const std::string what = index >= count
                               ? "outside the bucket's " + std::to_string(count) + " elements"
                               : "not above the index before it (" + std::to_string(*previous) +
                                     "; blocks hold distinct indices, ascending)";
  return error(errc::mismatch, {rank, peer},
               "rank " + std::to_string(peer) + " sent " + where + what +
                   " (a corrupt or mismatched peer; nothing was decoded)");
}

}  // namespace gradsync::kernels
