// SPDX-License-Identifier: Apache-2.0
// A program outside the gradsync tree: 3 in-process ranks, one allreduce, exact check.
#include <cstdio>
#include <vector>

#include <gradsync/gradsync.hpp>

int main() {
  namespace gs = gradsync;
  int bad = 0;
  gs::transport::run_local(3, [&](gs::transport::local& t) {
    std::vector<double> v(100, double(t.rank() + 1));
    gs::allreduce<gs::algo::ring>(t, std::span<double>(v), gs::op::sum);
    for (double x : v) bad += x != 6.0;
  });
  std::printf("consumer: allreduce over 3 ranks %s\n", bad ? "WRONG" : "ok (every element 6)");
  return bad ? 1 : 0;
}
