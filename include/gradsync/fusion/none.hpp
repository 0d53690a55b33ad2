// fusion::none — every tensor is its own allreduce.
#pragma once

#include <string_view>

namespace gradsync::fusion {

/// No fusion: one collective per tensor.
struct none {
  static constexpr std::string_view name = "none";
};

}  // namespace gradsync::fusion
