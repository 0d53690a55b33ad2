// SPDX-License-Identifier: Apache-2.0
// Probe: a STREAM-like "add" kernel (c[i] = a[i] + b[i], doubles) run by every rank at
// once, giving the aggregate DRAM bandwidth B the ranks can draw together; from it the
// memory-bound limits of a host allreduce at this rank count (docs/performance.md
// derives them):
//   two-shot (reduce-scatter, then copy the other n-1 slices): each rank reads n slices
//   and writes one, then reads and writes n-1 slices: (3n-1) bytes of traffic per byte
//   of message in aggregate, so algbw <= B / (3n - 1);
//   floor (every input read once, every output written once): 2n, algbw <= B / (2n).
// Then the hash of result verification (call_options::verify, kernels/hash.hpp) over
// one of the arrays, every rank at once: the price of --verify 1 per byte.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "../common/group.hpp"
#include "gradsync/config.hpp"
#include "gradsync/kernels/hash.hpp"
#include "../common/report.hpp"
#include "options.hpp"

namespace gradsync::bench {

/// Aggregate bandwidth of the add kernel and the allreduce limits derived from it.
struct stream_result {
  double aggregate_gbs = 0;   ///< B: bytes moved by all ranks / slowest rank's time
  double two_shot_algbw = 0;  ///< B / (3n - 1)
  double floor_algbw = 0;     ///< B / (2n)
  double hash_gbs = 0;        ///< kernels::buffer_hash, bytes hashed by all ranks / time
};

/// Runs the probe on every rank of g at once (collective); rank 0 prints and writes CSV.
inline stream_result run_stream_probe(group& g, const options& o, csv_writer& csv,
                                      const std::string& mpi_name) {
  using clk = std::chrono::steady_clock;
  const std::size_t n = g.size();
  const std::size_t count = std::max<std::size_t>(1, o.stream_bytes / sizeof(double));
  // Touched here, by this rank, so the pages are local and faulted in before timing.
  std::unique_ptr<double[]> a(new double[count]), b(new double[count]), c(new double[count]);
  for (std::size_t i = 0; i < count; ++i) {
    a[i] = 1.0 + static_cast<double>(i % 7);
    b[i] = 2.0;
    c[i] = 0.0;
  }
  constexpr std::size_t reps = 7;
  std::vector<double> times(reps);
  double* GRADSYNC_RESTRICT pa = a.get();
  double* GRADSYNC_RESTRICT pb = b.get();
  double* GRADSYNC_RESTRICT pc = c.get();
  for (std::size_t k = 0; k < reps; ++k) {
    g.barrier();
    const auto t0 = clk::now();
    for (std::size_t i = 0; i < count; ++i) pc[i] = pa[i] + pb[i];
    times[k] = std::chrono::duration<double>(clk::now() - t0).count();
    pa[k % count] = pc[(k * 31) % count];  // keep the stores observable
  }
  g.max_all(times);
  double best = times[0];
  for (double t : times) best = t < best ? t : best;
  stream_result r;
  const double bytes = 3.0 * sizeof(double) * static_cast<double>(count) * static_cast<double>(n);
  r.aggregate_gbs = bytes / best / 1e9;
  r.two_shot_algbw = r.aggregate_gbs / (3.0 * static_cast<double>(n) - 1.0);
  r.floor_algbw = r.aggregate_gbs / (2.0 * static_cast<double>(n));
  // The verification hash, all ranks at once over one array (read only).
  std::vector<double> htimes(reps);
  std::uint64_t sink = 0;
  for (std::size_t k = 0; k < reps; ++k) {
    g.barrier();
    const auto t0 = clk::now();
    sink += kernels::buffer_hash(pa, count * sizeof(double));
    htimes[k] = std::chrono::duration<double>(clk::now() - t0).count();
  }
  pa[0] += static_cast<double>(sink & 1);  // keep the hash observable
  g.max_all(htimes);
  const double hbest = *std::min_element(htimes.begin(), htimes.end());
  r.hash_gbs = static_cast<double>(count * sizeof(double) * n) / hbest / 1e9;
  if (g.rank() == 0) {
    const double f = busbw_factor(n);
    std::printf(
        "#\n# stream_add  ranks=%zu  3 x %zu MiB per rank, best of %zu: aggregate %.2f GB/s"
        " (%.2f GB/s per rank)\n",
        n, count * sizeof(double) >> 20, reps, r.aggregate_gbs,
        r.aggregate_gbs / static_cast<double>(n));
    std::printf("# memory-bound allreduce limit at %zu ranks (docs/performance.md):\n", n);
    std::printf("#   two-shot, B/(3n-1):  algbw %.3f GB/s  busbw %.3f GB/s\n", r.two_shot_algbw,
                r.two_shot_algbw * f);
    std::printf("#   floor,    B/(2n):    algbw %.3f GB/s  busbw %.3f GB/s\n", r.floor_algbw,
                r.floor_algbw * f);
    std::printf(
        "# verify hash (--verify 1), %zu MiB per rank: aggregate %.2f GB/s (%.2f per rank)\n",
        count * sizeof(double) >> 20, r.hash_gbs, r.hash_gbs / static_cast<double>(n));
    std::fflush(stdout);
    row base;
    base.kind = "probe";
    base.impl = "stream_add";
    base.transport = "-";
    base.algo = "-";
    base.mpi = mpi_name;
    base.ranks = n;
    base.bytes = count * sizeof(double);
    base.count = count;
    base.type = "double";
    base.op = "add";
    base.iters = reps;
    base.time_us = best * 1e6;
    base.min_us = best * 1e6;
    base.algbw = r.aggregate_gbs;  // for the probe: aggregate bandwidth B
    base.busbw = r.aggregate_gbs;
    csv.append(base);
    row two = base;
    two.impl = "bound_two_shot";
    two.algbw = r.two_shot_algbw;
    two.busbw = r.two_shot_algbw * f;
    csv.append(two);
    row fl = base;
    fl.impl = "bound_floor";
    fl.algbw = r.floor_algbw;
    fl.busbw = r.floor_algbw * f;
    csv.append(fl);
    row h = base;
    h.impl = "verify_hash";
    h.op = "hash";
    h.time_us = hbest * 1e6;
    h.min_us = hbest * 1e6;
    h.algbw = r.hash_gbs;  // aggregate, as the probe's
    h.busbw = r.hash_gbs;
    csv.append(h);
  }
  return r;
}

}  // namespace gradsync::bench
