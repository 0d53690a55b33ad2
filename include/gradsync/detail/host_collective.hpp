// SPDX-License-Identifier: Apache-2.0
// The rules every host collective besides allreduce (broadcast, allgather,
// reduce_scatter) checks first: which transports it runs on, and the n-blocks size rule.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "gradsync/core/error.hpp"
#include "gradsync/transport/concept.hpp"
#include "gradsync/transport/levels.hpp"

namespace gradsync::detail {

/// Name the two buffers the reduce_scatter and allgather over levels keep in the node
/// transport's workspace (shared: the two are never active in one call).
struct level_scratch_across;
struct level_scratch_inside;
/// Names the buffer an in-place reduce_scatter's result goes through (the workspace of the
/// transport, or of the node's level).
struct in_place_result;

/// Fails the build unless Tr is a host transport or two levels of them.
template <class Tr>
constexpr void check_host_collective() {
  static_assert(transport::level_group<Tr>,
                "gradsync::broadcast / allgather / reduce_scatter: the transport must satisfy "
                "gradsync::transport_policy (local, shm, mpi) or have levels "
                "(transport::leveled: see transport/levels.hpp)");
  if constexpr (transport::leveled<Tr>) {
    static_assert(transport_policy<typename Tr::inter_type>,
                  "gradsync::broadcast / allgather / reduce_scatter run on two levels; over "
                  "three (an Inter with levels of its own) only allreduce runs: call "
                  "them on t.inter() or t.intra(), or build the levels of two transports");
  }
  static_assert(Tr::memory == memory_space::host,
                "gradsync::broadcast / allgather / reduce_scatter: this transport moves device "
                "memory and a std::span means host memory; wrap the GPU buffer in "
                "gradsync::device_span<T>{ptr, count} (transport::nccl runs them on device)");
}

/// Throws errc::invalid_argument unless `whole` has n x `block` elements: "allgather: the
/// output has 7 elements; it needs ranks x input = 4 x 2".
inline void check_blocks(const char* collective, const char* whole_name, std::size_t whole,
                         const char* block_name, std::size_t block, std::size_t n,
                         std::size_t rank) {
  if (whole == block * n) return;
  throw error(errc::invalid_argument, {rank, error_site::npos, ~std::uint64_t{0}},
              std::string(collective) + ": the " + whole_name + " has " + std::to_string(whole) +
                  " elements; it needs ranks x " + block_name + " = " + std::to_string(n) + " x " +
                  std::to_string(block));
}

/// The buffer rule of allgather and reduce_scatter, whose `block` (allgather's input,
/// reduce_scatter's output) is one rank's share of `whole` (the other buffer): true when
/// `block` is this rank's block of `whole` (an in-place call, as NCCL's), false when the
/// two are disjoint; any other overlap throws errc::invalid_argument, since the algorithms
/// would overwrite data they have yet to read. Device spans too (pointers only compared).
inline bool in_place_block(const char* collective, const char* block_name, const char* whole_name,
                           const void* block, std::size_t block_bytes, const void* whole,
                           std::size_t whole_bytes, std::size_t rank) {
  const auto* b = static_cast<const std::byte*>(block);
  const auto* w = static_cast<const std::byte*>(whole);
  if (block_bytes == 0 || b >= w + whole_bytes || w >= b + block_bytes) return false;
  if (b == w + rank * block_bytes) return true;
  throw error(errc::invalid_argument, {rank, error_site::npos, ~std::uint64_t{0}},
              std::string(collective) + ": the " + block_name + " overlaps the " + whole_name +
                  " other than at this rank's block (rank " + std::to_string(rank) +
                  "'s block of the " + whole_name +
                  "); pass that block for an in-place call, or disjoint spans");
}

}  // namespace gradsync::detail
