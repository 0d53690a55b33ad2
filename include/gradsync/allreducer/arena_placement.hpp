// SPDX-License-Identifier: Apache-2.0
// Where an allreducer's arenas live. Over a transport with a heap its peers map
// (transport::shm::allocate), the zero-copy arena and the packed-bucket staging are
// placed there, so algo::direct_two_shot (and auto_select above one-shot sizes) reads
// the buckets in place instead of staging them; elsewhere, or when the heap is too
// small (shm_options::heap_bytes, GRADSYNC_SHM_HEAP), they use private memory.
#pragma once

#include <cstddef>
#include <memory>

#include "gradsync/core/error.hpp"
#include "gradsync/core/log.hpp"
#include "gradsync/fusion/arena.hpp"

namespace gradsync::detail {

/// A transport that hands out memory its peers can read (registered buffers).
template <class Tr>
concept heap_transport = requires(Tr& t, std::size_t n) {
  t.template allocate<std::byte>(n);  // owning buffer with data()
  { t.heap_bytes() } -> std::convertible_to<std::size_t>;
};

/// Gives `a` at least `bytes` (zeroed): from the transport's heap when it has one with
/// room, else private memory. Returns whether the memory is the transport's.
template <class Tr>
bool place_arena(Tr& t, fusion::arena& a, std::size_t bytes) {
  const std::size_t want = fusion::arena::rounded(bytes);
  if constexpr (heap_transport<Tr>) {
    if (want > 0 && t.heap_bytes() >= want) {
      try {
        using buffer = decltype(t.template allocate<std::byte>(want));
        auto held = std::make_shared<buffer>(t.template allocate<std::byte>(want));
        a.adopt(held->data(), want, held);
        log(log_level::debug, t.rank(), "arena of %zu bytes in the transport's heap", want);
        return true;
      } catch (const error& e) {
        log(log_level::info, t.rank(), "arena of %zu bytes in private memory: %s", want, e.what());
      }
    }
  }
  a.resize(want);
  return false;
}

}  // namespace gradsync::detail
