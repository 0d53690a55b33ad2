// SPDX-License-Identifier: Apache-2.0
// kernels::scale on an integer type must be rejected: the float product converted back
// to the integer type is undefined behaviour when it leaves the type's range.
#include <cstdint>
#include <vector>
#include <gradsync/kernels/host.hpp>
namespace gs = gradsync;
void f() {
  std::vector<std::int32_t> v(4);
  gs::kernels::scale(v.data(), v.size(), 0.5f);
}
