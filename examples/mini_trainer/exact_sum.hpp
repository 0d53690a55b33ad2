// SPDX-License-Identifier: Apache-2.0
// --reproducible: the step's gradient as the exact sum of its micro-batches' gradients.
// The global batch is cut into M fixed micro-batches (by position in the batch, never by
// rank); rank r computes micro-batches r, r + n, ... in ordinary float math, and each is
// coded at once into compress::exact_accumulator's integer codes. The ranks' codes add
// exactly in any allreduce, so the decoded gradient, and every weight after it, has the
// same bits for any rank count <= M, transport, algorithm and bucket size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <gradsync/compress/exact_accumulator.hpp>

namespace mini_trainer {

class exact_sum {
 public:
  /// At most 256 micro-batches a step (--micro-batches' limit): the codes' headroom.
  using accumulator = gradsync::compress::exact_accumulator<64, 256, 256>;

  /// Over the gradient tensors (spans into one flat arena, in order).
  explicit exact_sum(const std::vector<std::span<float>>& tensors)
      : acc_(counts(tensors)), counts_(counts(tensors)) {}

  /// The codes of each tensor, for the synchronizer (op::sum).
  std::vector<std::span<std::int64_t>> code_tensors() {
    std::vector<std::span<std::int64_t>> out;
    std::size_t at = 0;
    for (std::size_t c : counts_) {
      out.push_back(acc_.codes().subspan(at, c));
      at += c;
    }
    return out;
  }

  /// Adds this rank's micro-batches (add_mine(acc, attempt)), agrees the exponents with
  /// agree_max(fields) (an allreduce of op::max), and adds them again while a block
  /// outgrew its exponent. Returns how many times the step was redone (0 or 1).
  template <class AddMine, class AgreeMax>
  std::size_t accumulate(AddMine&& add_mine, AgreeMax&& agree_max) {
    for (std::size_t attempt = 0;; ++attempt) {
      acc_.begin();
      add_mine(acc_, attempt);
      agree_max(acc_.fields());
      if (!acc_.needs_redo()) {
        redos_ += attempt;
        return attempt;
      }
    }
  }

  /// The summed gradient, once the synchronizer has summed the codes.
  void decode(std::vector<float>& g) const { acc_.decode(g); }
  /// Steps redone so far (a block's gradient outgrew last step's exponent + headroom).
  std::size_t redos() const { return redos_; }

 private:
  static std::vector<std::size_t> counts(const std::vector<std::span<float>>& tensors) {
    std::vector<std::size_t> c;
    for (const auto& t : tensors) c.push_back(t.size());
    return c;
  }

  accumulator acc_;
  std::vector<std::size_t> counts_;
  std::size_t redos_ = 0;
};

}  // namespace mini_trainer
