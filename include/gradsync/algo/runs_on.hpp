// SPDX-License-Identifier: Apache-2.0
// gradsync::runs_on_v<A, Tr> — whether algorithm A composes with transport Tr, as a
// compile-time value read from the same table (algo/composition.hpp) whose faults
// check_composition turns into static_asserts, for code that instantiates algorithms
// from a list and must skip, not fail, what does not compose:
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

#include "gradsync/algo/composition.hpp"

namespace gradsync {

/// True when gradsync::allreduce<A>(t, ...) compiles for a transport t of type Tr
/// (a flat transport, a transport::two_level, or a device transport): no rule of the
/// composition table (algo/composition.hpp) is broken.
template <class A,   ///< the algorithm (algo::ring, algo::hierarchical<>, ...)
          class Tr>  ///< the transport (transport::local, shm, mpi, two_level, nccl, ...)
inline constexpr bool runs_on_v = composition_fault_of<A, Tr>() == composition_fault::none;

}  // namespace gradsync
