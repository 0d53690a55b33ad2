// SPDX-License-Identifier: Apache-2.0
// A std::span is host memory: given to a device transport's allgather it is refused,
// saying how to pass a GPU buffer.
#include <span>

#include <gradsync/gradsync.hpp>
namespace gs = gradsync;
struct device_like : gs::transport::local {  // stands in for transport::nccl
  static constexpr gs::memory_space memory = gs::memory_space::device;
  void synchronize(gs::deadline) {}
};
void f(device_like& t, std::span<const float> in, std::span<float> out) {
  gs::allgather(t, in, out);
}
