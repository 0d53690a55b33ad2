// SPDX-License-Identifier: Apache-2.0
// What a transport is: the contract every algorithm is written against.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "gradsync/core/deadline.hpp"
#include "gradsync/core/workspace.hpp"

namespace gradsync {

/// Where a transport's buffers live.
enum class memory_space : std::uint8_t { host, device };

/// A transport moves bytes between the ranks of a group and reduces them where they live.
template <class T>
concept transport_policy = requires(T& t, const T& ct, void* p, const void* cp, std::size_t n,
                                    std::uint32_t tag, typename T::request& r, deadline d) {
  { T::name } -> std::convertible_to<std::string_view>;  // for logs and errors
  { T::memory } -> std::convertible_to<memory_space>;    // host or device buffers
  { T::peer_access } -> std::convertible_to<bool>;       // can read peers' buffers directly
  { T::native_allreduce } -> std::convertible_to<bool>;  // has its own allreduce (algo::native)
  { ct.rank() } -> std::same_as<std::size_t>;            // this rank, 0 .. size()-1
  { ct.size() } -> std::same_as<std::size_t>;            // ranks in the group
  { t.isend(n, cp, n, tag) } -> std::same_as<typename T::request>;  // post a send to peer
  { t.irecv(n, p, n, tag) } -> std::same_as<typename T::request>;   // post a receive
  t.wait(r, d);                                     // complete one request or throw by d
  { t.next_seq() } -> std::same_as<std::uint64_t>;  // per-call sequence number, same on all ranks
  { t.scratch() } -> std::same_as<workspace&>;      // persistent scratch buffers
  t.executor();                                     // reduce/copy/finalize where data lives
};

/// A transport whose buffers live in host memory.
template <class T>
concept host_transport = transport_policy<T> &&(T::memory == memory_space::host);

/// A transport that can read its peers' buffers directly (shm, cuda_ipc).
template <class T>
concept peer_access_transport = transport_policy<T> && T::peer_access;

/// A peer-access transport that exposes the shared memory itself (shm), for the direct
/// algorithms. Each rank owns two small slots, one staging buffer and numbered flags;
/// every rank can read every rank's slots and buffer. Flags only grow; posting a flag
/// publishes the poster's earlier writes to whoever sees the new value (release/acquire).
/// Flag k in {0, 1} shares a cache line with the start of slot k.
template <class T>
concept peer_memory_transport = peer_access_transport<T> &&
    requires(T& t, const T& ct, std::size_t i, unsigned k, std::uint64_t v, deadline d) {
  { ct.slot_bytes() } -> std::same_as<std::size_t>;      // bytes of one slot
  { t.slot(i, k) } -> std::same_as<std::byte*>;          // rank i's slot k (0 or 1)
  { ct.exchange_bytes() } -> std::same_as<std::size_t>;  // bytes of one staging buffer
  { t.exchange(i) } -> std::same_as<std::byte*>;         // rank i's staging buffer
  { ct.flag(i, k) } -> std::same_as<std::uint64_t>;      // rank i's flag k (0..3)
  t.post_flag(k, v);      // this rank's flag k := v; wakes peers that wait on it
  t.wait_flags(k, v, d);  // until every rank's flag k >= v; timeout/peer_lost by d
};

/// A transport with its own allreduce (MPI_Allreduce, ncclAllReduce).
template <class T>
concept native_allreduce_transport = transport_policy<T> && T::native_allreduce;

/// Whether t's messages cross a network between hosts: t.crosses_network() when Tr
/// declares it (transport::mpi finds out at construction), else false.
template <class Tr>
bool crosses_network(const Tr& t) {
  if constexpr (requires {
                  { t.crosses_network() } -> std::convertible_to<bool>;
                }) {
    return t.crosses_network();
  } else {
    return false;
  }
}

/// How messages name rank q of t: t.describe_rank(q) when Tr has it (transport::mpi:
/// "rank 5 on host-b", the job's rank and its host), else "rank q".
template <class Tr>
std::string describe_rank(const Tr& t, std::size_t q) {
  if constexpr (requires {
                  { t.describe_rank(q) } -> std::convertible_to<std::string>;
                }) {
    return t.describe_rank(q);
  } else {
    return "rank " + std::to_string(q);
  }
}

/// A transport whose buffers live in device memory and whose work is stream-ordered
/// (transport::nccl, transport::cuda_ipc).
template <class Tr>
concept device_transport = requires(Tr& t, const Tr& ct, deadline d) {
  { Tr::name } -> std::convertible_to<std::string_view>;  // for logs and errors
  requires Tr::memory == memory_space::device;            // buffers are device memory
  { ct.rank() } -> std::same_as<std::size_t>;             // this rank
  { ct.size() } -> std::same_as<std::size_t>;             // ranks in the group
  { t.next_seq() } -> std::same_as<std::uint64_t>;        // per-call sequence number
  t.synchronize(d);                                       // wait for enqueued work by d
};

}  // namespace gradsync
