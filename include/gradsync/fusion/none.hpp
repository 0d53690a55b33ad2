// SPDX-License-Identifier: Apache-2.0
// fusion::none — every tensor is its own allreduce.
#pragma once

#include <cstddef>
#include <string_view>

#include "gradsync/fusion/concept.hpp"

namespace gradsync::fusion {

/// No fusion: one collective per tensor (grouped calls loop over the list).
struct none {
  static constexpr std::string_view name = "none";
  static constexpr std::size_t bucket_bytes = 0;        // 0: nothing is fused
  static constexpr std::size_t first_bucket_bytes = 0;  // unused without buckets
  static constexpr fusion::storage storage = fusion::storage::packed;
  static constexpr fusion::order order = fusion::order::reverse;
};

static_assert(fusion_policy<none>);

}  // namespace gradsync::fusion
