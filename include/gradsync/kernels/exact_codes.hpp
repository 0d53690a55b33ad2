// SPDX-License-Identifier: Apache-2.0
// The integer codes of compress::exact. Values are coded from their bits, never through
// float arithmetic, so FTZ/DAZ, denormals and the compiler's choices cannot make two
// machines disagree; the decode is one correct rounding of an exact integer (through
// double only where every step is exact or rounds to odd):
//  - a block's scale is the largest exponent field of its finite values (a zero or a
//    denormal counts as field 1), agreed across ranks as an integer max;
//  - a value becomes round_half_even(x * 2^(P - 1 - e)) for the block's unbiased
//    exponent e: |code| < 2^P, so MaxRanks codes add without overflow in any order;
//  - a code wider than one integer lane (double's) travels as lanes of K bits each,
//    summed separately and recombined exactly;
//  - the exact sum (divided by the rank count for an average, the remainder kept as a
//    sticky bit) is rounded to odd at 64 bits, then to nearest even at T's precision:
//    one correct rounding of the exact result, whatever the path to it.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "gradsync/kernels/cpu_features.hpp"

// The loops below inline into their AVX2 / AVX-512 builds whatever the builds' options
// (GCC does not inline across differing optimize attributes otherwise: scalar loops).
#if defined(__GNUC__) && !defined(__clang__)
#define GRADSYNC_EXACT_INLINE inline __attribute__((always_inline))
#else
#define GRADSYNC_EXACT_INLINE inline
#endif

namespace gradsync::kernels::exact {

__extension__ typedef unsigned __int128 u128;  // double's codes span two 64-bit lanes
__extension__ typedef __int128 i128;

/// The IEEE layout of T (float or double).
template <class T>
struct layout {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "gradsync::kernels::exact codes float and double");
  using bits = std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>;
  static constexpr int mant = std::numeric_limits<T>::digits - 1;  // stored fraction bits
  static constexpr int field_max = sizeof(T) == 8 ? 2047 : 255;    // Inf / NaN
  static constexpr int bias = field_max / 2;
  /// Integer lanes a code takes: one for float, two for double.
  static constexpr std::size_t lanes = sizeof(T) == 8 ? 2 : 1;

  static bits to_bits(T v) {
    bits u;
    std::memcpy(&u, &v, sizeof u);
    return u;
  }
  static T from_bits(bits u) {
    T v;
    std::memcpy(&v, &u, sizeof v);
    return v;
  }
  static int field(bits u) { return static_cast<int>((u >> mant) & bits(field_max)); }
};

/// ceil(log2 n), for n >= 1.
constexpr int ceil_log2(std::size_t n) {
  int k = 0;
  while ((std::size_t{1} << k) < n) ++k;
  return k;
}

/// A code lane's fraction bits for Code lanes and MaxRanks contributions: a lane of
/// MaxRanks summands keeps its sign bit and never overflows.
template <class Code, std::size_t MaxRanks>
inline constexpr int lane_bits = std::numeric_limits<Code>::digits - ceil_log2(MaxRanks);

/// What one block holds: its scale (largest exponent field of a finite value, at least
/// 1) and whether a NaN or Inf is there.
struct block_scan {
  int field = 1;
  bool non_finite = false;
};

/// Scans x[0, n). Integer max and or only, so the loop vectorises.
template <class T>
inline block_scan scan(const T* x, std::size_t n) {
  using L = layout<T>;
  using B = typename L::bits;
  constexpr int exp_bits = sizeof(T) == 8 ? 11 : 8;
  B hi = 1, bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    B u;
    std::memcpy(&u, x + i, sizeof u);
    const B f = (u >> L::mant) & B(L::field_max);
    const B non_finite = (f + 1) >> exp_bits;  // 1 for the all-ones field
    bad |= non_finite;
    const B g = f & (non_finite - 1);  // a NaN's or Inf's field counts as 0
    hi = hi > g ? hi : g;
  }
  return {static_cast<int>(hi), bad != 0};
}

