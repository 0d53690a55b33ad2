// SPDX-License-Identifier: Apache-2.0
// One asynchronous operation of an allreducer — a step of its registered tensors, a
// grouped call, or one tensor — as buckets of a plan: where each bucket's elements are
// reduced (in the tensor itself, or packed into a flat layout), the copies in and out of
// that layout, the completion its handles wait on, and the statistics it gathers.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <memory>
#include <vector>

#include "gradsync/allreducer/bucket_step.hpp"
#include "gradsync/compress/concept.hpp"
#include "gradsync/core/async.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/fusion/arena.hpp"
#include "gradsync/fusion/plan.hpp"
#include "gradsync/kernels/finite.hpp"
#include "gradsync/observe/stats.hpp"

namespace gradsync::detail {

struct batch {
  const fusion::plan* plan = nullptr;
  fusion::plan own_plan;                                      // grouped calls: their own plan
  std::vector<std::vector<compress::tensor_part>> own_parts;  // its buckets' tensors (codecs)
  const std::vector<void*>* ptrs = nullptr;                   // tensor i's memory
  std::vector<void*> own_ptrs;
  std::byte* layout = nullptr;             // the flat layout (arena or staging)
  std::shared_ptr<fusion::arena> staging;  // grouped calls: borrowed from the pool
  bool packed = true;       // false: the tensors live in the layout (zero-copy arena)
  bool registered = false;  // the registered plan's step: codecs keep state per bucket
  std::uint64_t step = 0;   // registered: the step's number (agreed before bucket 0)
  bucket_runner_base::step_table steps{};  // the element-type steps
  std::shared_ptr<completion> done;        // what the operation's handles wait on
  std::atomic<std::size_t> jobs_left{0};
  observe::call_stats stats;
  std::chrono::steady_clock::time_point created = std::chrono::steady_clock::now();

  /// Where bucket k is reduced: a lone packed tensor in place, else in the layout.
  std::byte* bucket_data(std::size_t k) const {
    const auto& bk = plan->buckets[k];
    if (packed && bk.tensors.size() == 1) return static_cast<std::byte*>((*ptrs)[bk.tensors[0]]);
    return layout ? layout + bk.offset : nullptr;
  }
  /// Tensor i's memory: its own, or its place in the layout when the tensors live there.
  const void* where(std::size_t i) const {
    return packed ? (*ptrs)[i] : static_cast<const void*>(layout + plan->tensor_offset[i]);
  }
  /// True when bucket k is copied into the layout before and out of it after.
  bool copies(std::size_t k) const { return packed && plan->buckets[k].tensors.size() > 1; }
  /// Copies bucket k's tensors into the layout.
  void pack(std::size_t k) {
    for (std::size_t i : plan->buckets[k].tensors) {
      const std::size_t n = plan->tensor_bytes[i];
      if (n) std::memcpy(layout + plan->tensor_offset[i], (*ptrs)[i], n);
    }
  }
  /// Where a NaN or Inf is: bucket k's first tensor that has one and its index there.
  struct non_finite {
    std::size_t tensor = npos, index = 0;
    const void* value = nullptr;  // the element
  };
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

  /// pack(k) that also finds the first NaN or Inf in the same pass (check_finite); with
  /// nothing to copy, a pass over the tensors where they are.
  non_finite pack_checked(std::size_t k) {
    non_finite found;
    visit_dtype(plan->buckets[k].type, [&](auto tv) {
      using T = decltype(tv);
      for (std::size_t i : plan->buckets[k].tensors) {
        const std::size_t n = plan->tensor_bytes[i] / sizeof(T);
        const T* src = static_cast<const T*>(where(i));
        const std::size_t at =
            copies(k) ? kernels::copy_first_non_finite(
                            reinterpret_cast<T*>(layout + plan->tensor_offset[i]), src, n)
                      : kernels::first_non_finite(src, n);
        if (at < n && found.tensor == npos) found = {i, at, src + at};
      }
    });
    return found;
  }

  /// Copies bucket k's reduced tensors back to their memory.
  void unpack(std::size_t k) {
    for (std::size_t i : plan->buckets[k].tensors) {
      const std::size_t n = plan->tensor_bytes[i];
      if (n) std::memcpy((*ptrs)[i], layout + plan->tensor_offset[i], n);
    }
  }
};

}  // namespace gradsync::detail
