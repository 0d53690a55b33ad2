// SPDX-License-Identifier: Apache-2.0
// The composition table recurses into the levels of a two_level: algo::native across
// nodes needs an Inter with its own allreduce, and transport::local has none.
#include <vector>
#include <gradsync/algo/native.hpp>
#include <gradsync/gradsync.hpp>
namespace gs = gradsync;
void f(gs::transport::two_level<gs::transport::local, gs::transport::local>& t) {
  std::vector<float> v(4);
  gs::allreduce<gs::algo::hierarchical<gs::algo::native>>(t, std::span<float>(v), gs::op::sum);
}
