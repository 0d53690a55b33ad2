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

/// Throws errc::invalid_argument when an allgather's input overlaps its output anywhere
/// but at this rank's own block (in place: in == out + rank x in_bytes): the algorithms
/// would overwrite the input with a peer's block before sending it. Device spans too (the
/// pointers are only compared).
inline void check_gather_spans(const void* in, std::size_t in_bytes, const void* out,
                               std::size_t out_bytes, std::size_t rank) {
  const auto* i = static_cast<const std::byte*>(in);
  const auto* o = static_cast<const std::byte*>(out);
  if (in_bytes == 0 || i >= o + out_bytes || o >= i + in_bytes || i == o + rank * in_bytes) return;
  throw error(errc::invalid_argument, {rank, error_site::npos, ~std::uint64_t{0}},
              "allgather: the input overlaps the output other than at this rank's block (rank " +
                  std::to_string(rank) + "'s, out[" + std::to_string(rank) +
                  " x count]); pass that block for an in-place call, or disjoint spans");
}

}  // namespace gradsync::detail
