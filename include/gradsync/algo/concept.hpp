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

/// True when algorithm A uses nothing of Tr but the transport concept (so it also runs
/// over a wrapper such as observe::traced_transport): A declares `static constexpr bool
/// generic = true`, or `template <class Tr> static constexpr bool generic_on` when it
/// depends on the transport (algo::auto_select).
template <class A, class Tr>
inline constexpr bool generic_on_v = requires {
  requires A::generic;
}
|| requires {
  requires A::template generic_on<Tr>;
};

/// An algorithm that runs on device memory over transport Tr: it has a static
/// run_device(Tr&, device_span<T>, Op, const call_context&) (e.g. algo::nccl_ring).
template <class A, class Tr>
concept device_algorithm_for = requires(Tr& t, device_span<float> d, const call_context& c) {
  A::run_device(t, d, op::sum, c);
};

}  // namespace gradsync
