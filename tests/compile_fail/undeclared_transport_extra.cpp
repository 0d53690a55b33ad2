// SPDX-License-Identifier: Apache-2.0
// A transport member function its traits do not declare would be silently ignored
// (here: crosses_network(), which widens the algorithms' windows across a network).
#include <vector>
#include <gradsync/gradsync.hpp>
namespace gs = gradsync;
struct spans_hosts : gs::transport::local {
  using local::local;
  bool crosses_network() const { return true; }  // traits still say it has none
};
void f(spans_hosts& t) {
  std::vector<float> v(4);
  gs::allreduce<gs::algo::ring>(t, std::span<float>(v), gs::op::sum);
}
