// SPDX-License-Identifier: Apache-2.0
// A trivially copyable type that is not one of the six element types must be rejected.
#include <vector>
#include <gradsync/gradsync.hpp>
namespace gs = gradsync;
void f(gs::transport::local& t) {
  std::vector<short> v(4);
  gs::allreduce<gs::algo::ring>(t, std::span<short>(v), gs::op::sum);
}
