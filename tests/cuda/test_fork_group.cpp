// SPDX-License-Identifier: Apache-2.0
// fork_group, the MPI-free bootstrap of transport::cuda_ipc, on the CPU: processes see
// each other's allgather contributions, barriers hold, and exit statuses combine
// (all 77 -> 77 skipped, any failure -> non-zero).
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include <gradsync/transport/cuda_ipc/fork.hpp>

using gradsync::transport::fork_group;

TEST_CASE("fork_group allgather and barrier across 4 processes") {
  const int rc = fork_group::run_forked(4, [](fork_group& g) {
    int bad = 0;
    for (std::uint64_t round = 0; round < 50; ++round) {
      const std::uint64_t mine = g.rank() * 1000 + round;
      std::vector<std::uint64_t> all(g.size());
      g.allgather(&mine, all.data(), sizeof mine);
      for (std::size_t r = 0; r < g.size(); ++r) bad += all[r] != r * 1000 + round;
    }
    g.barrier();
    return bad == 0 ? 0 : 1;
  });
  CHECK(rc == 0);
}

TEST_CASE("fork_group exit statuses: all skipped -> 77, one failure -> non-zero") {
  CHECK(fork_group::run_forked(3, [](fork_group&) { return 77; }) == 77);
  CHECK(fork_group::run_forked(3, [](fork_group& g) { return g.rank() == 1 ? 3 : 0; }) == 3);
  CHECK(fork_group::run_forked(2, [](fork_group& g) { return g.rank() == 0 ? 77 : 0; }) != 0);
}

TEST_CASE("fork_group barrier times out when a peer never arrives") {
  const int rc = fork_group::run_forked(2, [](fork_group& g) {
    if (g.rank() == 1) return 0;  // leaves without the barrier
    try {
      g.barrier(0.5);
    } catch (const gradsync::error& e) {
      return e.code() == gradsync::errc::timeout ? 0 : 1;
    }
    return 1;
  });
  CHECK(rc == 0);
}
