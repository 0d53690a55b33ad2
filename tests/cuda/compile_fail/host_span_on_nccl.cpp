// SPDX-License-Identifier: Apache-2.0
// A std::span (host memory) handed to transport::nccl must ask for a device_span.
#include <span>
#include <gradsync/algo/native.hpp>
#include <gradsync/allreduce.hpp>
#include <gradsync/transport/nccl.hpp>
namespace gs = gradsync;
void f(gs::transport::nccl& t, std::span<float> host) {
  gs::allreduce<gs::algo::native>(t, host, gs::op::sum);
}
int main() {
  return 0;
}