/// The magnitude of the code of a value with significand m (hidden bit included) whose
/// exponent field is `d` below the block's scale, with P fraction bits: m * 2^s rounded
/// half to even, s = P - 1 - mant - d, clamped below 2^P (the clamp is reached only by a
/// value rounding up to its block's next power of two).
template <class T, class W, int P>
inline W magnitude(std::uint64_t m, int d) {
  constexpr int mant = layout<T>::mant;
  const int s = P - 1 - mant - d;
  W c;
  if (s >= 0) {
    c = W(m) << s;
  } else {
    const int r = -s;
    if (r > mant + 1) return 0;  // below half the code's unit
    const std::uint64_t q = m >> r, rem = m & ((std::uint64_t{1} << r) - 1),
                        half = std::uint64_t{1} << (r - 1);
    c = W(q + ((rem > half || (rem == half && (q & 1))) ? 1 : 0));
  }
  constexpr W top = (W(1) << P) - 1;
  return c > top ? top : c;
}

/// Codes n values of one block at the agreed scale `field` into out[n * lanes], lanes of
/// K bits each (the low lane non-negative, the high one carrying the sign). A NaN or Inf
/// codes as 0 (the block's flag carries it). The caller has checked that `field` is at
/// least the block's own.
template <class T, class Code, int K>
inline void encode_bits(Code* out, const T* x, std::size_t n, int field) {
  using L = layout<T>;
  constexpr std::size_t lanes = L::lanes;
  constexpr int P = K * static_cast<int>(lanes);
  static_assert(K >= 2 && K < std::numeric_limits<Code>::digits,
                "gradsync::kernels::exact: a lane needs room for MaxRanks summands");
  using W = std::conditional_t<(P > 63), u128, std::uint64_t>;
  using S = std::conditional_t<(P > 63), i128, std::int64_t>;
  for (std::size_t i = 0; i < n; ++i) {
    const typename L::bits u = L::to_bits(x[i]);
    const int f = L::field(u);
    const std::uint64_t frac =
        static_cast<std::uint64_t>(u & ((typename L::bits{1} << L::mant) - 1));
    W mag = 0;
    if (f != L::field_max) {
      const std::uint64_t m = f ? frac | (std::uint64_t{1} << L::mant) : frac;
      mag = magnitude<T, W, P>(m, field - (f ? f : 1));
    }
    const bool neg = (u >> (sizeof(T) * 8 - 1)) != 0;
    const S c = neg ? -static_cast<S>(mag) : static_cast<S>(mag);
    if constexpr (lanes == 1) {
      out[i] = static_cast<Code>(c);
    } else {
      const S hi = c >> K;  // floor: the low lane below is in [0, 2^K)
      out[2 * i] = static_cast<Code>(hi);
      out[2 * i + 1] = static_cast<Code>(c - hi * (S(1) << K));
    }
  }
}

namespace detail {

/// The code of one float (its bits) at `field` with P fraction bits, as encode_bits
/// gives it, branch-free so that the loops below vectorise: the significand is placed G
/// bits up, then shifted right by k >= 1 keeping a guard bit, the rest a sticky test.
/// U is the word: 64 bits for P <= 61 (AVX2's 64-bit variable shifts), 32 bits for
/// P <= 23 (twice the lanes). A NaN or Inf codes as 0; so does a field above `field`
/// (d wraps, k saturates).
template <class U, int P>
GRADSYNC_EXACT_INLINE std::make_signed_t<U> float_code(std::uint32_t bits, U field) {
  constexpr int W = sizeof(U) * 8;
  static_assert(P <= W - 3, "the guard bit needs P <= 61 (64-bit words) or 23 (32-bit)");
  constexpr int G = P > 23 ? P - 23 : 0;  // m << G < 2^(W - 2)
  constexpr U top = (U{1} << P) - 1, base = static_cast<U>(G + 24 - P);
  const U u = bits, f = (u >> 23) & 255u, non_finite = (f + 1) >> 8;
  const U m = ((u & 0x7fffffu) | (((0 - f) >> (W - 1)) << 23)) & (non_finite - 1);
  const U d = field - (f + ((f - 1) >> (W - 1)));  // fields below the block's
  U k = base + d;                                  // m * 2^(P - 24 - d) = (m << G) >> k
  k = k < W - 1 ? k : W - 1;                       // shifting by W - 1 already gives 0
  const U t = m << G, c0 = t >> (k - 1);
  const U sticky = (c0 << (k - 1)) != t, q = c0 >> 1;
  U c = q + (c0 & 1 & (sticky | q));  // round half to even
  c = c < top ? c : top;
  const U neg = 0 - (u >> 31);
  return static_cast<std::make_signed_t<U>>((c ^ neg) - neg);
}

/// encode_bits for float with one lane of P <= 61 fraction bits (32-bit words when the
/// codes are 32-bit and P <= 23).
template <class Code, int P>
GRADSYNC_EXACT_INLINE void encode_float_lanes(Code* out, const float* x, std::size_t n, int field) {
  using U = std::conditional_t<(P <= 23 && sizeof(Code) == 4), std::uint32_t, std::uint64_t>;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, x + i, 4);
    out[i] = static_cast<Code>(float_code<U, P>(bits, static_cast<U>(field)));
  }
}

