// SPDX-License-Identifier: Apache-2.0
// A 64-bit hash of a host buffer at memory speed, for result verification
// (check/verify.hpp): ranks compare the hashes of their results, so the function must be
// the same on every rank whatever its CPU. It is defined by the portable loop below; an
// AVX2 build of the same arithmetic (chosen at run time) gives the same bits.
//
// The bytes are read as 32-byte stripes of four little-endian u64 words w[0..3]. Stripe
// s of the buffer, with a per-stripe key k = key[l] + s * step[l] per lane l:
//   x = w[l] ^ k;   acc[l] += lo32(x) * hi32(x);   acc[l ^ 1] += w[l];
// (the multiply makes each stripe's contribution depend on its position, so swapped
// stripes change the hash; the plain add keeps every bit of w in it). Every 32 stripes
// (1 KiB) each lane is scrambled: acc = (acc ^ (acc >> 47)) * prime (odd, < 2^32). The
// tail (< 32 bytes), the length and the four lanes are then folded by multiply-rotate.
// Not cryptographic: it finds corruption, not an adversary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "gradsync/kernels/cpu_features.hpp"

#if GRADSYNC_HOST_AVX2
#include <immintrin.h>
#endif

namespace gradsync::kernels {

namespace detail {

inline constexpr std::uint64_t hash_key[4] = {0x9E3779B97F4A7C15ull, 0xC2B2AE3D27D4EB4Full,
                                              0x165667B19E3779F9ull, 0x85EBCA77C2B2AE63ull};
inline constexpr std::uint64_t hash_step[4] = {0x27D4EB2F165667C5ull, 0xFF51AFD7ED558CCDull,
                                               0xC4CEB9FE1A85EC53ull, 0x9E3779B185EBCA87ull};
inline constexpr std::uint64_t hash_prime = 0x9E3779B1u;  // odd, below 2^32
inline constexpr std::size_t hash_stripes_per_block = 32;

inline std::uint64_t hash_fold(std::uint64_t h, std::uint64_t w) {
  h ^= w * 0xC2B2AE3D27D4EB4Full;
  h = (h << 31) | (h >> 33);
  return h * 0x9E3779B97F4A7C15ull;
}

/// Adds `stripes` whole stripes at p to acc (the portable definition).
inline void hash_stripes_portable(std::uint64_t acc[4], const unsigned char* p,
                                  std::size_t stripes) {
  for (std::size_t s = 0; s < stripes; ++s) {
    std::uint64_t w[4];
    std::memcpy(w, p + 32 * s, 32);
    for (int l = 0; l < 4; ++l) {
      const std::uint64_t x = w[l] ^ (hash_key[l] + s * hash_step[l]);
      acc[l] += (x & 0xffffffffu) * (x >> 32);
    }
    for (int l = 0; l < 4; ++l) acc[l ^ 1] += w[l];
    if ((s + 1) % hash_stripes_per_block == 0) {
      for (int l = 0; l < 4; ++l) acc[l] = (acc[l] ^ (acc[l] >> 47)) * hash_prime;
    }
  }
}

#if GRADSYNC_HOST_AVX2
/// hash_stripes_portable with AVX2: the four lanes of a stripe in one register.
__attribute__((target("avx2"))) inline void hash_stripes_avx2(std::uint64_t acc[4],
                                                              const unsigned char* p,
                                                              std::size_t stripes) {
  __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc));
  __m256i key = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hash_key));
  const __m256i step = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hash_step));
  const __m256i prime = _mm256_set1_epi64x(static_cast<long long>(hash_prime));
  for (std::size_t s = 0; s < stripes; ++s) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * s));
    const __m256i x = _mm256_xor_si256(w, key);
    const __m256i prod = _mm256_mul_epu32(x, _mm256_srli_epi64(x, 32));        // lo32 * hi32
    const __m256i swapped = _mm256_shuffle_epi32(w, _MM_SHUFFLE(1, 0, 3, 2));  // w[l ^ 1]
    a = _mm256_add_epi64(a, _mm256_add_epi64(prod, swapped));
    key = _mm256_add_epi64(key, step);
    if ((s + 1) % hash_stripes_per_block == 0) {
      // (y * prime) mod 2^64 with prime < 2^32: lo32(y) * prime + (hi32(y) * prime) << 32.
      const __m256i y = _mm256_xor_si256(a, _mm256_srli_epi64(a, 47));
      a = _mm256_add_epi64(
          _mm256_mul_epu32(y, prime),
          _mm256_slli_epi64(_mm256_mul_epu32(_mm256_srli_epi64(y, 32), prime), 32));
    }
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc), a);
}
#endif

}  // namespace detail

/// The hash of `bytes` bytes at `data` (see the top of this file); `portable` forces the
/// portable loop (tests compare both).
inline std::uint64_t buffer_hash(const void* data, std::size_t bytes, bool portable = false) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t acc[4] = {detail::hash_key[0], detail::hash_key[1], detail::hash_key[2],
                          detail::hash_key[3]};
  const std::size_t stripes = bytes / 32;
#if GRADSYNC_HOST_AVX2
  if (!portable && detail::has_avx2()) {
    detail::hash_stripes_avx2(acc, p, stripes);
  } else {
    detail::hash_stripes_portable(acc, p, stripes);
  }
#else
  (void)portable;
  detail::hash_stripes_portable(acc, p, stripes);
#endif
  std::uint64_t h = detail::hash_fold(0x27D4EB2F165667C5ull, bytes);
  for (int l = 0; l < 4; ++l) h = detail::hash_fold(h, acc[l]);
  for (std::size_t i = 32 * stripes; i < bytes; i += 8) {
    std::uint64_t w = 0;
    std::memcpy(&w, p + i, bytes - i < 8 ? bytes - i : 8);
    h = detail::hash_fold(h, w);
  }
  return h ^ (h >> 29);
}

}  // namespace gradsync::kernels
