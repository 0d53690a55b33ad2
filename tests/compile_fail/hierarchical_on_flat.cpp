// SPDX-License-Identifier: Apache-2.0
// algo::hierarchical needs a transport::two_level (a node's transport plus one across nodes).
#include <vector>
#include <gradsync/algo/hierarchical.hpp>
#include <gradsync/gradsync.hpp>
namespace gs = gradsync;
void f(gs::transport::local& t) {
  std::vector<float> v(4);
  gs::allreduce<gs::algo::hierarchical<>>(t, std::span<float>(v), gs::op::sum);
}
