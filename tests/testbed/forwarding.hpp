// SPDX-License-Identifier: Apache-2.0
// The part of a test transport that wraps another and forwards everything but its
// messages: a test derives from it and adds isend, irecv, wait and request, to count or
// to harm what goes through (tests/fusion/test_observe.cpp, tests/core/test_corrupt_peer.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include <gradsync/core/stall.hpp>
#include <gradsync/core/workspace.hpp>
#include <gradsync/transport/concept.hpp>

namespace gradsync::testbed {

template <class Tr>  ///< the wrapped transport
class forwarding {
 public:
  static constexpr std::string_view name = "forwarding";
  static constexpr memory_space memory = Tr::memory;
  static constexpr bool peer_access = false;  // the messages are what the test watches
  static constexpr bool native_allreduce = false;
  static constexpr transport_traits traits{.watches_stalls = true};  // no other extras

  explicit forwarding(Tr& t) : t_(t) {}
  std::size_t rank() const { return t_.rank(); }
  std::size_t size() const { return t_.size(); }
  std::uint64_t next_seq() { return t_.next_seq(); }
  void enter_call(std::uint64_t seq, const call_note& note) {
    gradsync::detail::enter_call(t_, seq, note);
  }
  workspace& scratch() { return t_.scratch(); }
  auto executor() const { return t_.executor(); }

 protected:
  Tr& t_;
};

}  // namespace gradsync::testbed
