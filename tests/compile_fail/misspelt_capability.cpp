// SPDX-License-Identifier: Apache-2.0
// A misspelt capability does not compile (it would otherwise silently do nothing).
#include <vector>
#include <gradsync/gradsync.hpp>
namespace gs = gradsync;
struct sloppy : gs::algo::ring {
  static constexpr gs::algorithm_traits traits{.checks_header = true};
};
void f(gs::transport::local& t) {
  std::vector<float> v(4);
  gs::allreduce<sloppy>(t, std::span<float>(v), gs::op::sum);
}
