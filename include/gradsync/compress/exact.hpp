// SPDX-License-Identifier: Apache-2.0
// compress::exact<Bits, Block, MaxRanks>: reproducible sums. Float and double gradients
// travel as integer codes on a per-block power of two agreed by every rank, so they add
// exactly in any order: the result has the same bits whatever the algorithm, bucket
// size, placement or transport. Per bucket:
//  1. each block of Block elements (aligned to its tensor, so moving a bucket edge changes
//     nothing) takes the largest exponent field of its finite values; one allreduce of
//     op::max agrees them, with a flag per block for a NaN or Inf;
//  2. each value becomes a signed code with P = Bits - 1 - ceil(log2 MaxRanks) fraction
//     bits below the block's next power of two (double: two lanes, 2P bits), from the
//     float's bits (kernels/exact_codes.hpp);
//  3. the composition's allreduce of op::sum adds the codes (integers: any order);
//  4. each rank decodes the exact integer once, op::avg dividing in the same rounding.
// A block flagged in step 1 gets IEEE semantics per element from one more allreduce of
// op::max over its elements' kinds (NaN, +Inf, -Inf); the rest of the bucket is untouched.
// Headroom comes from MaxRanks, never from the group's size, so a code means the same
// thing at any rank count. min and max travel as they are (already exact); prod is
// refused. docs/reproducibility.md has the guarantees, error bounds and costs.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "gradsync/algo/tuning.hpp"
#include "gradsync/compress/concept.hpp"
#include "gradsync/compress/pieces.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/kernels/exact_codes.hpp"

namespace gradsync::compress {

namespace detail {

/// Calls f(begin, length) for each block of a bucket of `count` elements: Block-element
/// blocks from the start of each tensor in `parts` (the last one of a tensor shorter),
/// and from the bucket's start when no parts are known (a single tensor). Only the blocks
/// that start in [from, to) when those are given (block starts: a piece's bounds).
template <std::size_t Block, class F>
void for_each_block(std::span<const tensor_part> parts, std::size_t count, F&& f,
                    std::size_t from = 0, std::size_t to = static_cast<std::size_t>(-1)) {
  auto run = [&](std::size_t begin, std::size_t n) {
    if (begin + n <= from || begin >= to) return;
    for (std::size_t b = from > begin ? from - begin : 0; b < n && begin + b < to; b += Block)
      f(begin + b, n - b < Block ? n - b : Block);
  };
  std::size_t at = 0;
  for (const tensor_part& p : parts) {
    if (p.offset < at || p.offset + p.count > count) {
      throw error(errc::invalid_argument, error_site(),
                  "compress::exact: the bucket's tensor list overlaps or overruns the bucket "
                  "(offset " +
                      std::to_string(p.offset) + ", " + std::to_string(p.count) +
                      " elements in a bucket of " + std::to_string(count) + ")");
    }
    run(at, p.offset - at);  // a gap between tensors: its own blocks
    run(p.offset, p.count);
    at = p.offset + p.count;
  }
  run(at, count - at);
}

/// A bucket cut into at most algo::tuning::codec_max_pieces pieces of whole blocks, of
/// about equal elements: piece i holds the elements [at[i], at[i + 1]) and the blocks
/// [block[i], block[i + 1]).
struct block_pieces {
  std::array<std::size_t, algo::tuning::codec_max_pieces + 1> at{}, block{};

