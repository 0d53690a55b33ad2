// SPDX-License-Identifier: Apache-2.0
// An algorithm with run_bytes whose traits leave out on_bytes does not compile (an
// allreducer would otherwise restore the element type for it without a word).
#include <vector>
#include <gradsync/gradsync.hpp>
namespace gs = gradsync;
struct undeclared : gs::algo::ring {
  static constexpr std::string_view name = "undeclared";
  static constexpr gs::algorithm_traits traits{.generic = true};
};
void f(gs::transport::local& t) {
  std::vector<float> v(4);
  gs::allreduce<undeclared>(t, std::span<float>(v), gs::op::sum);
}
