// SPDX-License-Identifier: Apache-2.0
// transport::cuda_ipc with a std::span must ask for a device_span too.
#include <span>
#include <gradsync/algo/native.hpp>
#include <gradsync/allreduce.hpp>
#include <gradsync/transport/cuda_ipc.hpp>
namespace gs = gradsync;
void f(gs::transport::cuda_ipc& t, std::span<float> host) {
  gs::allreduce<gs::algo::native>(t, host, gs::op::sum);
}
int main() {
  return 0;
}
