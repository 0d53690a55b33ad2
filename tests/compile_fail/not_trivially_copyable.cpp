// SPDX-License-Identifier: Apache-2.0
// An element type whose bytes cannot be copied between ranks must be rejected.
#include <string>
#include <vector>
#include <gradsync/gradsync.hpp>
namespace gs = gradsync;
void f(gs::transport::local& t) {
  std::vector<std::string> v(4);
  gs::allreduce<gs::algo::ring>(t, std::span<std::string>(v), gs::op::sum);
}
