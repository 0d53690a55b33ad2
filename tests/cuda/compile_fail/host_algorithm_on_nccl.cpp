// SPDX-License-Identifier: Apache-2.0
// The host ring (host scratch, host reductions) on transport::nccl must point to
// algo::native / algo::nccl_ring.
#include <gradsync/allreduce.hpp>
#include <gradsync/algo/ring.hpp>
#include <gradsync/transport/nccl.hpp>
namespace gs = gradsync;
void f(gs::transport::nccl& t, float* gpu_ptr) {
  gs::allreduce<gs::algo::ring>(t, gs::device_span<float>(gpu_ptr, 10), gs::op::sum);
}
int main() {
  return 0;
}
