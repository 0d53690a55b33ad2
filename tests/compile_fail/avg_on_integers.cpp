// SPDX-License-Identifier: Apache-2.0
// op::avg on an integer type must be rejected: integer division would hide truncation.
#include <cstdint>
#include <vector>
#include <gradsync/gradsync.hpp>
namespace gs = gradsync;
void f(gs::transport::local& t) {
  std::vector<std::int32_t> v(4);
  gs::allreduce<gs::algo::ring>(t, std::span<std::int32_t>(v), gs::op::avg);
}
