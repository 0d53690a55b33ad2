// SPDX-License-Identifier: Apache-2.0
// algo::allgather_direct — allgather by reading the peers' memory (peer_memory_transport:
// transport::shm). One header round (detail/direct_call.hpp) agrees the call; then:
//   inline      blocks that fit a slot travel with the header: one flag round in all;
//   registered  when every rank's input lies in its heap (transport::shm::allocate), each
//               rank copies every block straight from its owner's input: one copy;
//   staged      else, per piece: every rank copies its piece into its staging buffer,
//               a barrier, every rank copies all pieces out. Pieces alternate between
//               the buffer's halves, so staging piece k+1 overlaps the peers' reads of k.
// The entry point is gradsync::allgather (allgather.hpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "gradsync/algo/detail/direct_call.hpp"
#include "gradsync/algo/detail/direct_registered.hpp"
#include "gradsync/core/call.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/transport/concept.hpp"

namespace gradsync::algo {

struct allgather_direct {
  static constexpr std::string_view name = "allgather_direct";

  /// out (n blocks of mine.size() bytes, rank order) := every rank's `mine`, after the
  /// header round on `h` (errc::mismatch on every rank when headers differ). Returns the
  /// bytes this rank published for the others (0 when they read its input in place).
  template <transport_policy Tr>
  static std::size_t run(Tr& t, std::span<const std::byte> mine, std::span<std::byte> out,
                         const call_header& h, const call_context& ctx) {
    detail::check_direct_transport<Tr>();
    detail::direct_call<Tr> c(t, ctx);
    const std::size_t n = c.n_, r = c.r_, b = mine.size();
    if (n == 1) {  // nothing to agree with or read
      if (b) std::memcpy(out.data(), mine.data(), b);
      return 0;
    }
    if (b <= c.inline_bytes()) {
      c.open_header(h, "allgather", mine.data(), b);
      for (std::size_t j = 0; j < n; ++j) {
        if (b) std::memcpy(out.data() + j * b, j == r ? mine.data() : c.payload_bytes(j), b);
      }
      c.close();
      return b;
    }
    const std::uint64_t note = detail::registered_note_of(t, mine.data(), b);
    c.open_header(h, "allgather", &note, sizeof note);
    const bool stream = out.size() >= detail::direct_stream_min_bytes;
    if (detail::all_registered(c, b)) {
      for (std::size_t j = 0; j < n; ++j) {
        const std::byte* src = j == r ? mine.data() : detail::registered_at(c, j, b);
        detail::copy_out(out.data() + j * b, src, b, stream);
      }
      c.close_in_place(stream);
      return 0;
    }
    staged(c, mine, 0, [&](std::size_t j, std::size_t off, const std::byte* src, std::size_t len) {
      detail::copy_out(out.data() + j * b + off, src, len, stream);
    });
    if (stream) detail::stream_fence();
    c.close();
    return b;
  }

  /// The staged path after an open header round `c`: every rank's `mine` (the same size
  /// everywhere) in pieces through the halves, barrier steps from `step0` + 1; each
  /// piece of rank j's block is handed to place(j, offset in the block, bytes, length),
  /// this rank's own too. Returns the step a following staged() starts from.
  template <class C, class Place>
  static std::uint64_t staged(C& c, std::span<const std::byte> mine, std::uint64_t step0,
                              Place&& place) {
    const std::size_t piece = c.staged_piece_bytes(), b = mine.size();
    std::uint64_t k = step0;
    for (std::size_t off = 0; off < b; off += piece, ++k) {
      const std::size_t len = std::min(piece, b - off);
      std::memcpy(c.half(c.r_, k), mine.data() + off, len);
      place(c.r_, off, mine.data() + off, len);
      c.barrier(k + 1);
      for (std::size_t j = 0; j < c.n_; ++j) {
        if (j != c.r_) place(j, off, c.half(j, k), len);
      }
    }
    return k;
  }
};

}  // namespace gradsync::algo
