// SPDX-License-Identifier: Apache-2.0
// Which sub-groups of a transport::two_level can be two_levels themselves, and how they
// are numbered (two_level::split). A colour's ranks form one only when every node they
// use holds the same number of them at the same local indices: its new Intra groups are
// then splits of the old ones and its new Inter groups splits of the old Inter groups
// (the old levels are all the links there are). Every rank sees the whole job's table,
// so every rank reaches the same verdict.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gradsync/transport/split.hpp"

namespace gradsync::transport::detail {

/// What two_level::split does, as every rank works it out from the job's table.
struct two_level_split_plan {
  std::string fault;  // "" when every colour's ranks form a two-level layout
  int node_key = 0;   // this rank's node's place among its colour's nodes
};

/// job[g]: two_level rank g's colour and key (g = node * per_node + local index);
/// `me`: this rank. A colour's nodes are ordered by the smallest key on each (ties: by
/// node), its ranks inside a node by key, then by rank (as the Intra split orders them).
inline two_level_split_plan plan_two_level_split(const std::vector<split_entry>& job,
                                                 std::size_t per_node, std::size_t me) {
  two_level_split_plan plan;
  const std::size_t nodes = job.size() / per_node;
  auto ranks_text = [&](std::size_t node, const std::vector<std::size_t>& locals) {
    std::string s = locals.size() == 1 ? "rank " : "ranks ";
    for (std::size_t k = 0; k < locals.size(); ++k) {
      s += (k ? ", " : "") + std::to_string(node * per_node + locals[k]);
    }
    return s;
  };
  std::vector<bool> done(job.size());
  for (std::size_t first = 0; first < job.size(); ++first) {  // each colour once
    if (done[first]) continue;
    const std::int64_t color = job[first].color;
    // used[i]: a node holding this colour and its members (local indices, new order).
    std::vector<std::pair<std::size_t, std::vector<std::size_t>>> used;
    for (std::size_t m = 0; m < nodes; ++m) {
      const std::vector<split_entry> node(
          job.begin() + static_cast<std::ptrdiff_t>(m * per_node),
          job.begin() + static_cast<std::ptrdiff_t>((m + 1) * per_node));
      std::vector<std::size_t> locals = split_members(node, color);
      for (std::size_t i : locals) done[m * per_node + i] = true;
      if (!locals.empty()) used.emplace_back(m, std::move(locals));
    }
    std::stable_sort(used.begin(), used.end(), [&](const auto& a, const auto& b) {
      return job[a.first * per_node + a.second[0]].key < job[b.first * per_node + b.second[0]].key;
    });
    const auto& [m0, l0] = used[0];
    for (std::size_t u = 1; u < used.size() && plan.fault.empty(); ++u) {
      const auto& [m, l] = used[u];
      const std::string head = "two_level split: the ranks of color " + std::to_string(color);
      const std::string fix =
          ". Choose colors that take the same local indices (in the same key order) on every "
          "node they use, or split a flat transport (mpi)";
      if (l.size() != l0.size()) {
        plan.fault = head + " fill their nodes unevenly (node " + std::to_string(m0) + " holds " +
                     ranks_text(m0, l0) + ", node " + std::to_string(m) + " holds " +
                     ranks_text(m, l) + ")" + fix;
      } else {
        for (std::size_t j = 0; j < l.size() && plan.fault.empty(); ++j) {
          if (l[j] == l0[j]) continue;
          plan.fault = head + " sit at different local indices on different nodes (rank " +
                       std::to_string(m0 * per_node + l0[j]) + " is local index " +
                       std::to_string(l0[j]) + " on node " + std::to_string(m0) + ", rank " +
                       std::to_string(m * per_node + l[j]) + " is local index " +
                       std::to_string(l[j]) + " on node " + std::to_string(m) +
                       ", and both would be local rank " + std::to_string(j) +
                       " of the new group, which only the old Inter groups could link)" + fix;
        }
      }
    }
    if (color == job[me].color) {
      for (std::size_t u = 0; u < used.size(); ++u) {
        if (used[u].first == me / per_node) plan.node_key = static_cast<int>(u);
      }
    }
  }
  return plan;
}

}  // namespace gradsync::transport::detail