/// encode_float_lanes adding into `sum` instead of writing, with the block's scan in the
/// same pass (for compress::exact_accumulator): one pass over x, not three. The codes
/// added are those of `field`; a value whose field is above it adds 0, and the caller
/// discards the sum (its step is redone).
template <class Code, int P>
GRADSYNC_EXACT_INLINE block_scan encode_add_float_lanes(Code* sum, const float* x, std::size_t n,
                                                        int field) {
  std::uint32_t hi = 1, bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, x + i, 4);
    const std::uint32_t f = (bits >> 23) & 255u, non_finite = (f + 1) >> 8;
    bad |= non_finite;
    const std::uint32_t g = f & (non_finite - 1);
    hi = hi > g ? hi : g;
    sum[i] = static_cast<Code>(sum[i] + static_cast<Code>(float_code<std::uint64_t, P>(
                                            bits, static_cast<std::uint64_t>(field))));
  }
  return {static_cast<int>(hi), bad != 0};
}

#if GRADSYNC_HOST_AVX2
template <class Code, int P>
__attribute__((target("avx2"))) void encode_float_avx2(Code* out, const float* x, std::size_t n,
                                                       int field) {
  encode_float_lanes<Code, P>(out, x, n, field);
}
template <class Code, int P>
__attribute__((target("avx2"))) block_scan encode_add_float_avx2(Code* sum, const float* x,
                                                                 std::size_t n, int field) {
  return encode_add_float_lanes<Code, P>(sum, x, n, field);
}
#endif

}  // namespace detail

/// Codes n values of one block (encode_bits' result): float's through the branch-free
/// loop (AVX2 where the CPU has it), double's and wide lanes' from encode_bits.
template <class T, class Code, int K>
inline void encode(Code* out, const T* x, std::size_t n, int field) {
  if constexpr (std::is_same_v<T, float> && K <= 61) {
#if GRADSYNC_HOST_AVX2
    if (kernels::detail::has_avx2()) return detail::encode_float_avx2<Code, K>(out, x, n, field);
#endif
    detail::encode_float_lanes<Code, K>(out, x, n, field);
  } else {
    encode_bits<T, Code, K>(out, x, n, field);
  }
}

/// Adds the codes of n floats of one block at `field` into sum[n] and returns the block's
/// scan (a field above `field` means the sum is not valid: compress::exact_accumulator
/// then redoes the step).
template <class Code, int K>
inline block_scan encode_add(Code* sum, const float* x, std::size_t n, int field) {
  static_assert(K <= 61, "gradsync::kernels::exact::encode_add: one lane of at most 61 bits");
#if GRADSYNC_HOST_AVX2
  if (kernels::detail::has_avx2()) return detail::encode_add_float_avx2<Code, K>(sum, x, n, field);
#endif
  return detail::encode_add_float_lanes<Code, K>(sum, x, n, field);
}

/// The value of M * 2^x (M < 2^64, already rounded to odd when it stands for more bits)
/// in T, rounded to nearest even from its bits; negative when `neg`. Overflows to Inf.
template <class T>
inline T assemble(bool neg, std::uint64_t M, int x) {
  using L = layout<T>;
  using B = typename L::bits;
  constexpr int p = L::mant + 1, emin_lsb = 1 - L::bias - L::mant;  // subnormal unit
  const B sign = neg ? B(1) << (sizeof(T) * 8 - 1) : B(0);
  if (M == 0) return L::from_bits(sign);
  const int h = 63 - std::countl_zero(M);
  int shift = h + 1 - p;                           // keep p bits
  if (x + shift < emin_lsb) shift = emin_lsb - x;  // subnormal: keep what the unit allows
  std::uint64_t q;
  if (shift <= 0) {
    q = M << -shift;
  } else if (shift > 64) {
    q = 0;  // below half the smallest subnormal
  } else {
    q = shift == 64 ? 0 : M >> shift;
    const std::uint64_t half = std::uint64_t{1} << (shift - 1),
                        rem = shift == 64 ? M : M & ((half << 1) - 1);
    q += (rem > half || (rem == half && (q & 1))) ? 1 : 0;
  }
  if (q >> p) {  // rounding carried into the next binade (q is even)
    q >>= 1;
    ++shift;
  }
  // q < 2^(p-1) only for subnormals, where x + shift == emin_lsb and the field is 0.
  const long field_less_one = static_cast<long>(x) + shift + L::mant + L::bias - 1;
  if (field_less_one + (q >> L::mant) >= L::field_max) {
    return L::from_bits(sign | (B(L::field_max) << L::mant));  // overflow: Inf
  }
  if (q == 0) return L::from_bits(sign);
  return L::from_bits(sign | ((B(field_less_one) << L::mant) + B(q)));
}

