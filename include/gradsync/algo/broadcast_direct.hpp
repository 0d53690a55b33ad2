// SPDX-License-Identifier: Apache-2.0
// algo::broadcast_direct — broadcast by reading the root's memory (peer_memory_transport:
// transport::shm). One header round (detail/direct_call.hpp) agrees the call and the root;
// then:
//   inline      a message that fits a slot travels with the root's header: one flag round;
//   registered  when the root's buffer lies in its heap (transport::shm::allocate), every
//               other rank copies it straight from there: one copy;
//   staged      else, per piece: the root copies the piece into its staging buffer, a
//               barrier, the others copy it out (from the cache: pieces are small).
//               Pieces alternate between the buffer's halves, so the root stages piece
//               k+1 while the others read k.
// The entry point is gradsync::broadcast (broadcast.hpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "gradsync/algo/detail/direct_call.hpp"
#include "gradsync/algo/detail/direct_registered.hpp"
#include "gradsync/core/call.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/transport/concept.hpp"

namespace gradsync::algo {

struct broadcast_direct {
  static constexpr std::string_view name = "bcast_direct";

  /// data := the root's data on every rank, after the header round on `h` (errc::mismatch
  /// on every rank when headers differ; `check_root(root)` then runs on every rank before
  /// any data moves). Returns the bytes this rank published (the root's staged message).
  template <transport_policy Tr, class CheckRoot>
  static std::size_t run(Tr& t, std::span<std::byte> data, std::size_t root, const call_header& h,
                         const call_context& ctx, CheckRoot&& check_root) {
    detail::check_direct_transport<Tr>();
    detail::direct_call<Tr> c(t, ctx);
    const std::size_t n = c.n_, r = c.r_, b = data.size();
    if (n == 1) {
      check_root(root);
      return 0;
    }
    const bool is_root = r == root;
    const bool small = b <= c.inline_bytes();
    const std::uint64_t note = small ? 0 : detail::registered_note_of(t, data.data(), b);
    if (small) {
      c.open_header(h, "broadcast", data.data(), is_root ? b : 0);
    } else {
      c.open_header(h, "broadcast", &note, sizeof note);
    }
    c.after_open([&] { check_root(root); });
    if (small) {
      if (!is_root && b) std::memcpy(data.data(), c.payload_bytes(root), b);
      c.close();
      return is_root ? b : 0;
    }
    const bool stream = b >= detail::direct_stream_min_bytes;
    if (detail::note_of(c, root, b) != detail::not_registered) {
      if (!is_root) detail::copy_out(data.data(), detail::registered_at(c, root, b), b, stream);
      c.close_in_place(stream);
      return 0;
    }
    const std::size_t piece = c.staged_piece_bytes();
    for (std::size_t k = 0, off = 0; off < b; ++k, off += piece) {
      const std::size_t len = std::min(piece, b - off);
      if (is_root) std::memcpy(c.half(r, k), data.data() + off, len);
      c.barrier(k + 1);
      if (!is_root) detail::copy_out(data.data() + off, c.half(root, k), len, stream);
    }
    if (stream) detail::stream_fence();
    c.close();
    return is_root ? b : 0;
  }
};

}  // namespace gradsync::algo
