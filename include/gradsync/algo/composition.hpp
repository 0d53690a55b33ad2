// SPDX-License-Identifier: Apache-2.0
// The composition rules of an algorithm and a transport, written once: composition_fault_of
// names the first rule a pair breaks. check_composition, which every entry point calls,
// turns each fault into a static_assert with its fix-it message, and runs_on_v<A, Tr>
// (algo/runs_on.hpp) is "no fault", for code that instantiates algorithms from a list.
#pragma once

#include "gradsync/algo/concept.hpp"
#include "gradsync/algo/hierarchical.hpp"
#include "gradsync/algo/ring.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/transport/concept.hpp"
#include "gradsync/transport/levels.hpp"

namespace gradsync {

/// The first composition rule a pair (algorithm, transport) breaks; none when it runs.
enum class composition_fault {
  none,
  not_a_transport,    ///< the transport argument satisfies no transport concept
  needs_levels,       ///< algo::hierarchical on a flat transport
  needs_peer_access,  ///< the algorithm reads peers' memory; the transport cannot
  needs_native,       ///< algo::native; the transport has no allreduce of its own
  not_an_algorithm,   ///< the algorithm does not satisfy algorithm_for<A, Tr>
  flat_on_levels,     ///< a flat algorithm on a group with levels (transport/levels.hpp)
  intra_level,        ///< levels: ring does not run on the node's transport
  inter_level,        ///< levels: the inter-node algorithm does not run across nodes
  host_on_device,     ///< a host-memory algorithm on a device transport
};

/// The table itself: which rule algorithm A breaks on transport Tr (a flat host transport,
/// a group with levels, or a device transport).
template <class A,   ///< the algorithm (algo::ring, algo::hierarchical<>, ...)
          class Tr>  ///< the transport (transport::local, shm, mpi, nccl, ...) or levels
constexpr composition_fault composition_fault_of() {
  using enum composition_fault;
  if constexpr (transport::leveled<Tr>) {
    if constexpr (!detail::is_hierarchical<A>) {
      return flat_on_levels;
    } else if constexpr (composition_fault_of<algo::ring, typename Tr::intra_type>() != none) {
      return intra_level;
    } else if constexpr (composition_fault_of<typename A::inter_algorithm,
                                              typename Tr::inter_type>() != none) {
      return inter_level;
    } else {
      return none;
    }
  } else if constexpr (device_transport<Tr>) {
    if constexpr (declared_traits<A>().needs_native) {
      return Tr::native_allreduce ? none : needs_native;
    } else {
      return device_algorithm_for<A, Tr> ? none : host_on_device;
    }
  } else if constexpr (!transport_policy<Tr>) {
    return not_a_transport;
  } else if constexpr (declared_traits<A>().needs_two_level) {  // algo/concept.hpp's name
    return needs_levels;
  } else if constexpr (declared_traits<A>().needs_peer_access && !Tr::peer_access) {
    return needs_peer_access;
  } else if constexpr (declared_traits<A>().needs_native && !Tr::native_allreduce) {
    return needs_native;
  } else if constexpr (!algorithm_for<A, Tr>) {  // a missing `traits` lands here too
    return not_an_algorithm;
  } else {
    return none;
  }
}

/// Checks an algorithm x transport x element type x op composition; each failure says how
/// to fix it. Every entry point calls this first.
template <class A, class Tr, class T, class Op>
constexpr void check_composition() {
  check_element_type<T>();
  check_op_for<T, Op>();
  using enum composition_fault;
  constexpr composition_fault f = composition_fault_of<A, Tr>();
  static_assert(f != not_a_transport,
                "gradsync: the first argument is not a transport (see transport/concept.hpp); "
                "use gradsync::transport::local, shm, mpi, nccl or cuda_ipc");
  static_assert(f != needs_levels,
                "gradsync: algo::hierarchical runs on a transport::two_level (a node's transport "
                "plus one across nodes; in-place allreduce); on one flat "
                "transport use algo::ring or algo::auto_select");
  static_assert(f != needs_peer_access,
                "gradsync: this algorithm reads peers' memory directly and the transport has "
                "no peer access; use transport::shm or transport::cuda_ipc with it, or pick "
                "algo::ring, algo::tree or algo::halving_doubling for this transport");
  static_assert(f != needs_native,
                "gradsync: algo::native calls the transport's own allreduce and this transport "
                "has none (transport::local, shm); use algo::ring or algo::auto_select");
  static_assert(f != not_an_algorithm,
                "gradsync: the algorithm does not satisfy gradsync::algorithm_for<A, "
                "Transport> (algo/concept.hpp): it needs a `name`, `static constexpr "
                "gradsync::algorithm_traits traits{...}` and a static run(t, span, op, ctx)");
  static_assert(f != flat_on_levels,
                "gradsync: a transport::two_level runs algo::hierarchical<InterAlgo> (e.g. "
                "allreduce<algo::hierarchical<algo::ring>>(t, data, op)); flat algorithms run "
                "on t.intra() or t.inter() alone");
  static_assert(f != host_on_device,
                "gradsync: this algorithm is written for host memory (it reduces on the host "
                "and uses host scratch); on device memory use algo::native (transport::nccl, "
                "transport::cuda_ipc) or algo::nccl_ring (transport::nccl)");
  if constexpr (f == intra_level || f == inter_level) {  // the level's own message
    check_composition<algo::ring, typename Tr::intra_type, T, Op>();
    check_composition<typename A::inter_algorithm, typename Tr::inter_type, T, Op>();
  }
}

}  // namespace gradsync