/// U (plus a sticky part below it when `sticky`) rounded to odd at 64 bits: {m, e} with
/// U ~ m * 2^e and m's lowest bit set when any bit dropped (or the sticky part) was.
/// Rounding m once more to at most 62 bits gives what rounding U directly would.
struct odd64 {
  std::uint64_t m;
  int e;
};
inline odd64 round_to_odd(u128 U, bool sticky) {
  int e = 0;
  if (sticky && (U >> 64) == 0) {  // keep 64 bits above the sticky part
    U <<= 64;
    e = -64;
  }
  const std::uint64_t hi = static_cast<std::uint64_t>(U >> 64);
  if (hi == 0) return {static_cast<std::uint64_t>(U), e};  // exact
  const int drop = 64 - std::countl_zero(hi);
  const std::uint64_t m = static_cast<std::uint64_t>(U >> drop);
  const bool lost = sticky || (U & ((u128(1) << drop) - 1)) != 0;
  return {m | (lost ? 1u : 0u), e + drop};
}

/// The value of the exact sum S * 2^(scale) divided by `ranks` (1 for a sum), correctly
/// rounded to T: the quotient keeps at least 64 - log2(ranks) bits and its remainder a
/// sticky bit, so rounding to odd then to nearest is one correct rounding.
template <class T>
inline T value_of(i128 S, int scale, std::uint64_t ranks) {
  const bool neg = S < 0;
  u128 U = neg ? -static_cast<u128>(S) : static_cast<u128>(S);
  bool sticky = false;
  if (ranks > 1 && U != 0) {
    const std::uint64_t hi = static_cast<std::uint64_t>(U >> 64);
    const int up = hi ? std::countl_zero(hi) : 64 + std::countl_zero(static_cast<std::uint64_t>(U));
    U <<= up;  // the quotient keeps 128 - log2(ranks) bits
    scale -= up;
    sticky = U % ranks != 0;
    U /= ranks;
  }
  const odd64 r = round_to_odd(U, sticky);
  return assemble<T>(neg, r.m, scale + r.e);
}

namespace detail {

/// Float's decode through double (the "round to odd when going through double"):
/// the sum (below 2^62) converts to double rounded to odd, an average divides in double
/// and rounds its quotient to odd from the exact remainder (an FMA), and the last
/// conversion rounds to nearest. Returns false when some element needs decode_bits: a sum
/// of 2^62 or more, or a result below float's normal range (where FTZ would flush it).
/// Branch-free, so it vectorises where the target converts 64-bit integers in vectors.
template <bool Avg, class Code>
GRADSYNC_EXACT_INLINE bool decode_float_via_double(float* y, const Code* s, std::size_t n,
                                                   int scale, double ranks) {
  const double unit = std::ldexp(1.0, scale);
  std::uint64_t redo = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t S = s[i], sign = S >> 63;  // (a 32-bit code widens)
    const std::uint64_t U = static_cast<std::uint64_t>((S ^ sign) - sign);
    double d = static_cast<double>(static_cast<std::int64_t>(U));
    const std::uint64_t back =
        static_cast<std::uint64_t>(static_cast<std::int64_t>(d < 0x1p62 ? d : 0x1p62));
    std::int64_t b;
    std::memcpy(&b, &d, 8);
    b = (b - static_cast<std::int64_t>(back > U)) | static_cast<std::int64_t>(back != U);
    std::memcpy(&d, &b, 8);
    if constexpr (Avg) {
      double q = d / ranks;
      const double r = __builtin_fma(-q, ranks, d);  // exact: d - q * ranks
      std::int64_t qb;
      std::memcpy(&qb, &q, 8);
      qb = (qb - static_cast<std::int64_t>(r < 0)) | static_cast<std::int64_t>(r != 0);
      std::memcpy(&q, &qb, 8);
      d = q;
    }
    const double v = d * unit;  // exact: a power of two well inside double's range
    redo |= (U >> 62) | static_cast<std::uint64_t>((v != 0) & (v < 0x1p-126));
    y[i] = static_cast<float>(S < 0 ? -v : v);
  }
  return redo == 0;
}

