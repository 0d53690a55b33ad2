// Tuning constants shared by the algorithms. Each entry records why it was chosen.
#pragma once

#include <cstddef>

namespace gradsync::algo::tuning {

/// Default pipeline segment of the ring, tree and halving_doubling algorithms. 256 KiB
/// keeps a segment in L2 on the 2-core CI machine while making per-message overhead
/// (about 2 us for the local and shm transports) negligible next to the copy (about
/// 10 us at 25 GB/s). A transport may ask for another (segment_bytes_for below).
inline constexpr std::size_t segment_bytes = 256 << 10;

/// Pipeline segment of ring and halving_doubling over transport Tr: Tr's own
/// `static constexpr std::size_t pipeline_segment_bytes` when it declares one (a
/// transport whose per-message cost is high, e.g. MPI's rendezvous handshake), else
/// segment_bytes. tree keeps segment_bytes: its pipeline fills once per tree level.
template <class Tr>
constexpr std::size_t segment_bytes_for() {
  if constexpr (requires { Tr::pipeline_segment_bytes; }) {
    static_assert(Tr::pipeline_segment_bytes > 0, "pipeline_segment_bytes must be > 0");
    return Tr::pipeline_segment_bytes;
  } else {
    return segment_bytes;
  }
}

/// How many segments behind its receives the ring completes its sends within a step:
/// Tr's own `static constexpr std::size_t ring_send_lag` when it declares one, else 0
/// (sends are completed only at the end of each step). A transport whose sends hold a
/// resource until they complete (transport::mpi's staging blocks) declares a small lag
/// so the resource comes back while the segment is still hot in the caches.
template <class Tr>
constexpr std::size_t send_lag_for() {
  if constexpr (requires { Tr::ring_send_lag; }) {
    return Tr::ring_send_lag;
  } else {
    return 0;
  }
}

/// Receives kept in flight by the ring's reduce-scatter (scratch slots of a segment each).
inline constexpr std::size_t ring_inflight = 4;

/// Segments of each direction kept in flight by halving_doubling's pairwise exchanges
/// (scratch: this many segments). Same reasoning as ring_inflight: enough to keep the
/// peer busy while this rank reduces, 1 MiB of scratch at the default segment size.
inline constexpr std::size_t hd_inflight = 4;

}  // namespace gradsync::algo::tuning
