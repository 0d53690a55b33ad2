// SPDX-License-Identifier: Apache-2.0
// Threads as the ranks of a transport::two_level<local, local>: each rank is placed in a
// node (its Intra group) and at a local index (its Inter group), both in-process groups.
// Used by the hierarchical algorithm's tests and the allreducer's two-level tests.
#pragma once

#include <cstddef>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gradsync/transport/local.hpp>
#include <gradsync/transport/local/group.hpp>

namespace gradsync::testbed {

/// Runs body(intra, inter) on one thread per rank; node_of / local_of place each rank.
/// Returns each rank's error message ("" when it succeeded).
template <class Body>
std::vector<std::string> run_two_level(const std::vector<std::size_t>& node_of,
                                       const std::vector<std::size_t>& local_of, Body&& body) {
  using gradsync::transport::local;
  using group = gradsync::transport::detail::local_group;
  const std::size_t n = node_of.size();
  std::vector<std::vector<std::size_t>> nodes, columns;  // members, in rank order
  for (std::size_t r = 0; r < n; ++r) {
    if (nodes.size() <= node_of[r]) nodes.resize(node_of[r] + 1);
    if (columns.size() <= local_of[r]) columns.resize(local_of[r] + 1);
    nodes[node_of[r]].push_back(r);
    columns[local_of[r]].push_back(r);
  }
  std::vector<std::shared_ptr<group>> node_g, col_g;
  for (auto& m : nodes) node_g.push_back(std::make_shared<group>(m.size()));
  for (auto& m : columns) col_g.push_back(std::make_shared<group>(m.size()));
  auto index_in = [](const std::vector<std::size_t>& m, std::size_t r) {
    std::size_t i = 0;
    while (m[i] != r) ++i;
    return i;
  };
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      const std::size_t li = index_in(nodes[node_of[r]], r);
      const std::size_t ci = index_in(columns[local_of[r]], r);
      try {
        body(local(node_g[node_of[r]], li), local(col_g[local_of[r]], ci));
      } catch (const std::exception& e) {
        errors[r] = e.what();
        if (errors[r].empty()) errors[r] = "(empty message)";
      }
      node_g[node_of[r]]->leave(li);
      col_g[local_of[r]]->leave(ci);
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

/// A regular shape of `nodes` x `per_node` ranks: rank = node * per_node + local index.
template <class Body>
std::vector<std::string> run_two_level_shape(std::size_t nodes, std::size_t per_node, Body&& body) {
  std::vector<std::size_t> node_of, local_of;
  for (std::size_t r = 0; r < nodes * per_node; ++r) {
    node_of.push_back(r / per_node);
    local_of.push_back(r % per_node);
  }
  return run_two_level(node_of, local_of, body);
}

}  // namespace gradsync::testbed
