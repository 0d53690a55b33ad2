// SPDX-License-Identifier: Apache-2.0
// How transport::mpi picks mpi_options::network_message_bytes when left to it
// (mpi_options::network_auto): under MPICH, once at construction, the first rank of each
// host exchanges link_probe_bytes with the next host's, link_probe_rounds times; when the
// slowest host moves less than cut_below_gbps, messages to other hosts are cut into
// network_cut_bytes. UCX's TCP transport sends messages up to 16 KiB eagerly and in
// order, and interleaves larger rendezvous transfers, so a pipeline's pieces all arrive
// at the end; on a fast link the small messages cost more CPU than the order gains.
// Measurements: docs/cluster.md (cause 5) and docs/perf/tuning.md.
#pragma once

#include <cstddef>

namespace gradsync::transport::detail {

/// Whether cutting messages to other hosts can pay under this MPI: not under Open MPI,
/// where the cut gained nothing at 1 Gbit/s (docs/perf/tuning.md).
#if defined(OPEN_MPI) && OPEN_MPI
inline constexpr bool network_cut_helps = false;
#else
inline constexpr bool network_cut_helps = true;
#endif

/// The cut on a slow link: UCX's eager limit over TCP.
inline constexpr std::size_t network_cut_bytes = std::size_t{16} << 10;

/// Below this measured rate (Gbit/s, the slowest host's) the cut pays: it gained at 1
/// and 2.5 Gbit/s, was even at 5 and cost up to 1.7x at 10 (the probe reads 2.4, 4.7-4.8
/// and 9.3 on those links).
inline constexpr double cut_below_gbps = 4.0;

/// The probe: each host's first rank sends this much to the next host's, this many
/// times; the fastest round counts (the first one pays page faults and late peers).
inline constexpr std::size_t link_probe_bytes = std::size_t{1} << 20;
inline constexpr std::size_t link_probe_rounds = 3;

}  // namespace gradsync::transport::detail
