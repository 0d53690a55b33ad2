// SPDX-License-Identifier: Apache-2.0
// Over three levels (a two_level whose Inter is a two_level) only allreduce runs: the
// other collectives say so instead of failing deep inside their two-level code.
#include <vector>
#include <gradsync/gradsync.hpp>
namespace gs = gradsync;
using inner = gs::transport::two_level<gs::transport::local, gs::transport::local>;
void f(gs::transport::two_level<gs::transport::local, inner>& t) {
  std::vector<float> v(4);
  gs::broadcast(t, std::span<float>(v), 0);
}
