// SPDX-License-Identifier: Apache-2.0
// algo::direct_one_shot and algo::direct_two_shot — allreduce by reading the peers'
// memory directly (transports satisfying peer_memory_transport: transport::shm).
//
// Every call starts with one exchange of call headers through the ranks' slots: each
// rank writes its header (and, for small one-shot calls, its whole input) into its
// slot, posts the slot's flag and waits for everyone's; every rank then compares every
// header with rank 0's, so a mismatch raises errc::mismatch on every rank before any
// data moves (these algorithms therefore skip allreduce()'s separate agree() round).
//
// one-shot: every rank reduces the whole vector from all ranks' copies.
//           Small inputs travel inline in the slots: one flag round per call. Larger
//           ones that every rank registered take two-shot's in-place path below.
// two-shot: the vector is cut into n slices; rank i reduces slice i from all ranks'
//           copies (its own straight from its input), publishes it, and gathers the
//           other slices from their owners. One flag round per chunk (+1). When every
//           rank's vector is a registered buffer (transport::shm::allocate), ranks
//           read each other's vectors in place: detail/direct_registered.hpp.
// Large inputs go in chunks through rotating parts of the staging buffers (one-shot:
// halves; two-shot: thirds).
//
// Every element is combined in rank order 0, 1, ..., n-1 whichever rank computes it, and
// op::avg is divided once, so every rank ends with the same bits.
//
// check_finite: a rank that finds a NaN or Inf marks its next stage flag, so every rank
// stops at the same barrier. The staged two-shot checks each chunk as it stages it (no
// extra pass); the other paths check the whole input before the first reduction.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "gradsync/algo/concept.hpp"
#include "gradsync/algo/detail/direct_call.hpp"
#include "gradsync/algo/detail/direct_registered.hpp"
#include "gradsync/algo/detail/erasing_run.hpp"
#include "gradsync/algo/detail/partition.hpp"
#include "gradsync/transport/concept.hpp"

namespace gradsync::algo {

/// One-shot: each rank reduces the whole vector from every rank's copy. One flag round
/// per call while the input fits a slot (transport::shm: 32 KiB), else per chunk; above
/// that, registered vectors go by slices (registered_min_bytes).
struct direct_one_shot : detail::erasing_run<direct_one_shot> {
  static constexpr std::string_view name = "direct_one_shot";
  /// Compares the call headers in its first exchange (allreduce() skips agree()), and
  /// checks the input for NaN and Inf itself, sharing the findings in a stage flag
  /// instead of a message round.
  static constexpr algorithm_traits traits{
      .needs_peer_access = true, .checks_headers = true, .checks_finite = true, .on_bytes = true};

  /// From this many bytes (and past the inline size) a vector that every rank registered
  /// (transport::shm::allocate) is reduced in place by slices, as direct_two_shot does: the
  /// staging copy and n - 1 of the n full reads go, for one more flag round. 2 ranks: at
  /// every size past the inline one; more: from 128 KiB (docs/perf/tuning.md).
  static constexpr std::size_t registered_min_bytes(std::size_t ranks) {
    return ranks <= 2 ? 0 : std::size_t{128} << 10;
  }

  template <transport_policy Tr>
  static void run_bytes(Tr& t, std::byte* data, std::size_t count,
                        const typename detail::direct_call<Tr>::op_type& op,
                        const call_context& ctx) {
    detail::check_direct_transport<Tr>();
    detail::direct_call<Tr> c(t, data, count, op, ctx);
    if (c.n_ == 1) {
      c.check_finite_first();
      return c.finalize(c.data_, c.count_);
    }
    if (c.count_ <= c.inline_capacity()) {
      c.open(name, true);
      c.check_finite_first();
      c.reduce(
          c.data_, [&](std::size_t j) { return c.payload_bytes(j); }, c.n_, c.count_);
      c.finalize(c.data_, c.count_);
      return c.close();
    }
    // Above the inline size, a vector every rank registered is read in place, as two-shot
    // reads it: the notes travel with the headers, so every rank takes the same path.
    const std::size_t bytes = c.bytes(c.count_);
    const std::uint64_t note = detail::registered_note(c);
    c.open(name, false, &note, sizeof note);
    if (bytes >= registered_min_bytes(c.n_) && detail::all_registered(c, bytes)) {
      c.check_finite_first();
      return detail::two_shot_registered(c, bytes >= detail::direct_stream_min_bytes);
    }
    c.check_finite_first();
    const std::size_t chunk = c.half_elems();
    for (std::size_t k = 0, off = 0; off < c.count_; ++k, off += chunk) {
      const std::size_t len = std::min(chunk, c.count_ - off);
      std::byte* const in = c.at(c.data_, off);
      std::memcpy(c.half(c.r_, k), in, c.bytes(len));
      c.barrier(k + 1);
      c.reduce(
          in, [&](std::size_t j) { return c.half(j, k); }, c.n_, len);
      c.finalize(in, len);
    }
    c.close();
  }
};

/// Two-shot: each rank reduces its 1/n slice from every rank's copy, then gathers the
/// other slices from their owners. One flag round per chunk of a third of a staging
/// buffer (plus one), besides the header round.
struct direct_two_shot : detail::erasing_run<direct_two_shot> {
  static constexpr std::string_view name = "direct_two_shot";
  /// Compares the call headers in its first exchange (allreduce() skips agree()), and
  /// checks the input for NaN and Inf itself: staged, in the copy that stages each
  /// chunk, so a late chunk's NaN is found after earlier chunks were reduced.
  static constexpr algorithm_traits traits{
      .needs_peer_access = true, .checks_headers = true, .checks_finite = true, .on_bytes = true};

