// SPDX-License-Identifier: Apache-2.0
// algo::nccl_ring reduces with CUDA kernels: a host-compiled file must be told to use nvcc.
#include <gradsync/allreduce.hpp>
#include <gradsync/algo/nccl_ring.hpp>
namespace gs = gradsync;
void f(gs::transport::nccl& t, float* gpu_ptr) {
  gs::allreduce<gs::algo::nccl_ring>(t, gs::device_span<float>(gpu_ptr, 10), gs::op::sum);
}
int main() {
  return 0;
}
