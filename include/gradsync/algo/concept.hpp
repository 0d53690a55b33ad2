// SPDX-License-Identifier: Apache-2.0
// What an algorithm is: a stateless policy that runs an in-place allreduce over any
// transport it supports. Scratch memory comes from the transport's workspace.
#pragma once

#include <concepts>
#include <cstdint>
#include <span>
#include <string_view>

#include "gradsync/core/call.hpp"
#include "gradsync/core/device_memory.hpp"
#include "gradsync/core/deadline.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/transport/concept.hpp"

namespace gradsync {

/// An allreduce algorithm usable with transport Tr.
template <class A, class Tr>
concept algorithm_for = transport_policy<Tr> &&
    requires(Tr& t, std::span<float> data, const call_context& ctx) {
  { A::name } -> std::convertible_to<std::string_view>;   // for logs and the header
  { A::needs_peer_access } -> std::convertible_to<bool>;  // reads peers' memory directly
  { A::needs_native } -> std::convertible_to<bool>;       // calls the transport's own allreduce
  A::run(t, data, op::sum, ctx);                          // in-place allreduce
};

/// An algorithm that runs on device memory over transport Tr: it has a static
/// run_device(Tr&, device_span<T>, Op, const call_context&) (e.g. algo::nccl_ring).
template <class A, class Tr>
concept device_algorithm_for = requires(Tr& t, device_span<float> d, const call_context& c) {
  A::run_device(t, d, op::sum, c);
};

/// Checks a transport x algorithm x element type x op composition; each failure says how
/// to fix it. Every public entry point calls this first.
template <class A, class Tr, class T, class Op>
constexpr void check_composition() {
  check_element_type<T>();
  check_op_for<T, Op>();
  static_assert(transport_policy<Tr>,
                "gradsync: the first argument is not a transport (see transport/concept.hpp); "
                "use gradsync::transport::local, shm, mpi, nccl or cuda_ipc");
  static_assert(
      !requires { requires A::needs_two_level; },
      "gradsync: algo::hierarchical runs on a transport::two_level (a node's transport "
      "plus one across nodes, transport/two_level.hpp, in-place allreduce); on one flat "
      "transport use algo::ring or algo::auto_select");
  if constexpr (transport_policy<Tr>) {
    static_assert(!A::needs_peer_access || Tr::peer_access,
                  "gradsync: this algorithm reads peers' memory directly and the transport has "
                  "no peer access; use transport::shm or transport::cuda_ipc with it, or pick "
                  "algo::ring, algo::tree or algo::halving_doubling for this transport");
    static_assert(!A::needs_native || Tr::native_allreduce,
                  "gradsync: algo::native calls the transport's own allreduce and this transport "
                  "has none (transport::local, shm); use algo::ring or algo::auto_select");
    static_assert(algorithm_for<A, Tr>,
                  "gradsync: the algorithm does not satisfy gradsync::algorithm_for<A, "
                  "Transport> (see algo/concept.hpp)");
  }
}

}  // namespace gradsync
