// SPDX-License-Identifier: Apache-2.0
// The composition table recurses into every level: with three levels the algorithm
// across the nodes runs on a two_level, so it must be a hierarchical one too.
#include <vector>
#include <gradsync/gradsync.hpp>
namespace gs = gradsync;
using inner = gs::transport::two_level<gs::transport::local, gs::transport::local>;
void f(gs::transport::two_level<gs::transport::local, inner>& t) {
  std::vector<float> v(4);
  gs::allreduce<gs::algo::hierarchical<gs::algo::ring>>(t, std::span<float>(v), gs::op::sum);
}
