// SPDX-License-Identifier: Apache-2.0
// The tensors registered with an allreducer and what commit() makes of them: their
// descriptions and memory, the bucket plan every rank agreed on (fusion/plan_check.hpp),
// the arena the plan lays buckets out in (zero-copy home, or staging of packed buckets),
// and each bucket's tensors as a compression codec sees them. Not a template over the
// fusion policy (its parameters are values), so every allreducer shares this code.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gradsync/allreducer/arena_placement.hpp"
#include "gradsync/compress/concept.hpp"
#include "gradsync/core/deadline.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/core/function_ref.hpp"
#include "gradsync/core/log.hpp"
#include "gradsync/fusion/arena.hpp"
#include "gradsync/fusion/bucket.hpp"
#include "gradsync/fusion/concept.hpp"
#include "gradsync/fusion/plan.hpp"
#include "gradsync/fusion/plan_check.hpp"
#include "gradsync/fusion/tensor.hpp"

namespace gradsync::detail {

/// Each bucket's tensors as a compression codec sees them: offset (elements from the
/// bucket's start), count and shape, in layout order.
inline std::vector<std::vector<compress::tensor_part>> bucket_parts(
    const fusion::plan& p, const std::vector<fusion::tensor_desc>& descs) {
  std::vector<std::vector<compress::tensor_part>> parts(p.buckets.size());
  for (std::size_t b = 0; b < p.buckets.size(); ++b) {
    const auto& k = p.buckets[b];
    for (std::size_t i : k.tensors) {
      const std::size_t es = dtype_size(descs[i].type);
      parts[b].push_back({(p.tensor_offset[i] - k.offset) / es, descs[i].count, descs[i].shape.rows,
                          descs[i].shape.cols});
    }
  }
  return parts;
}

/// Registration and the committed plan, for a fusion policy given as values.
class tensor_registry {
 public:
  /// `bucket_bytes`: 0 for the fusion policy's caps, else this cap (and the policy's
  /// rule for the first bucket, fusion::default_first_bucket).
  /// `codec`: the compression policy's name, part of the plan's digest (ranks that would
  /// code the same buckets differently, fp16 against bf16, disagree at commit()).
  tensor_registry(std::size_t rank, fusion::policy_values fusion, std::size_t bucket_bytes,
                  std::string_view codec = {})
      : rank_(rank),
        codec_(codec),
        fusion_(fusion),
        bucket_bytes_(bucket_bytes ? bucket_bytes : fusion.bucket_bytes),
        first_bucket_bytes_(bucket_bytes ? fusion::default_first_bucket(bucket_bytes)
                                         : fusion.first_bucket_bytes) {
    if (bucket_bytes && !fusion.fused()) {
      throw error(errc::invalid_argument, site(),
                  "allreducer_options::bucket_bytes = " + std::to_string(bucket_bytes) +
                      " needs a fusing policy (fusion::bucket<Bytes> or zero_copy<Bytes>); " +
                      std::string(fusion.name) + " fuses nothing (leave it 0)");
    }
  }

  /// True when the tensors live in the arena (fusion::zero_copy).
  bool zero_copy() const { return fusion_.zero_copy(); }

  /// Registers one tensor (null data with zero-copy: the arena's, after commit).
  std::size_t add(const tensor_ref& r, std::string name, matrix_shape shape = {}) {
    if (committed_) {
      throw error(errc::invalid_argument, site(),
                  "add() after commit(): register every tensor before committing the plan");
    }
    if (!zero_copy() && !r.data && r.count) {
      throw error(
          errc::invalid_argument, site(),
          "tensor #" + std::to_string(descs_.size()) + " has a null pointer and a non-zero count");
    }
    // Checked multiply: a product that wraps could equal the count, and PowerSGD would
    // then size its factors from the bogus shape.
    std::size_t elements = 0;
    const bool wraps =
        (shape.rows || shape.cols) && __builtin_mul_overflow(shape.rows, shape.cols, &elements);
    if ((shape.rows || shape.cols) && (wraps || elements != r.count)) {
      throw error(errc::invalid_argument, site(),
                  "tensor #" + std::to_string(descs_.size()) +
                      (name.empty() ? std::string() : " ('" + name + "')") + " has " +
                      std::to_string(r.count) + " elements but its shape is " +
                      std::to_string(shape.rows) + " x " + std::to_string(shape.cols) +
                      (wraps ? " (whose product overflows size_t)" : ""));
    }
    descs_.push_back({r.count, r.type, std::move(name), shape});
    ptrs_.push_back(r.data);
    return descs_.size() - 1;
  }

