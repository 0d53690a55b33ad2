// SPDX-License-Identifier: Apache-2.0
// algo::reduce_scatter_direct — reduce-scatter by reading the peers' memory
// (peer_memory_transport: transport::shm). One header round (detail/direct_call.hpp)
// agrees the call; then rank r combines block r of every rank's input, in rank order
// 0, 1, ..., n-1 (so the result does not depend on who computes it), read from:
//   inline      the header slots, when a whole input fits one: one flag round in all;
//   registered  the peers' inputs in place, when every rank's lies in its heap
//               (transport::shm::allocate);
//   staged      else the staging buffers, per piece: every rank copies the piece of each
//               block the others combine, a barrier, each rank combines its own. Pieces
//               alternate between the buffer's halves, as in allgather_direct.
// The entry point is gradsync::reduce_scatter (reduce_scatter.hpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "gradsync/algo/detail/direct_call.hpp"
#include "gradsync/algo/detail/direct_registered.hpp"
#include "gradsync/algo/detail/erased_op.hpp"
#include "gradsync/core/call.hpp"
#include "gradsync/transport/concept.hpp"

namespace gradsync::algo {

struct reduce_scatter_direct {
  /// (A call header holds 19 characters of a name.)
  static constexpr std::string_view name = "rs_direct";

  /// out (m elements) := block `rank` of the reduction of every rank's `in` (n blocks of
  /// m elements), op::avg divided by n, after the header round on `h` (errc::mismatch on
  /// every rank when headers differ; then `agreed()` runs on every rank before any data
  /// moves, and may throw). Returns the bytes this rank published.
  template <transport_policy Tr, class T, class Op, class Agreed>
  static std::size_t run(Tr& t, std::span<const T> in, std::span<T> out, Op, const call_header& h,
                         const call_context& ctx, Agreed&& agreed) {
    detail::check_direct_transport<Tr>();
    auto* const o = reinterpret_cast<std::byte*>(out.data());
    const auto* const src = reinterpret_cast<const std::byte*>(in.data());
    detail::direct_call<Tr> c(t, o, out.size(), detail::erase_op_for<T, Op>(t), ctx);
    const std::size_t n = c.n_, r = c.r_, m = out.size(), bytes = in.size_bytes();
    if (n == 1) {
      agreed();
      if (m) std::memcpy(o, src, c.bytes(m));
      c.finalize(o, m);
      return 0;
    }
    if (bytes <= c.inline_bytes()) {
      c.open_header(h, "reduce_scatter", src, bytes);
      c.after_open(agreed);
      c.reduce(
          o,
          [&](std::size_t j) -> const std::byte* {
            return c.at(j == r ? src : c.payload_bytes(j), r * m);
          },
          n, m);
      c.finalize(o, m);
      c.close();
      return bytes;
    }
    const std::uint64_t note = detail::registered_note_of(t, src, bytes);
    c.open_header(h, "reduce_scatter", &note, sizeof note);
    c.after_open(agreed);
    if (detail::all_registered(c, bytes)) {
      c.reduce(
          o,
          [&](std::size_t j) {
            return c.at(j == r ? src : detail::registered_at(c, j, bytes), r * m);
          },
          n, m);
      c.finalize(o, m);
      c.close_in_place(false);
      return 0;
    }
    staged(
        c, m, m, [&](std::size_t i, std::size_t x) { return c.at(src, i * m + x); }, o, 0,
        [&](std::size_t off, std::size_t len) { c.finalize(c.at(o, off), len); });
    c.close();
    return (n - 1) * c.bytes(m);
  }

  /// The staged path after an open header round `c`: this rank's input is c.n_ blocks of
  /// m elements, element x of block i at src(i, x) (bytes) and contiguous up to the next
  /// multiple of `seg` (a block gathered from segments, as the two-level node phase's
  /// columns). out[x] := element x of block c.r_ combined over every rank in rank order,
  /// in pieces: every rank copies its piece of each block the others combine into its half
  /// k % 2, a barrier (steps from `step0` + 1), each rank combines its own; done(off, len)
  /// follows each piece. Returns the step a following staged() starts from.
  template <class C, class Src, class Done>
  static std::uint64_t staged(C& c, std::size_t m, std::size_t seg, Src&& src, std::byte* out,
                              std::uint64_t step0, Done&& done) {
    const std::size_t n = c.n_, r = c.r_;
    const std::size_t piece = std::max<std::size_t>(1, c.staged_piece_bytes(n) / c.elem_);
    std::uint64_t k = step0;
    for (std::size_t off = 0; off < m; ++k) {
      const std::size_t len = std::min({piece, m - off, seg - off % seg});
      std::byte* const mine = c.half(r, k);
      for (std::size_t i = 0; i < n; ++i) {
        if (i != r) std::memcpy(c.at(mine, i * piece), src(i, off), c.bytes(len));
      }
      c.barrier(k + 1);
      c.reduce(
          c.at(out, off),
          [&](std::size_t j) -> const std::byte* {
            return j == r ? src(r, off) : c.at(c.half(j, k), r * piece);
          },
          n, len);
      done(off, len);
      off += len;
    }
    return k;
  }
};

}  // namespace gradsync::algo