  template <std::size_t Block>
  static block_pieces cut(std::span<const tensor_part> parts, std::size_t elements,
                          std::size_t pieces, std::size_t blocks) {
    block_pieces r;
    std::size_t next = 1, b = 0;
    if (pieces > 1) {
      for_each_block<Block>(parts, elements, [&](std::size_t begin, std::size_t) {
        if (next < pieces && begin >= next * elements / pieces) {
          r.at[next] = begin;
          r.block[next++] = b;
        }
        ++b;
      });
    }
    for (; next <= pieces; ++next) {  // the end (and pieces a short bucket leaves empty)
      r.at[next] = elements;
      r.block[next] = blocks;
    }
    return r;
  }
};

}  // namespace detail

template <std::size_t Bits = 64,        ///< a code lane's width: 64, or 32 (fewer bits)
          std::size_t Block = 256,      ///< elements sharing one agreed exponent
          std::size_t MaxRanks = 4096>  ///< most summands a code lane has room for
struct exact {
  static_assert(Bits == 32 || Bits == 64,
                "gradsync::compress::exact<Bits>: Bits is 64 (codes of 64-bit integers) or 32 "
                "(half the wire bytes, fewer fraction bits)");
  static_assert(Block >= 8,
                "gradsync::compress::exact<Bits, Block>: Block must be at least 8 (its "
                "agreed exponent and flag cost two bytes)");
  static_assert(MaxRanks >= 2 && kernels::exact::ceil_log2(MaxRanks) <= static_cast<int>(Bits) - 9,
                "gradsync::compress::exact<Bits, Block, MaxRanks>: MaxRanks is at least 2 and "
                "must leave a code lane 8 fraction bits; lower it or use Bits = 64");

  static constexpr std::string_view name = Bits == 64 ? "exact64" : "exact32";
  /// float and double are coded; other types travel as they are (integers add exactly).
  template <class T>
  static constexpr bool compresses = std::is_same_v<T, float> || std::is_same_v<T, double>;
  /// An integer lane of the wire.
  using code_type = std::conditional_t<Bits == 64, std::int64_t, std::int32_t>;
  /// A code lane's fraction bits.
  static constexpr int lane_bits = kernels::exact::lane_bits<code_type, MaxRanks>;

  template <class T, class Op>
  struct codec {
    static_assert(Op::id != reduce_op::prod,
                  "gradsync::compress::exact makes sums reproducible; a product has no exact "
                  "integer form here: reduce op::prod with compress::none");
    using runs_itself = void;
    using L = kernels::exact::layout<T>;
    /// The agreed exponent's lane: one byte for float's fields, four for double's.
    using scale_type = std::conditional_t<sizeof(T) == 8, std::int32_t, std::int8_t>;
    static constexpr int scale_offset = sizeof(T) == 8 ? 0 : 128;  // float: field - 128

    template <class Ch>
    static void run(Ch& ch, std::span<T> x, no_state&, T* residual) {
      if constexpr (Op::id == reduce_op::min || Op::id == reduce_op::max) {
        if (residual) std::fill(residual, residual + x.size(), T(0));
        ch.allreduce(x, Op{});  // a min or max is one of the inputs: exact already
      } else {
        body(ch, x, residual);
      }
    }

   private:
    static constexpr std::size_t lanes = L::lanes;
    /// The parameters every rank must share, hashed; agreed in print_lanes lanes.
    static constexpr std::uint32_t fingerprint = [] {
      std::uint64_t h = 0xcbf29ce484222325ull;
      for (std::uint64_t v : {std::uint64_t{Bits}, std::uint64_t{Block}, std::uint64_t{MaxRanks},
                              std::uint64_t{sizeof(T)}}) {
        h = (h ^ v) * 0x100000001b3ull;
      }
      return static_cast<std::uint32_t>(h ^ (h >> 32));
    }();
    static constexpr std::size_t print_lanes = sizeof(std::uint32_t) / sizeof(scale_type);

