// What a transport is: the contract every algorithm is written against.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
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
  t.wait(r, d);                                        // complete one request or throw by d
  { t.next_seq() } -> std::same_as<std::uint64_t>;    // per-call sequence number, same on all ranks
  { t.scratch() } -> std::same_as<workspace&>;        // persistent scratch buffers
  t.executor();                                       // reduce/copy/finalize where data lives
};

/// A transport whose buffers live in host memory.
template <class T>
concept host_transport = transport_policy<T> && (T::memory == memory_space::host);

/// A transport that can read its peers' buffers directly (shm, cuda_ipc).
template <class T>
concept peer_access_transport = transport_policy<T> && T::peer_access;

/// A transport with its own allreduce (MPI_Allreduce, ncclAllReduce).
template <class T>
concept native_allreduce_transport = transport_policy<T> && T::native_allreduce;

}  // namespace gradsync
