// SPDX-License-Identifier: Apache-2.0
// compress::exact_accumulator: a sum of many float contributions (micro-batch gradients)
// whose bits depend only on the set of contributions, never on how they are spread over
// ranks. Each contribution is coded at once into compress::exact's integer codes, with
// per-block exponents fixed for the step, and added into this rank's integer sum; the
// ranks' sums then add exactly in any allreduce of op::sum on the codes, and decode once.
// So 1 rank adding 8 micro-batches and 8 ranks adding one each give the same bits.
//
// How the exponents are agreed (every rank, every step):
//  1. begin(), then add() each contribution: coded at the step's exponents E[b], while
//     the largest exponent field each block saw is recorded (fields());
//  2. the caller allreduces fields() with op::max: the largest field of each block over
//     every contribution of the step, the same whatever the rank count;
//  3. needs_redo(): if a block saw a field above its E[b], a contribution was clamped:
//     E[b] becomes the agreed field and the step is added again (begin(), add() ...),
//     which cannot overflow now; otherwise the codes are exact as coded;
//  4. the caller allreduces codes() with op::sum, and decode() gives the sum;
//  5. the next step starts at E[b] = the larger of the agreed field + Headroom and the
//     step's largest field over all blocks less Span; the first step's E is the
//     smallest, so it always redoes once. The redo decision and every exponent derive
//     from maxima over the whole set of contributions: the same on every rank count.
// Why Span (default 0, every block at least the step's largest exponent): a block that
// was all zeros (a dead unit's weights) wakes up near the top and would force a redo,
// a whole recompute of the step; on the mini-trainer's MLP, Span 0 / 4 / 8 redid 1 / 19
// / 112 of 128 steps (docs/reproducibility.md). A higher exponent costs little: a value
// is coded exactly while within 2^(P - 24) of its block's exponent (P = 51 for Bits =
// 64) and below that rounds to the codes' grid, the same way on every rank count.
// A block where any contribution had a NaN or Inf decodes as NaN (the step's gradient is
// not finite; nothing is carried to the next step). MaxContributions bounds the number of
// contributions over all ranks in one step (the codes' headroom); this rank refuses more.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "gradsync/compress/concept.hpp"
#include "gradsync/compress/exact.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/kernels/exact_codes.hpp"

namespace gradsync::compress {

template <std::size_t Bits = 64,               ///< a code's width: 64, or 32
          std::size_t Block = 256,             ///< elements sharing one exponent
          std::size_t MaxContributions = 256,  ///< most contributions per step, all ranks
          int Headroom = 4,                    ///< bits above a block's last largest field
          int Span = 0>                        ///< bits an exponent may sit below the largest
class exact_accumulator {
  static_assert(Bits == 32 || Bits == 64,
                "gradsync::compress::exact_accumulator<Bits>: Bits is 64 or 32");
  static_assert(Block >= 8, "gradsync::compress::exact_accumulator<Bits, Block>: Block >= 8");
  static_assert(MaxContributions >= 1 &&
                    kernels::exact::ceil_log2(MaxContributions) <= static_cast<int>(Bits) - 9,
                "gradsync::compress::exact_accumulator: MaxContributions leaves a code fewer "
                "than 8 fraction bits; lower it or use Bits = 64");
  static_assert(MaxContributions >= 4 || Bits == 32,
                "gradsync::compress::exact_accumulator: MaxContributions of at least 4 (its "
                "one-pass coding keeps a guard bit above 61 fraction bits)");
  static_assert(Headroom >= 0 && Headroom <= 16,
                "gradsync::compress::exact_accumulator: Headroom is 0 to 16 bits");
  static_assert(Span >= 0 && Span <= 253,
                "gradsync::compress::exact_accumulator: Span is 0 to 253");

 public:
  /// An integer lane of the codes (what codes() holds).
  using code_type = std::conditional_t<Bits == 64, std::int64_t, std::int32_t>;
  /// A code's fraction bits below its block's next power of two.
  static constexpr int lane_bits = kernels::exact::lane_bits<code_type, MaxContributions>;

  /// For tensors of these element counts, back to back in every contribution (blocks of
  /// Block elements start at each tensor, as compress::exact's).
  explicit exact_accumulator(std::span<const std::size_t> tensor_counts) {
    std::vector<tensor_part> parts;
    for (std::size_t c : tensor_counts) {
      parts.push_back({count_, c, 0, 0});
      count_ += c;
    }
    detail::for_each_block<Block>(parts, count_, [&](std::size_t begin, std::size_t len) {
      blocks_.push_back({begin, len});
    });
    exponent_.assign(blocks_.size(), 1);  // the smallest: the first step redoes once
    decoded_at_ = exponent_;
    fields_.assign(2 * blocks_.size(), 0);
    codes_.assign(count_, 0);
  }