  /// Computes the plan and checks it with every rank of t (collective), then lets
  /// `accept(i)` refuse tensor i by throwing (the element types the allreducer was not
  /// built for), then lays out the arena. Committed only when all of that succeeded;
  /// `op` names the reduction in the log.
  template <class Tr>
  void commit(Tr& t, deadline d, std::string_view op, function_ref<void(std::size_t)> accept) {
    if (committed_) throw error(errc::invalid_argument, site(), "commit() called twice");
    plan_ = fusion::make_plan(descs_, bucket_bytes_, first_bucket_bytes_, fusion_.order,
                              fusion_.storage);
    for (char c : codec_)
      plan_.digest = fusion::detail::mix(plan_.digest, static_cast<unsigned char>(c));
    fusion::check_plan(t, std::span<const fusion::tensor_desc>(descs_), plan_, d);
    for (std::size_t i = 0; i < descs_.size(); ++i) accept(i);
    const bool need_layout =
        zero_copy() || std::any_of(plan_.buckets.begin(), plan_.buckets.end(),
                                   [](const auto& b) { return b.tensors.size() > 1; });
    if (need_layout) place_arena(t, arena_, plan_.layout_bytes);
    lay_out();
    log_plan(op);
  }

  bool committed() const { return committed_; }
  std::size_t size() const { return descs_.size(); }
  const fusion::tensor_desc& desc(std::size_t i) const { return descs_[i]; }
  const fusion::plan& plan() const { return plan_; }
  /// Tensor i's memory (the arena's with zero-copy).
  const std::vector<void*>& ptrs() const { return ptrs_; }
  /// The plan's flat layout (null when no bucket packs several tensors).
  std::byte* layout() { return arena_.data(); }
  /// Bucket b's tensors with their offsets (elements) and shapes.
  std::span<const compress::tensor_part> parts(std::size_t b) const { return parts_[b]; }
  std::size_t bucket_bytes() const { return bucket_bytes_; }
  std::size_t first_bucket_bytes() const { return first_bucket_bytes_; }

  /// Zero-copy: tensor i's storage in the arena, as T.
  template <class T>
  std::span<T> view(std::size_t i) {
    check_index(i);
    if (descs_[i].type != dtype_of<T>::value) {
      throw error(errc::invalid_argument, site(),
                  "view<T>(" + std::to_string(i) + "): tensor is " +
                      std::string(dtype_name(descs_[i].type)) + ", not " +
                      std::string(dtype_name(dtype_of<T>::value)));
    }
    return arena_.view<T>(plan_.tensor_offset[i], descs_[i].count);
  }

  void check_index(std::size_t i) const {
    require_committed();
    if (i >= descs_.size()) {
      throw error(errc::invalid_argument, site(),
                  "tensor index " + std::to_string(i) + " out of range (" +
                      std::to_string(descs_.size()) + " registered)");
    }
  }
  void require_committed() const {
    if (!committed_) {
      throw error(errc::invalid_argument, site(),
                  "register tensors with add() and call commit() before ready()/view()/wait()");
    }
  }
  /// " ('name')" for a named tensor, "" otherwise.
  std::string label(std::size_t i) const {
    return descs_[i].name.empty() ? std::string() : " ('" + descs_[i].name + "')";
  }

 private:
  error_site site() const { return {rank_, error_site::npos, ~std::uint64_t{0}}; }

  /// After the plan is agreed and the arena placed: zero-copy tensors' homes in it, and
  /// each bucket's parts; the registry is then committed.
  void lay_out() {
    if (zero_copy()) {
      for (std::size_t i = 0; i < descs_.size(); ++i)
        ptrs_[i] = arena_.data() + plan_.tensor_offset[i];
    }
    parts_ = bucket_parts(plan_, descs_);
    committed_ = true;
  }

  void log_plan(std::string_view op) const {
    log(log_level::info, rank_, "bucket plan (%s, op %s): %s", std::string(fusion_.name).c_str(),
        std::string(op).c_str(), plan_.describe().c_str());
    if (!log_enabled(log_level::debug)) return;
    for (std::size_t b = 0; b < plan_.buckets.size(); ++b) {
      const auto& k = plan_.buckets[b];
      std::string ts;
      for (std::size_t i : k.tensors) {
        ts += ' ';
        ts += std::to_string(i);  // (not " " + to_string: g++ 12 -O3 -Wrestrict false positive)
      }
      log(log_level::debug, rank_, "bucket %zu: %s, %zu bytes at offset %zu, tensors%s", b,
          std::string(dtype_name(k.type)).c_str(), k.bytes(), k.offset, ts.c_str());
    }
  }

  std::size_t rank_;
  std::string_view codec_;  // a policy's static name
  fusion::policy_values fusion_;
  std::size_t bucket_bytes_, first_bucket_bytes_;  // the plan's caps
  std::vector<fusion::tensor_desc> descs_;
  std::vector<void*> ptrs_;  // registered tensors' memory (the arena's, in zero-copy mode)
  fusion::plan plan_;
  fusion::arena arena_;  // zero-copy home, or staging of the registered packed buckets
  std::vector<std::vector<compress::tensor_part>> parts_;  // plan_'s buckets' tensors
  bool committed_ = false;
};

}  // namespace gradsync::detail
