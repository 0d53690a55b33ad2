// SPDX-License-Identifier: Apache-2.0
// broadcast / allgather / reduce_scatter on device memory run the transport's own
// collective: a device transport without one is refused, naming the one that has it.
#include <gradsync/gradsync.hpp>
namespace gs = gradsync;
struct device_like : gs::transport::local {  // a device transport without the three calls
  static constexpr gs::memory_space memory = gs::memory_space::device;
  void synchronize(gs::deadline) {}
};
void f(device_like& t, float* d) {
  gs::broadcast(t, gs::device_span<float>(d, 10), 0);
}
