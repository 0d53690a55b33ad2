// SPDX-License-Identifier: Apache-2.0
// How split(color, key) orders a sub-group, for the transports that form sub-groups
// themselves (local, shm; mpi asks MPI_Comm_split, which orders the same way).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace gradsync::transport::detail {

/// One rank's arguments to split().
struct split_entry {
  std::int64_t color;
  std::int64_t key;
};

/// The ranks whose entry has `color`, ordered by key, ties by rank (MPI_Comm_split's
/// order): element i is the rank that becomes rank i of the new group.
inline std::vector<std::size_t> split_members(const std::vector<split_entry>& all,
                                              std::int64_t color) {
  std::vector<std::size_t> members;
  for (std::size_t q = 0; q < all.size(); ++q) {
    if (all[q].color == color) members.push_back(q);
  }
  std::stable_sort(members.begin(), members.end(),
                   [&](std::size_t a, std::size_t b) { return all[a].key < all[b].key; });
  return members;
}

}  // namespace gradsync::transport::detail
