// SPDX-License-Identifier: Apache-2.0
// kernels::cast to an integer type must be rejected: a float that does not fit the
// destination type is undefined behaviour when converted.
#include <cstdint>
#include <vector>
#include <gradsync/kernels/host.hpp>
namespace gs = gradsync;
void f() {
  std::vector<float> src(4);
  std::vector<std::int64_t> dst(4);
  gs::kernels::cast(dst.data(), src.data(), src.size());
}
