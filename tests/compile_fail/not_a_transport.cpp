// SPDX-License-Identifier: Apache-2.0
// Passing something that is not a transport names the concept and the transports.
#include <vector>
#include <gradsync/gradsync.hpp>
namespace gs = gradsync;
struct my_socket {};
void f(my_socket& s) {
  std::vector<float> v(4);
  gs::allreduce<gs::algo::ring>(s, std::span<float>(v), gs::op::sum);
}