  template <transport_policy Tr>
  static void run_bytes(Tr& t, std::byte* data, std::size_t count,
                        const typename detail::direct_call<Tr>::op_type& op,
                        const call_context& ctx) {
    detail::check_direct_transport<Tr>();
    detail::direct_call<Tr> c(t, data, count, op, ctx);
    const std::size_t n = c.n_, r = c.r_;
    if (n == 1) {
      c.check_finite_first();
      return c.finalize(c.data_, c.count_);
    }
    const bool stream = c.bytes(c.count_) >= detail::direct_stream_min_bytes;
    const std::uint64_t note = detail::registered_note(c);
    c.open(name, false, &note, sizeof note);
    if (detail::all_registered(c, c.bytes(c.count_))) {
      c.check_finite_first();
      return detail::two_shot_registered(c, stream);
    }
    // Chunks rotate through thirds of the staging buffer, so that staging chunk k+1 and
    // publishing the reduced slices of chunk k share one barrier: when a rank stages
    // chunk k+1 into third (k+1)%3, every peer has passed the barrier after chunk k-1,
    // so it has finished gathering chunk k-2, the last user of that third.
    const std::size_t chunk = c.third_elems();
    const std::size_t chunks = (c.count_ + chunk - 1) / chunk;
    auto len_of = [&](std::size_t k) { return std::min(chunk, c.count_ - k * chunk); };
    // With check_finite, staging also looks for NaN and Inf in the whole chunk (the own
    // slice without copying it), and the barrier after it carries what it found.
    const bool finite = c.check_finite();
    const detail::host_loops& loops = *c.loops_;
    auto stage = [&](std::size_t k) {  // copy the slices the others reduce; true: chunk k is bad
      const std::size_t len = len_of(k);
      const std::byte* in = c.at(c.data_, k * chunk);
      std::byte* mine = c.third(r, k);
      bool bad = false;
      for (std::size_t i = 0; i < n; ++i) {
        const detail::range s = detail::part(len, n, i);
        if (!finite) {
          if (i != r) std::memcpy(c.at(mine, s.offset), c.at(in, s.offset), c.bytes(s.count));
        } else if (i != r) {
          bad |= loops.copy_first_non_finite(c.at(mine, s.offset), c.at(in, s.offset), s.count) <
                 s.count;
        } else {
          bad |= loops.first_non_finite(c.at(in, s.offset), s.count) < s.count;
        }
      }
      return bad;
    };
    // Chunk k was staged before step k + 1; its input is untouched until iteration k.
    auto staged = [&](std::size_t k, bool bad) {
      if (!finite) return c.barrier(k + 1);
      if (c.barrier_marked(k + 1, bad))
        c.fail_non_finite(c.at(c.data_, k * chunk), len_of(k), k * chunk, k * chunk);
    };
    if (chunks > 0) staged(0, stage(0));
    for (std::size_t k = 0; k < chunks; ++k) {
      const std::size_t len = len_of(k);
      std::byte* in = c.at(c.data_, k * chunk);
      std::byte* mine = c.third(r, k);
      const detail::range my = detail::part(len, n, r);
      std::byte* const slice = c.at(mine, my.offset);
      c.reduce(
          slice,
          [&](std::size_t j) -> const std::byte* {
            return c.at(j == r ? in : c.third(j, k), my.offset);
          },
          n, my.count);
      c.finalize(slice, my.count);
      detail::copy_out(c.at(in, my.offset), slice, c.bytes(my.count), stream);
      if (k + 1 < chunks) {
        staged(k + 1, stage(k + 1));
      } else {
        c.barrier(k + 2);
      }
      for (std::size_t i = 0; i < n; ++i) {  // gather the slices the others own
        const detail::range s = detail::part(len, n, i);
        if (i != r)
          detail::copy_out(c.at(in, s.offset), c.at(c.third(i, k), s.offset), c.bytes(s.count),
                           stream);
      }
    }
    if (stream) detail::stream_fence();
    c.close();
  }
};

}  // namespace gradsync::algo
