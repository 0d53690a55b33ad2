// SPDX-License-Identifier: Apache-2.0
// compress::none — values go on the wire as they are.
#pragma once

#include <string_view>

namespace gradsync::compress {

/// No compression: the wire carries the element type itself.
struct none {
  static constexpr std::string_view name = "none";
  template <class T>
  using wire_t = T;
};

}  // namespace gradsync::compress