  /// Elements in a contribution.
  std::size_t size() const { return count_; }
  /// Blocks of the layout (fields() holds two entries per block).
  std::size_t blocks() const { return blocks_.size(); }

  /// Starts a step, or its redo: no contributions yet.
  void begin() {
    std::fill(codes_.begin(), codes_.end(), code_type{0});
    for (std::size_t b = 0; b < blocks_.size(); ++b) {
      fields_[b] = static_cast<std::int8_t>(1 - 128);
      fields_[blocks_.size() + b] = 0;
    }
    added_ = 0;
  }

  /// Adds one contribution (size() floats, the tensors back to back). A block holding a
  /// value above its exponent makes needs_redo() true after the agreement.
  void add(std::span<const float> x) {
    if (x.size() != count_) {
      throw error(errc::invalid_argument, error_site(),
                  "exact_accumulator::add: a contribution of " + std::to_string(x.size()) +
                      " floats, the layout has " + std::to_string(count_));
    }
    if (++added_ > MaxContributions) {
      throw error(
          errc::invalid_argument, error_site(),
          "exact_accumulator: more than MaxContributions = " + std::to_string(MaxContributions) +
              " contributions in one step (the codes' headroom); raise MaxContributions");
    }
    for (std::size_t b = 0; b < blocks_.size(); ++b) {
      const auto [at, len] = blocks_[b];
      // One pass: code and add at the step's exponent, and scan. A value whose field is
      // above its exponent adds 0: the step is redone at a higher exponent.
      const kernels::exact::block_scan s = kernels::exact::encode_add<code_type, lane_bits>(
          codes_.data() + at, x.data() + at, len, exponent_[b]);
      auto& seen = fields_[b];
      seen = std::max<std::int8_t>(seen, static_cast<std::int8_t>(s.field - 128));
      if (s.non_finite) fields_[blocks_.size() + b] = 1;
    }
  }

  /// What to allreduce with op::max once every contribution is added: per block the
  /// largest exponent field seen (less 128), then a NaN-or-Inf flag per block.
  std::span<std::int8_t> fields() { return fields_; }

  /// After fields() was reduced: true when the step must be added again (begin(), every
  /// add()), its exponents now raised to what the contributions need; false when the
  /// codes are complete (and the next step's exponents are set).
  bool needs_redo() {
    bool redo = false;
    for (std::size_t b = 0; b < blocks_.size(); ++b) {
      if (fields_[b] + 128 > exponent_[b]) {
        exponent_[b] = fields_[b] + 128;
        redo = true;
      }
    }
    if (redo) return true;
    decoded_at_ = exponent_;
    int top = 1;
    for (std::size_t b = 0; b < blocks_.size(); ++b) top = std::max(top, fields_[b] + 128);
    for (std::size_t b = 0; b < blocks_.size(); ++b)
      exponent_[b] = std::min(254, std::max(fields_[b] + 128 + Headroom, top - Span));
    return false;
  }

  /// What to allreduce with op::sum after needs_redo() said false.
  std::span<code_type> codes() { return codes_; }

  /// After codes() was reduced: the exact sum of every contribution, correctly rounded,
  /// divided by `divisor` (1 for the sum) in the same rounding.
  void decode(std::span<float> out, std::uint64_t divisor = 1) const {
    if (out.size() != count_) {
      throw error(errc::invalid_argument, error_site(),
                  "exact_accumulator::decode: " + std::to_string(out.size()) +
                      " floats for a layout of " + std::to_string(count_));
    }
    for (std::size_t b = 0; b < blocks_.size(); ++b) {
      const auto [at, len] = blocks_[b];
      if (fields_[blocks_.size() + b]) {
        std::fill(out.begin() + static_cast<std::ptrdiff_t>(at),
                  out.begin() + static_cast<std::ptrdiff_t>(at + len),
                  std::numeric_limits<float>::quiet_NaN());
        continue;
      }
      kernels::exact::decode<float, code_type, lane_bits>(out.data() + at, codes_.data() + at, len,
                                                          decoded_at_[b], divisor);
    }
  }

  /// Block b's exponent field for the next add() (tests, logs).
  int exponent(std::size_t b) const { return exponent_[b]; }

 private:
  struct span_of {
    std::size_t at, len;
  };
  std::vector<span_of> blocks_;
  std::size_t count_ = 0, added_ = 0;
  std::vector<int> exponent_, decoded_at_;
  std::vector<std::int8_t> fields_;
  std::vector<code_type> codes_;
};

}  // namespace gradsync::compress
