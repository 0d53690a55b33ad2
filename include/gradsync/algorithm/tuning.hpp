// Tuning constants shared by the algorithms. Each entry records why it was chosen.
#pragma once

#include <cstddef>

namespace gradsync::algo::tuning {

/// Pipeline segment of the ring and tree algorithms. 256 KiB keeps a segment in L2 on
/// the 2-core CI machine while making per-message overhead (about 2 us for the local
/// and MPI transports) negligible next to the copy (about 10 us at 25 GB/s).
inline constexpr std::size_t segment_bytes = 256 << 10;

/// Receives kept in flight by the ring's reduce-scatter (scratch slots of a segment each).
inline constexpr std::size_t ring_inflight = 4;

/// Segments of each direction kept in flight by halving_doubling's pairwise exchanges
/// (scratch: this many segments). Same reasoning as ring_inflight: enough to keep the
/// peer busy while this rank reduces, 1 MiB of scratch at the default segment size.
inline constexpr std::size_t hd_inflight = 4;

}  // namespace gradsync::algo::tuning
