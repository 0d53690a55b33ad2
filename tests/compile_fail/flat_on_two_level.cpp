// SPDX-License-Identifier: Apache-2.0
// A transport::two_level runs algo::hierarchical only; a flat algorithm is refused.
#include <vector>
#include <gradsync/algo/hierarchical.hpp>
#include <gradsync/gradsync.hpp>
namespace gs = gradsync;
void f(gs::transport::two_level<gs::transport::local, gs::transport::local>& t) {
  std::vector<float> v(4);
  gs::allreduce<gs::algo::ring>(t, std::span<float>(v), gs::op::sum);
}