#if GRADSYNC_HOST_AVX2 && defined(__GNUC__) && !defined(__clang__)
// GCC vectorises the loop above only without trapping math (the conversions would
// otherwise count as control flow); values are the same, only exception flags may differ.
#define GRADSYNC_EXACT_AVX512 1
template <bool Avg, class Code>
__attribute__((target("avx512f,avx512dq,avx512vl"), optimize("no-trapping-math"))) bool
decode_float_avx512(float* y, const Code* s, std::size_t n, int scale, double ranks) {
  return decode_float_via_double<Avg>(y, s, n, scale, ranks);
}
#else
#define GRADSYNC_EXACT_AVX512 0
#endif

}  // namespace detail

/// Decodes n summed codes of one block at the agreed scale `field` into y from the bits
/// (value_of per element): the reference every faster path must equal.
template <class T, class Code, int K>
inline void decode_bits(T* y, const Code* s, std::size_t n, int field, std::uint64_t ranks) {
  using L = layout<T>;
  constexpr std::size_t lanes = L::lanes;
  constexpr int P = K * static_cast<int>(lanes);
  const int scale = field - L::bias + 1 - P;  // the code's unit is 2^scale
  for (std::size_t i = 0; i < n; ++i) {
    i128 S;
    if constexpr (lanes == 1) {
      S = s[i];
    } else {
      S = static_cast<i128>(s[2 * i]) * (i128(1) << K) + static_cast<i128>(s[2 * i + 1]);
    }
    y[i] = value_of<T>(S, scale, ranks);
  }
}

/// Decodes n summed codes of one block at the agreed scale `field` into y, divided by
/// `ranks` (1 for a sum): float's codes through double (vectorised with AVX-512 where the
/// CPU has it); double's, and any block that path declines, from the bits. Both give the
/// same correctly rounded result.
template <class T, class Code, int K>
inline void decode(T* y, const Code* s, std::size_t n, int field, std::uint64_t ranks) {
  if constexpr (std::is_same_v<T, float>) {
    const int scale = field - layout<T>::bias + 1 - K;
    const double r = static_cast<double>(ranks);
    bool done;
#if GRADSYNC_EXACT_AVX512
    if (kernels::detail::has_avx512dq()) {
      done = ranks > 1 ? detail::decode_float_avx512<true>(y, s, n, scale, r)
                       : detail::decode_float_avx512<false>(y, s, n, scale, r);
    } else
#endif
    {
      done = ranks > 1 ? detail::decode_float_via_double<true>(y, s, n, scale, r)
                       : detail::decode_float_via_double<false>(y, s, n, scale, r);
    }
    if (done) return;
  }
  decode_bits<T, Code, K>(y, s, n, field, ranks);
}

/// A non-finite value's kind, as flags a max across ranks combines: NaN, +Inf, -Inf.
struct kinds {
  std::int8_t nan = 0, pinf = 0, ninf = 0;
};
template <class T>
inline kinds kind_of(T v) {
  using L = layout<T>;
  const typename L::bits u = L::to_bits(v);
  if (L::field(u) != L::field_max) return {};
  if (u & ((typename L::bits{1} << L::mant) - 1)) return {1, 0, 0};
  return (u >> (sizeof(T) * 8 - 1)) ? kinds{0, 0, 1} : kinds{0, 1, 0};
}
/// The IEEE sum of values of these kinds (any finite ones aside): NaN when a NaN or both
/// infinities are there, else the infinity; `finite` when none is.
template <class T>
inline T sum_of_kinds(kinds k, T finite) {
  if (k.nan || (k.pinf && k.ninf)) return std::numeric_limits<T>::quiet_NaN();
  if (k.pinf) return std::numeric_limits<T>::infinity();
  if (k.ninf) return -std::numeric_limits<T>::infinity();
  return finite;
}

}  // namespace gradsync::kernels::exact
