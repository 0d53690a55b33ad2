// SPDX-License-Identifier: Apache-2.0
// The trainer's only source of randomness: xoshiro256** seeded through splitmix64. Its
// whole state is four words, saved in every checkpoint; the data order of an epoch is a
// Fisher-Yates shuffle drawn from it, so the order depends on the seed and the epoch
// only, never on the number of ranks.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

namespace mini_trainer {

class rng {
 public:
  using state_type = std::array<std::uint64_t, 4>;

  explicit rng(std::uint64_t seed = 0) {
    std::uint64_t x = seed;
    for (auto& w : s_) w = splitmix64(x);
  }

  std::uint64_t next() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  /// Uniform in [0, bound) without modulo bias (Lemire's multiply-shift with rejection).
  std::uint64_t below(std::uint64_t bound) {
    for (;;) {
      const unsigned __int128 m = static_cast<unsigned __int128>(next()) * bound;
      const auto low = static_cast<std::uint64_t>(m);
      if (low >= bound || low >= (0 - bound) % bound) return static_cast<std::uint64_t>(m >> 64);
    }
  }

  /// Uniform float in [-a, a).
  float uniform(float a) {
    const double u = static_cast<double>(next() >> 11) * 0x1.0p-53;  // [0, 1)
    return static_cast<float>((2.0 * u - 1.0) * a);
  }

  /// A random permutation of 0 .. n-1.
  std::vector<std::uint32_t> permutation(std::size_t n) {
    std::vector<std::uint32_t> p(n);
    std::iota(p.begin(), p.end(), 0u);
    for (std::size_t i = n; i > 1; --i) std::swap(p[i - 1], p[below(i)]);
    return p;
  }

  const state_type& state() const { return s_; }
  void set_state(const state_type& s) { s_ = s; }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static std::uint64_t splitmix64(std::uint64_t& x) {
    std::uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

  state_type s_{};
};

}  // namespace mini_trainer
