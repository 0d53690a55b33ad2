// SPDX-License-Identifier: Apache-2.0
// compress::int8<Block>: float and double gradients travel as one signed byte each, plus
// one float per Block elements. Summable, so it runs through the composition's allreduce:
//  1. every rank finds max |x| of each block; an allreduce of op::max agrees the scales;
//  2. every rank codes its values on the agreed scale in [-L, L], L = floor(127 / ranks),
//     so that the sum of all ranks' codes fits in int8 and adds exactly on the wire
//     (any algorithm, any order: integer sums);
//  3. an allreduce of op::sum over the int8 codes; each rank decodes sum * scale / L
//     (/ ranks for op::avg), the same bits everywhere.
// Wire bytes per element: 1 + 4 / Block (twice that for a ring's two passes). What it
// costs: each rank's value is rounded to 2L + 1 levels of its block's range (63 levels
// with 4 ranks, 255 / ranks in general), so wrap it in error_feedback for training. It
// refuses more than 127 ranks (L would be 0) and ops other than sum and avg.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "gradsync/compress/concept.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/kernels/quantize.hpp"

namespace gradsync::compress {

template <std::size_t Block = 256>  ///< elements sharing one scale (>= 8)
struct int8 {
  static_assert(Block >= 8,
                "gradsync::compress::int8<Block>: Block must be at least 8 "
                "(a scale per element would cost more than the value)");
  static constexpr std::string_view name = "int8";
  /// float and double are coded; other types travel as they are.
  template <class T>
  static constexpr bool compresses = std::is_same_v<T, float> || std::is_same_v<T, double>;

  template <class T, class Op>
  struct codec {
    static_assert(Op::id == reduce_op::sum || Op::id == reduce_op::avg,
                  "gradsync::compress::int8 codes sums: use it with op::sum or op::avg (for "
                  "min, max or prod use compress::none)");
    using runs_itself = void;

    template <class Ch>
    static void run(Ch& ch, std::span<T> x, no_state&, T* residual) {
      body(ch, x, residual, false);
    }
    /// error_feedback's entry: `carried` is added into x by the pass that finds the
    /// scales, then replaced by the new residual.
    template <class Ch>
    static void run_carried(Ch& ch, std::span<T> x, no_state&, T* carried) {
      body(ch, x, carried, true);
    }

   private:
    template <class Ch>
    static void body(Ch& ch, std::span<T> x, T* residual, bool carried) {
      const std::size_t n = ch.ranks(), count = x.size();
      if (n > 127) {
        throw error(errc::invalid_argument, {ch.rank()},
                    "compress::int8 sums codes in int8, which holds the sum of at most 127 "
                    "ranks; this group has " +
                        std::to_string(n) + " (use compress::fp16 or bf16)");
      }
      const int levels = static_cast<int>(127 / n);
      const std::size_t blocks = (count + Block - 1) / Block;
      const std::span<std::byte> buf = ch.scratch(2 * blocks * sizeof(float) + count);
      const std::span<float> scales(reinterpret_cast<float*>(buf.data()), blocks);
      const std::span<float> own(reinterpret_cast<float*>(buf.data()) + blocks, blocks);
      const std::span<std::int8_t> codes(
          reinterpret_cast<std::int8_t*>(buf.data() + 2 * blocks * sizeof(float)), count);
      ch.timed("compress", [&] {
        if (carried) {
          kernels::add_block_absmax(scales.data(), x.data(), residual, count, Block);
        } else {
          kernels::block_absmax(scales.data(), x.data(), count, Block);
        }
        std::copy(scales.begin(), scales.end(), own.begin());
      });
      ch.allreduce(scales, op::max);
      // A maximum over every rank is at least this rank's own: below it, the codes would
      // not fit their range (a corrupt or mismatched reduction), so nothing is coded.
      for (std::size_t b = 0; b < blocks; ++b) {
        if (!(scales[b] >= own[b])) {
          char what[160];
          std::snprintf(what, sizeof what,
                        "compress::int8: the agreed scale of block %zu (%g) is below this "
                        "rank's own largest magnitude there (%g): ",
                        b, static_cast<double>(scales[b]), static_cast<double>(own[b]));
          throw error(errc::mismatch, {ch.rank()},
                      std::string(what) + "a corrupt or mismatched reduction; nothing was coded");
        }
      }
      ch.timed("compress", [&] {
        kernels::quantize_blocks(codes.data(), residual, x.data(), scales.data(), count, Block,
                                 levels);
      });
      ch.allreduce(codes, op::sum);
      ch.timed("decompress", [&] {
        kernels::dequantize_blocks(x.data(), codes.data(), scales.data(), count, Block, levels,
                                   Op::id == reduce_op::avg ? n : 1);
      });
    }
  };
};

}  // namespace gradsync::compress
