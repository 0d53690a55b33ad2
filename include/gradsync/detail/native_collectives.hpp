// SPDX-License-Identifier: Apache-2.0
// When gradsync::broadcast, allgather and reduce_scatter hand a flat transport's call to
// the transport's own collective (transport::mpi: MPI_Ibcast, MPI_Iallgather,
// MPI_Ireduce_scatter_block, polled under the call's deadline) instead of running
// gradsync's algorithms over its messages. One rule for the three, by the bytes one rank
// moves (broadcast: the message; allgather: the output; reduce_scatter: the input), so
// every rank picks alike; the call's agreed header names the choice. On device memory
// (transport::nccl) the native collective is the only one. A transport whose ranks map
// each other's memory (transport::shm) runs the direct algorithms instead.
#pragma once

#include <cstddef>
#include <string_view>

#include "gradsync/algo/tuning.hpp"
#include "gradsync/core/call.hpp"
#include "gradsync/transport/concept.hpp"

namespace gradsync::detail {

/// Tr has its own collectives (its traits say .native_collectives): MPI_Ibcast-like
/// broadcast_native(data, bytes, root, ctx), MPI_Iallgather-like allgather_native(in,
/// out, bytes per rank, ctx) and MPI_Ireduce_scatter_block-like reduce_scatter_native.
template <class Tr>
inline constexpr bool has_native_collectives = transport_traits_of<Tr>().native_collectives;
template <class Tr>
inline constexpr bool has_native_broadcast = has_native_collectives<Tr>;
template <class Tr>
inline constexpr bool has_native_allgather = has_native_collectives<Tr>;
template <class Tr, class T, class Op>
inline constexpr bool has_native_reduce_scatter = has_native_collectives<Tr>;

/// Tr's collectives read the peers' memory (algo::broadcast_direct, allgather_direct,
/// reduce_scatter_direct) at every size instead of passing messages: transport::shm.
template <class Tr>
inline constexpr bool has_direct_collectives = (peer_memory_transport<Tr> && host_transport<Tr>);

/// The name a native call states in its header and stall notes.
inline constexpr std::string_view native_collective_name = "native";

/// Whether a collective moving `bytes` per rank runs natively on a transport that has it.
constexpr bool use_native_collective(bool has, std::size_t bytes) {
  return has && bytes < algo::tuning::native_collective_bytes;
}

/// Fails the build unless Tr moves device memory (a device_span given to a host
/// transport).
template <class Tr>
constexpr void check_device_collective() {
  static_assert(device_transport<Tr>,
                "gradsync: device memory (gradsync::device_span) given to a host transport; "
                "use transport::nccl for device buffers, or copy to host memory and pass a "
                "std::span");
}

}  // namespace gradsync::detail
