// SPDX-License-Identifier: Apache-2.0
// Top-k by magnitude as a GPU does it (kernels/select.cuh): a radix select finds the k-th
// largest magnitude key eight bits at a time (a histogram of the keys still in the
// running per pass, then the bin that holds the k-th), and a stable compaction keeps
// every key above it plus the first of the keys equal to it in index order: the rule of
// kernels/select.hpp (ties to the lower index), so both pick the same indices. These are
// the steps shared by the kernels and the CPU tests that check them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gradsync/config.hpp"
#include "gradsync/kernels/magnitude.hpp"

namespace gradsync::kernels {

/// Bins of one radix pass (8 bits of the key).
inline constexpr unsigned radix_bins = 256;

/// Passes over a key of type K, most significant byte first.
template <class K>
inline constexpr unsigned radix_passes = sizeof(K);

/// Where a radix select stands: the keys with (key & mask) == prefix are still in the
/// running, and the `want`-th largest of them is the k-th largest of all.
template <class K>
struct radix_state {
  K prefix = 0, mask = 0;
  std::size_t want = 0;  ///< starts at k (1-based rank among the keys in the running)
};

/// The bit offset of pass p's digit.
template <class K>
GRADSYNC_HOST_DEVICE inline unsigned radix_shift(unsigned pass) {
  return 8u * (radix_passes<K> - 1 - pass);
}

/// True when `key` is still in the running, and then its digit in pass p is counted.
template <class K>
GRADSYNC_HOST_DEVICE inline bool radix_in_running(K key, const radix_state<K>& s) {
  return (key & s.mask) == s.prefix;
}
/// The digit of `key` in pass p.
template <class K>
GRADSYNC_HOST_DEVICE inline unsigned radix_digit(K key, unsigned pass) {
  return static_cast<unsigned>(key >> radix_shift<K>(pass)) & (radix_bins - 1);
}

/// After pass p's histogram of the running keys' digits: the bin holding the want-th
/// largest joins the prefix, and `want` drops by the keys of the bins above it. After the
/// last pass, prefix is the k-th largest key and want is how many keys equal to it are
/// taken (the first ones in index order).
template <class K, class Count>
GRADSYNC_HOST_DEVICE inline void radix_narrow(radix_state<K>& s, const Count* hist, unsigned pass) {
  const unsigned shift = radix_shift<K>(pass);
  for (unsigned b = radix_bins; b-- > 0;) {
    const auto n = static_cast<std::size_t>(hist[b]);
    if (n >= s.want || b == 0) {
      s.prefix |= static_cast<K>(b) << shift;
      s.mask |= static_cast<K>(radix_bins - 1) << shift;
      return;
    }
    s.want -= n;
  }
}

/// True when top-k keeps an element of key `key` whose rank among the keys equal to
/// `kth` (in index order) is `tie_rank`; `ties` of those are kept.
template <class K>
GRADSYNC_HOST_DEVICE inline bool topk_keeps(K key, K kth, std::size_t tie_rank, std::size_t ties) {
  return key > kth || (key == kth && tie_rank < ties);
}

}  // namespace gradsync::kernels
