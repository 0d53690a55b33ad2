// SPDX-License-Identifier: Apache-2.0
// What a transport is: the contract every algorithm is written against.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "gradsync/core/call.hpp"
#include "gradsync/core/deadline.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/core/stall.hpp"
#include "gradsync/core/workspace.hpp"

namespace gradsync {

/// Where a transport's buffers live.
enum class memory_space : std::uint8_t { host, device };

/// A transport's declared extras: `static constexpr gradsync::transport_traits
/// traits{...}`. Designated initialisers, so a misspelt one does not compile; each flag
/// says the transport has the member functions named (checked: transport_traits_of).
struct transport_traits {
  std::size_t pipeline_segment_bytes = 0;  ///< ring's segment (0: algo::tuning::segment_bytes)
  std::size_t ring_send_lag = 0;           ///< segments the ring's sends may trail its receives
  std::size_t pieces_in_flight = 0;        ///< two-level allgather pieces sent at once (0: all)
  bool may_cross_network = false;          ///< has crosses_network(): ranks may span hosts
  bool serves_peers = false;               ///< has serve_peers(blocked_on): stall queries, answered
  bool takes_wait_hook = false;            ///< has set_wait_hook(f): its waits call f
  bool thread_levels = false;              ///< has require_thread_level(), allows_helper_thread()
  bool watches_stalls = false;             ///< has enter_call(seq, note): a stall watch
  bool aborts = false;                     ///< has abort() (noexcept, from any thread)
  bool relays_failures = false;            ///< has announce_failure(cause) and failure_notice()
  bool describes_ranks = false;            ///< has describe_rank(q): "rank 5 on host-b"
  bool native_collectives = false;         ///< has broadcast_, allgather_, reduce_scatter_native
  bool splits = false;                     ///< has split(color, key, d): a sub-group of its kind
};

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
  { T::traits } -> std::convertible_to<transport_traits>;  // its extras (transport_traits)
};

/// Tr's traits, checked against its members both ways: a declared extra without its
/// member function, or a member function its traits do not declare, does not compile.
template <class Tr>
constexpr transport_traits transport_traits_of() {
  constexpr transport_traits d = Tr::traits;
  static_assert(
      d.may_cross_network ==
          requires(const Tr& t) {
            { t.crosses_network() } -> std::convertible_to<bool>;
          },
      "gradsync: a transport has `bool crosses_network() const` exactly when its traits say "
      ".may_cross_network = true");
  static_assert(
      d.serves_peers ==
          requires(Tr & t) {
            { t.serve_peers(std::uint64_t{}) } -> std::convertible_to<std::string>;
          },
      "gradsync: a transport has `std::string serve_peers(std::uint64_t)` exactly when its "
      "traits say .serves_peers = true");
  static_assert(
      d.takes_wait_hook == requires(Tr & t) { t.set_wait_hook({}); },
      "gradsync: a transport has set_wait_hook(f) exactly when its traits say "
      ".takes_wait_hook = true");
  static_assert(
      d.thread_levels ==
          requires {
            Tr::require_thread_level();
            { Tr::allows_helper_thread() } -> std::convertible_to<bool>;
          },
      "gradsync: a transport has static require_thread_level() and allows_helper_thread() "
      "exactly when its traits say .thread_levels = true");
  static_assert(
      d.watches_stalls ==
          requires(Tr & t, const call_note& n) { t.enter_call(std::uint64_t{}, n); },
      "gradsync: a transport has enter_call(seq, note) exactly when its traits say "
      ".watches_stalls = true");
  static_assert(
      d.aborts == requires(Tr & t) { t.abort(); },
      "gradsync: a transport has abort() exactly when its traits say .aborts = true");
  static_assert(
      d.relays_failures ==
          requires(Tr & t) {
            t.announce_failure("");
            { t.failure_notice() } -> std::convertible_to<std::string>;
          },
      "gradsync: a transport has announce_failure(cause) and failure_notice() exactly when its "
      "traits say .relays_failures = true");
  static_assert(
      d.native_collectives ==
          requires(Tr & t, std::byte * p, const std::byte* cp, float* f, const float* cf,
                   std::size_t n, const call_context& c) {
            t.broadcast_native(p, n, n, c);
            t.allgather_native(cp, p, n, c);
            t.reduce_scatter_native(cf, f, n, op::sum, c);
          },
      "gradsync: a transport has broadcast_native, allgather_native and reduce_scatter_native "
      "exactly when its traits say .native_collectives = true");
  static_assert(
      d.describes_ranks ==
          requires(const Tr& t) {
            { t.describe_rank(std::size_t{}) } -> std::convertible_to<std::string>;
          },
      "gradsync: a transport has describe_rank(q) exactly when its traits say "
      ".describes_ranks = true");
  static_assert(
      d.splits == requires(Tr & t, deadline dl) { t.split(0, 0, dl); },
      "gradsync: a transport has split(color, key, deadline) exactly when its traits say "
      ".splits = true");
  return d;
}

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

/// Whether t's messages cross a network between hosts: t.crosses_network() when Tr's
/// traits say it may (transport::mpi finds out at construction), else false.
template <class Tr>
bool crosses_network(const Tr& t) {
  if constexpr (transport_traits_of<Tr>().may_cross_network) {
    return t.crosses_network();
  } else {
    return false;
  }
}

/// How messages name rank q of t: t.describe_rank(q) when Tr's traits say it has one
/// (transport::mpi: "rank 5 on host-b", the job's rank and its host), else "rank q".
template <class Tr>
std::string describe_rank(const Tr& t, std::size_t q) {
  if constexpr (transport_traits_of<Tr>().describes_ranks) {
    return t.describe_rank(q);
  } else {
    return "rank " + std::to_string(q);
  }
}

/// How messages name this rank of t: describe_rank of its own rank (a two_level has an
/// overload: it names the rank as its Inter level does).
template <class Tr>
std::string describe_self(const Tr& t) {
  return describe_rank(t, t.rank());
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

namespace detail {
/// Tells t that this rank enters call `seq` (its stall watch), when t keeps one.
template <class Tr>
void enter_call(Tr& t, std::uint64_t seq, const call_note& note) {
  if constexpr (transport_traits_of<Tr>().watches_stalls) t.enter_call(seq, note);
}
}  // namespace detail

}  // namespace gradsync
