// SPDX-License-Identifier: Apache-2.0
// The level concept: a group of ranks seen at levels. Inside a node the ranks share a
// point-to-point transport (intra()); the ranks with one local index on every node share
// another (inter()), which may have levels of its own (three levels or more). Ranks are
// numbered node-major. transport::two_level is the group this library builds; the entry
// points, the allreducer and the composition table ask for this concept instead of
// naming it, and pick the schedule over levels by overload, so a new kind of group with
// levels touches none of them.
#pragma once

#include <concepts>
#include <cstddef>

#include "gradsync/transport/concept.hpp"

namespace gradsync::transport {

/// A group with levels: what algo::hierarchical and the collectives over levels use.
template <class T>
concept leveled = requires(T& t, const T& c, std::size_t q) {
  typename T::intra_type;  // the node's transport (point to point: shm, local)
  typename T::inter_type;  // across the nodes: a transport (mpi), or levels again
  { t.intra() } -> std::same_as<typename T::intra_type&>;
  { t.inter() } -> std::same_as<typename T::inter_type&>;
  { c.global_of_intra(q) } -> std::same_as<std::size_t>;  // rank q of the node, globally
  { c.global_of_inter(q) } -> std::same_as<std::size_t>;  // node q's rank of this index
  { c.pipelines() } -> std::same_as<bool>;                // large calls overlap the levels
  requires transport_policy<typename T::intra_type>;
};

/// What a group, and each level of one, may be: one transport, or levels of them.
template <class T>
concept level_group = transport_policy<T> || leveled<T>;

/// True when a helper thread may make G's calls while the calling thread works, one
/// thread at a time: host memory at every level, and where a library has thread levels
/// (MPI), one that allows it (MPI_THREAD_SERIALIZED). A local decision: what the threads
/// send is the same either way.
template <level_group G>
bool helper_thread_ok() {
  if constexpr (leveled<G>) {
    return helper_thread_ok<typename G::intra_type>() && helper_thread_ok<typename G::inter_type>();
  } else if constexpr (G::memory != memory_space::host) {
    return false;
  } else if constexpr (transport_traits_of<G>().thread_levels) {
    return G::allows_helper_thread();
  } else {
    return true;
  }
}

}  // namespace gradsync::transport
