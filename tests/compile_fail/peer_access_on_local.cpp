// SPDX-License-Identifier: Apache-2.0
// An algorithm that reads peers' memory needs a peer-access transport (shm, cuda_ipc).
#include <vector>
#include <gradsync/gradsync.hpp>
namespace gs = gradsync;
struct reads_peer_memory : gs::algo::ring {  // a user algorithm declaring the need
  static constexpr gs::algorithm_traits traits{.needs_peer_access = true};
};
void f(gs::transport::local& t) {
  std::vector<float> v(4);
  gs::allreduce<reads_peer_memory>(t, std::span<float>(v), gs::op::sum);
}
