// SPDX-License-Identifier: Apache-2.0
// algo::native calls the transport's own allreduce; transport::local has none.
#include <vector>
#include <gradsync/gradsync.hpp>
#include <gradsync/algo/native.hpp>
namespace gs = gradsync;
void f(gs::transport::local& t) {
  std::vector<float> v(4);
  gs::allreduce<gs::algo::native>(t, std::span<float>(v), gs::op::sum);
}
