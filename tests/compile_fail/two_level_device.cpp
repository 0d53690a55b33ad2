// SPDX-License-Identifier: Apache-2.0
// transport::two_level is for host memory; a device transport is refused with advice.
#include <gradsync/algo/hierarchical.hpp>
#include <gradsync/gradsync.hpp>
namespace gs = gradsync;
struct device_like : gs::transport::local {  // stands in for a device transport
  static constexpr gs::memory_space memory = gs::memory_space::device;
};
gs::transport::two_level<device_like, device_like>* p = nullptr;
static_assert(sizeof(*p) > 0);
