// SPDX-License-Identifier: Apache-2.0
// Tuning constants shared by the algorithms. Each entry records why it was chosen.
#pragma once

#include <cstddef>

#include "gradsync/transport/concept.hpp"

namespace gradsync::algo::tuning {

/// Default pipeline segment of the ring, tree and halving_doubling algorithms. 256 KiB
/// keeps a segment in L2 on the 2-core CI machine while making per-message overhead
/// (about 2 us for the local and shm transports) negligible next to the copy (about
/// 10 us at 25 GB/s). A transport may ask for another (segment_bytes_for below).
inline constexpr std::size_t segment_bytes = 256 << 10;

/// Pipeline segment of ring and halving_doubling over transport Tr: its traits'
/// pipeline_segment_bytes when set (a transport whose per-message cost is high, e.g.
/// MPI's rendezvous handshake), else segment_bytes. tree keeps segment_bytes: its
/// pipeline fills once per tree level.
template <class Tr>
constexpr std::size_t segment_bytes_for() {
  constexpr std::size_t own = transport_traits_of<Tr>().pipeline_segment_bytes;
  return own ? own : segment_bytes;
}

/// How many segments behind its receives the ring completes its sends within a step:
/// Tr's traits' ring_send_lag (default 0: sends are completed only at the end of each
/// step). A transport whose sends hold a resource until they complete (transport::mpi's
/// staging blocks) declares a small lag so the resource comes back while the segment is
/// still hot in the caches.
template <class Tr>
constexpr std::size_t send_lag_for() {
  return transport_traits_of<Tr>().ring_send_lag;
}

/// How many pieces of a pipelined two-level allgather go to each other node at once:
/// Tr's traits' pieces_in_flight (default 0: all of them; every receive is posted at once
/// either way). MPI interleaves concurrent sends to one peer, so that all pieces arrive
/// together at the end; sent one at a time they arrive in order and the node phase of
/// each overlaps the next one's crossing.
template <class Tr>
constexpr std::size_t pieces_in_flight_for() {
  return transport_traits_of<Tr>().pieces_in_flight;
}

/// Receives kept in flight by the ring's reduce-scatter (scratch slots of a segment each).
inline constexpr std::size_t ring_inflight = 4;

/// Whether t's messages cross a network (transport/concept.hpp); kept here as well.
using gradsync::crosses_network;

/// Receives that ring and halving_doubling keep in flight in a step of `m` segments
/// to one peer: `local` (ring_inflight, hd_inflight) inside a host; across a network
/// every receive of the step at once. Over TCP a rendezvous reply travels in the same
/// stream as the data going the other way and waits behind it, so with a window of a
/// few segments the sender idles: 2 hosts x 1 rank at 1 Gbit/s, Open MPI, 32 MiB each
/// way in 1 MiB messages: 4 in flight 501 ms, 16 302 ms, all 32 281 ms (wire: 284 ms;
/// docs/cluster.md, "Where the time went").
template <class Tr>
std::size_t inflight_segments(const Tr& t, std::size_t m, std::size_t local) {
  const std::size_t k = crosses_network(t) ? m : local;
  return k < 1 ? 1 : k;
}

/// The piece of each rank's block that broadcast_direct, allgather_direct and
/// reduce_scatter_direct stage per barrier: a quarter of a 1 MiB L2, so that the readers
/// find it in the cache. 64 KiB, 256 KiB and 1 MiB: docs/collectives.md, "direct".
inline constexpr std::size_t direct_collective_chunk_bytes = std::size_t{256} << 10;

/// Below this many bytes per rank, gradsync::broadcast, allgather and reduce_scatter on a
/// transport with native collectives (transport::mpi) call them instead of the ring /
/// tree / chain (detail/native_collectives.hpp); the measurement: docs/collectives.md.
inline constexpr std::size_t native_collective_bytes = std::size_t{16} << 20;

/// Pieces algo::hierarchical pipelines a vector of `bytes` into (1: no pipeline) on a
/// two_level whose inter-node level crosses a network (`pipelines`): pieces of at least
/// hierarchical_piece_bytes, at most hierarchical_max_pieces. 2 hosts x 2 ranks, 1 Gbit/s,
/// 64 MiB: see docs/cluster.md for the measured choice.
inline constexpr std::size_t hierarchical_piece_bytes = std::size_t{4} << 20;
inline constexpr std::size_t hierarchical_max_pieces = 8;
inline constexpr std::size_t hierarchical_pieces(std::size_t bytes, bool pipelines) {
  if (!pipelines || bytes < 2 * hierarchical_piece_bytes) return 1;
  const std::size_t p = bytes / hierarchical_piece_bytes;
  return p < hierarchical_max_pieces ? p : hierarchical_max_pieces;
}

/// Pieces a codec cuts a bucket's codes of `bytes` into so that its passes overlap the
/// wire (compress/pieces.hpp; 1: one call). A function of the bytes alone, so every rank
/// cuts alike. Each piece is one more call, and each call drains the link once, so pieces
/// are at least 8 MiB (docs/reproducibility.md has the measured choice).
inline constexpr std::size_t codec_piece_bytes = std::size_t{8} << 20;
inline constexpr std::size_t codec_max_pieces = 8;
inline constexpr std::size_t codec_pieces(std::size_t bytes) {
  const std::size_t p = bytes / codec_piece_bytes;
  return p < 1 ? 1 : p < codec_max_pieces ? p : codec_max_pieces;
}

/// Segments of each direction kept in flight by halving_doubling's pairwise exchanges
/// (scratch: this many segments). Same reasoning as ring_inflight: enough to keep the
/// peer busy while this rank reduces, 1 MiB of scratch at the default segment size.
inline constexpr std::size_t hd_inflight = 4;

}  // namespace gradsync::algo::tuning