    template <class Ch>
    static void body(Ch& ch, std::span<T> x, T* residual) {
      const std::size_t n = ch.ranks(), count = x.size();
      if (n > MaxRanks) {
        throw error(errc::invalid_argument, {ch.rank()},
                    "compress::exact<" + std::to_string(Bits) + ", " + std::to_string(Block) +
                        ", MaxRanks = " + std::to_string(MaxRanks) + "> has room for the sum of " +
                        std::to_string(MaxRanks) + " ranks; this group has " + std::to_string(n) +
                        " (raise MaxRanks)");
      }
      const std::span<const tensor_part> parts = ch.tensors();
      std::size_t blocks = 0;
      detail::for_each_block<Block>(parts, count, [&](std::size_t, std::size_t) { ++blocks; });
      // Agreed by one max: [exponent x blocks | NaN-or-Inf flag x blocks | the codec's
      // parameters and their complements]; then this rank's own exponents.
      const std::span<std::byte> meta =
          ch.scratch((3 * blocks + 2 * print_lanes) * sizeof(scale_type));
      const std::span<scale_type> agree(reinterpret_cast<scale_type*>(meta.data()),
                                        2 * blocks + 2 * print_lanes);
      scale_type* own = agree.data() + agree.size();
      scale_type* print = agree.data() + 2 * blocks;
      std::memcpy(print, &fingerprint, sizeof fingerprint);
      for (std::size_t i = 0; i < print_lanes; ++i)
        print[print_lanes + i] = static_cast<scale_type>(~print[i]);
      const std::span<std::byte> wire = ch.scratch(count * lanes * sizeof(code_type));
      const std::span<code_type> codes(reinterpret_cast<code_type*>(wire.data()), count * lanes);

      ch.timed("compress", [&] {
        std::size_t b = 0;
        detail::for_each_block<Block>(parts, count, [&](std::size_t at, std::size_t len) {
          const kernels::exact::block_scan s = kernels::exact::scan(x.data() + at, len);
          own[b] = agree[b] = static_cast<scale_type>(s.field - scale_offset);
          agree[blocks + b] = s.non_finite ? 1 : 0;
          ++b;
        });
      });
      ch.allreduce(agree, op::max);
      // Every rank's parameters equal: each lane's max is this rank's, and so is its min
      // (the complement's max). A rank with other Bits, Block or MaxRanks would code at
      // another scale: a wrong sum that no size check sees.
      std::uint32_t mine = fingerprint;
      for (std::size_t i = 0; i < print_lanes; ++i) {
        scale_type lane;
        std::memcpy(&lane, reinterpret_cast<const char*>(&mine) + i * sizeof lane, sizeof lane);
        if (print[i] != lane || print[print_lanes + i] != static_cast<scale_type>(~lane)) {
          throw error(errc::mismatch, {ch.rank()},
                      "compress::exact: the ranks code with different parameters; this rank "
                      "runs compress::exact<" +
                          std::to_string(Bits) + ", " + std::to_string(Block) + ", " +
                          std::to_string(MaxRanks) + "> on " +
                          (sizeof(T) == 8 ? "double" : "float") +
                          " (every rank must use the same Bits, Block and MaxRanks)");
        }
      }
      std::size_t flagged = 0;
      for (std::size_t b = 0; b < blocks; ++b) {
        // An agreed maximum below this rank's own: the codes would not fit (a corrupt or
        // mismatched reduction), so nothing is coded.
        if (agree[b] < own[b]) throw below_own(ch.rank(), b, agree[b], own[b]);
        flagged += agree[blocks + b] != 0 ? 1 : 0;
      }
      const std::uint64_t divisor = Op::id == reduce_op::avg ? n : 1;
      // Piece i's codes are summed while piece i + 1 is coded and piece i - 1 decoded. A
      // flagged block (agreed, so every rank takes the same branch) decodes with the
      // kinds of its elements after the whole bucket is summed: one piece.
      const std::size_t pieces = flagged ? 1 : algo::tuning::codec_pieces(codes.size_bytes());
      const auto cut = detail::block_pieces::cut<Block>(parts, count, pieces, blocks);
      auto blocks_of = [&](std::size_t i, auto&& f) {
        std::size_t b = cut.block[i];
        detail::for_each_block<Block>(
            parts, count, [&](std::size_t at, std::size_t len) { f(at, len, b++); }, cut.at[i],
            cut.at[i + 1]);
      };
      auto encode = [&](std::size_t i) {
        ch.timed("compress", [&] {
          blocks_of(i, [&](std::size_t at, std::size_t len, std::size_t b) {
            const int field = agree[b] + scale_offset;
            kernels::exact::encode<T, code_type, lane_bits>(codes.data() + at * lanes,
                                                            x.data() + at, len, field);
            if (residual) residual_of(residual, x.data(), codes.data(), at, len, field);
          });
        });
      };
      auto piece_codes = [&](std::size_t i) {
        return codes.subspan(cut.at[i] * lanes, (cut.at[i + 1] - cut.at[i]) * lanes);
      };
      if (flagged) {
        encode(0);
        ch.allreduce(codes, op::sum);
        non_finite_blocks(ch, x, codes, parts, agree, blocks, divisor);
        return;
      }
      reduce_in_pieces(ch, pieces, piece_codes, op::sum, encode, [&](std::size_t i) {
        ch.timed("decompress", [&] {
          blocks_of(i, [&](std::size_t at, std::size_t len, std::size_t b) {
            kernels::exact::decode<T, code_type, lane_bits>(
                x.data() + at, codes.data() + at * lanes, len, agree[b] + scale_offset, divisor);
          });
        });
      });
    }

