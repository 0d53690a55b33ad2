// SPDX-License-Identifier: Apache-2.0
// Compression codes buckets on the host: with a device-memory transport it is refused,
// saying what to use instead.
#include <gradsync/gradsync.hpp>
namespace gs = gradsync;
struct device_like : gs::transport::local {  // stands in for a device transport
  static constexpr gs::memory_space memory = gs::memory_space::device;
};
void f(device_like& t) {
  gs::allreducer<device_like, gs::algo::ring, gs::fusion::bucket<1 << 20>, gs::compress::topk<10>>
      ar(t);
}
