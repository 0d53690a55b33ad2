// SPDX-License-Identifier: Apache-2.0
// gradsync::runs_on_v<A, Tr> — whether algorithm A composes with transport Tr, as a
// compile-time value: the rules that check_composition, check_two_level_composition and
// the device-memory allreduce enforce with static_assert, for code that instantiates
// algorithms from a list and must skip, not fail, what does not compose:
//
//   if constexpr (gs::runs_on_v<gs::algo::direct_two_shot, Tr>)  // peer access only
//     gs::allreduce<gs::algo::direct_two_shot>(t, span, gs::op::sum);
//
// A flat host transport runs an algorithm_for<A, Tr> unless A reads peers' memory and
// Tr has no peer access, or A is algo::native and Tr has no allreduce of its own. A
// transport::two_level runs algo::hierarchical<X> when ring runs inside the node and X
// across. A device transport (nccl, cuda_ipc) runs algo::native and the algorithms with a
// run_device (algo::nccl_ring).
#pragma once

#include "gradsync/algo/concept.hpp"
#include "gradsync/algo/hierarchical.hpp"
#include "gradsync/algo/ring.hpp"
#include "gradsync/core/device_memory.hpp"
#include "gradsync/transport/concept.hpp"
#include "gradsync/transport/two_level.hpp"

namespace gradsync {
namespace detail {

template <class A, class Tr>
constexpr bool runs_on_fn() {
  constexpr bool wants_two_level = requires {
    requires A::needs_two_level;
  };
  if constexpr (transport::is_two_level_v<Tr>) {
    if constexpr (is_hierarchical<A>) {
      return runs_on_fn<algo::ring, typename Tr::intra_type>() &&
             runs_on_fn<typename A::inter_algorithm, typename Tr::inter_type>();
    } else {
      return false;
    }
  } else if constexpr (wants_two_level) {
    return false;
  } else if constexpr (device_transport<Tr>) {
    if constexpr (requires { requires A::needs_native; }) {
      return Tr::native_allreduce;
    } else {
      return device_algorithm_for<A, Tr>;
    }
  } else if constexpr (algorithm_for<A, Tr>) {
    return (!A::needs_peer_access || Tr::peer_access) && (!A::needs_native || Tr::native_allreduce);
  } else {
    return false;
  }
}

}  // namespace detail

/// True when gradsync::allreduce<A>(t, ...) compiles for a transport t of type Tr
/// (a flat transport, a transport::two_level, or a device transport).
template <class A,   ///< the algorithm (algo::ring, algo::hierarchical<>, ...)
          class Tr>  ///< the transport (transport::local, shm, mpi, two_level, nccl, ...)
inline constexpr bool runs_on_v = detail::runs_on_fn<A, Tr>();

}  // namespace gradsync