    /// x minus what this rank's own codes decode to (0 where x is not finite), for the
    /// block of `len` elements at `at`, coded at `field`.
    static void residual_of(T* r, const T* x, const code_type* codes, std::size_t at,
                            std::size_t len, int field) {
      kernels::exact::decode<T, code_type, lane_bits>(r + at, codes + at * lanes, len, field, 1);
      for (std::size_t i = at; i < at + len; ++i) {
        const T lost = x[i] - r[i];
        r[i] = std::isfinite(lost) ? lost : T(0);  // a NaN would stay for good
      }
    }

    /// Decodes a bucket in which some block holds a NaN or Inf on some rank: one more
    /// allreduce of op::max over those blocks' elements' kinds gives each element its IEEE
    /// sum; every other element decodes as usual.
    template <class Ch>
    static void non_finite_blocks(Ch& ch, std::span<T> x, std::span<const code_type> codes,
                                  std::span<const tensor_part> parts,
                                  std::span<const scale_type> agree, std::size_t blocks,
                                  std::uint64_t divisor) {
      std::size_t elements = 0, b = 0;
      detail::for_each_block<Block>(parts, x.size(), [&](std::size_t, std::size_t len) {
        elements += agree[blocks + b++] ? len : 0;
      });
      const std::span<std::byte> buf = ch.scratch(3 * elements);
      const std::span<std::int8_t> kinds(reinterpret_cast<std::int8_t*>(buf.data()), 3 * elements);
      ch.timed("compress", [&] {
        std::size_t k = 0, blk = 0;
        detail::for_each_block<Block>(parts, x.size(), [&](std::size_t at, std::size_t len) {
          if (!agree[blocks + blk++]) return;
          for (std::size_t i = at; i < at + len; ++i, k += 3) {
            const kernels::exact::kinds v = kernels::exact::kind_of(x[i]);
            kinds[k] = v.nan;
            kinds[k + 1] = v.pinf;
            kinds[k + 2] = v.ninf;
          }
        });
      });
      ch.allreduce(kinds, op::max);
      ch.timed("decompress", [&] {
        std::size_t k = 0, blk = 0;
        detail::for_each_block<Block>(parts, x.size(), [&](std::size_t at, std::size_t len) {
          const bool flagged = agree[blocks + blk] != 0;
          kernels::exact::decode<T, code_type, lane_bits>(x.data() + at, codes.data() + at * lanes,
                                                          len, agree[blk] + scale_offset, divisor);
          ++blk;
          if (!flagged) return;
          for (std::size_t i = at; i < at + len; ++i, k += 3) {
            x[i] = kernels::exact::sum_of_kinds<T>({kinds[k], kinds[k + 1], kinds[k + 2]}, x[i]);
          }
        });
      });
    }

    static error below_own(std::size_t rank, std::size_t b, int agreed, int mine) {
      char what[200];
      std::snprintf(what, sizeof what,
                    "compress::exact: the agreed exponent field of block %zu (%d) is below this "
                    "rank's own (%d): a corrupt or mismatched reduction; nothing was coded",
                    b, agreed + scale_offset, mine + scale_offset);
      return error(errc::mismatch, {rank}, what);
    }
  };
};

}  // namespace gradsync::compress
