// SPDX-License-Identifier: Apache-2.0
// The in-place overload writes its buffer: a span of const elements must be rejected.
#include <vector>
#include <gradsync/gradsync.hpp>
namespace gs = gradsync;
void f(gs::transport::local& t) {
  const std::vector<float> v(4);
  gs::allreduce<gs::algo::ring>(t, std::span<const float>(v), gs::op::sum);
}
