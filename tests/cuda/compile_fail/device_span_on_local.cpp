// SPDX-License-Identifier: Apache-2.0
// Device memory handed to a host-only transport (local) must name the device transports.
#include <gradsync/core/device_memory.hpp>
#include <gradsync/gradsync.hpp>
namespace gs = gradsync;
void f(gs::transport::local& t, float* gpu_ptr) {
  gs::allreduce<gs::algo::ring>(t, gs::device_span<float>(gpu_ptr, 10), gs::op::sum);
}
int main() {
  return 0;
}
