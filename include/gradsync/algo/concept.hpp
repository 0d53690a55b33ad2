// SPDX-License-Identifier: Apache-2.0
// What an algorithm is: a stateless policy that runs an in-place allreduce over any
// transport it supports. Scratch memory comes from the transport's workspace. What it
// needs from a transport and what it checks itself it declares in one traits value.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>

#include "gradsync/algo/detail/erased_op.hpp"
#include "gradsync/core/call.hpp"
#include "gradsync/core/device_memory.hpp"
#include "gradsync/core/deadline.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/transport/concept.hpp"

namespace gradsync {

/// An algorithm's declared capabilities: `static constexpr gradsync::algorithm_traits
/// traits{.generic = true}`. Designated initialisers, so a misspelt capability does not
/// compile; every field left out keeps its default (needs nothing, checks nothing).
struct algorithm_traits {
  bool needs_peer_access = false;  ///< reads peers' memory directly (shm, cuda_ipc)
  bool needs_native = false;       ///< calls the transport's own allreduce (mpi, nccl)
  bool needs_two_level = false;    ///< runs on a transport::two_level only (hierarchical)
  bool generic = false;            ///< uses the transport concept alone (runs traced)
  bool checks_headers = false;     ///< compares call headers in its own first exchange
  bool checks_finite = false;      ///< looks for NaN and Inf in its own first read
  bool chooses = false;            ///< picks per size: has choice<Tr>(bytes, n, network)
  bool on_bytes = false;           ///< also runs erased elements: has run_bytes (below)
};

/// Whether A has `static void run_bytes(Tr&, std::byte* base, std::size_t count, const
/// algo::detail::erased_op<Ex>&, const call_context&)`, Ex being Tr's executor type: the
/// allreduce of `count` elements of any type, whose size and reductions the erased_op
/// holds, so a caller that erased the type once (an allreducer's bucket) runs it as is.
template <class A, class Tr>
concept runs_bytes_on =
    requires(Tr& t, std::byte* base, std::size_t count, const call_context& ctx,
             const algo::detail::erased_op<decltype(std::declval<const Tr&>().executor())>& op) {
  A::run_bytes(t, base, count, op, ctx);
};

/// Whether A declares its traits (every algorithm does; see algorithm_traits).
template <class A>
concept declares_traits = requires {
  { A::traits } -> std::convertible_to<algorithm_traits>;
};

/// A::traits, or the defaults where A declares none (for the composition table, which
/// then reports A as not an algorithm instead of failing on the missing member).
template <class A>
constexpr algorithm_traits declared_traits() {
  if constexpr (declares_traits<A>) {
    return A::traits;
  } else {
    return {};
  }
}

/// A's traits on transport Tr: A::traits, or A's `template <class Tr> static constexpr
/// algorithm_traits traits_on` where they depend on the transport (algo::auto_select).
template <class A, class Tr>
constexpr algorithm_traits traits_of() {
  static_assert(declares_traits<A>,
                "gradsync: an algorithm declares `static constexpr gradsync::algorithm_traits "
                "traits{...}` (algo/concept.hpp); since 0.2.0 separate bool members such as "
                "needs_peer_access or generic are not read");
  if constexpr (requires {
                  { A::template traits_on<Tr> } -> std::convertible_to<algorithm_traits>;
                }) {
    constexpr algorithm_traits on = A::template traits_on<Tr>;
    static_assert(on.needs_peer_access == A::traits.needs_peer_access &&
                      on.needs_native == A::traits.needs_native &&
                      on.needs_two_level == A::traits.needs_two_level,
                  "gradsync: an algorithm's traits_on<Tr> may refine what it checks and "
                  "whether it is generic, not what it needs (keep the needs_* of traits)");
    static_assert(on.on_bytes == runs_bytes_on<A, Tr> || !transport_policy<Tr>,
                  "gradsync: an algorithm's traits_on<Tr>.on_bytes says whether it has "
                  "run_bytes for Tr (algo/concept.hpp: runs_bytes_on); make the two agree");
    return on;
  } else {
    static_assert(A::traits.on_bytes == runs_bytes_on<A, Tr> || !transport_policy<Tr>,
                  "gradsync: an algorithm's traits.on_bytes says whether it has run_bytes "
                  "(algo/concept.hpp: runs_bytes_on): set .on_bytes = true in its traits, or "
                  "drop the run_bytes it has (an algorithm derived from ring, tree or "
                  "halving_doubling inherits theirs)");
    return A::traits;
  }
}

/// An allreduce algorithm usable with transport Tr.
template <class A, class Tr>
concept algorithm_for = transport_policy<Tr> && declares_traits<A> &&
    requires(Tr& t, std::span<float> data, const call_context& ctx) {
  { A::name } -> std::convertible_to<std::string_view>;  // for logs and the header
  A::run(t, data, op::sum, ctx);                         // in-place allreduce
};

/// True when algorithm A uses nothing of Tr but the transport concept (so it also runs
/// over a wrapper such as observe::traced_transport): its traits say `generic`.
template <class A, class Tr>
inline constexpr bool generic_on_v = traits_of<A, Tr>().generic;

/// An algorithm that runs on device memory over transport Tr: it has a static
/// run_device(Tr&, device_span<T>, Op, const call_context&) (e.g. algo::nccl_ring).
template <class A, class Tr>
concept device_algorithm_for = requires(Tr& t, device_span<float> d, const call_context& c) {
  A::run_device(t, d, op::sum, c);
};

}  // namespace gradsync
