// SPDX-License-Identifier: Apache-2.0
// Benchmark results: one row per (implementation, size), printed as an nccl-tests-style
// table and appended to a CSV file. Shared by the allreduce benchmarks.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include "build_note.hpp"

namespace gradsync::bench {

/// One measured size of one implementation.
struct row {
  std::string kind;       ///< "gradsync", "peer" or "probe"
  std::string impl;       ///< "gradsync", "MPI_Allreduce", "gloo", "stream_add", "bound_*"
  std::string transport;  ///< local, shm, mpi, tcp, or "-"
  std::string algo;       ///< algorithm name, or "-"
  std::string mpi;        ///< MPI flavour of the process (openmpi, mpich) or "none"
  std::size_t ranks = 0;
  std::size_t bytes = 0;  ///< message size in bytes (count * element size)
  std::size_t count = 0;
  std::string type, op;
  std::size_t iters = 0;
  double time_us = 0;    ///< median over iterations of the slowest rank's time
  double min_us = 0;     ///< fastest iteration (again the slowest rank's time)
  double algbw = 0;      ///< GB/s (1e9): bytes / time
  double busbw = 0;      ///< GB/s (1e9): algbw * 2(n-1)/n
  long long wrong = -1;  ///< elements differing from the exact result (-1: not checked)
};

/// Bus-bandwidth factor of allreduce over n ranks: 2(n-1)/n (nccl-tests' convention).
inline double busbw_factor(std::size_t n) {
  return n <= 1 ? 1.0 : 2.0 * static_cast<double>(n - 1) / static_cast<double>(n);
}

/// Median of v (v is reordered).
inline double median(std::vector<double>& v) {
  if (v.empty()) return 0;
  const std::size_t m = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(m), v.end());
  double hi = v[m];
  if (v.size() % 2) return hi;
  const double lo = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(m));
  return (lo + hi) / 2;
}

/// Prints "# title" and the column header of a table.
inline void print_table_header(const std::string& title) {
  std::printf("#\n# %s\n", title.c_str());
  std::printf("# %12s %12s %8s %6s %6s %11s %11s %8s %8s %8s\n", "size", "count", "type", "redop",
              "iters", "time", "min", "algbw", "busbw", "#wrong");
  std::printf("# %12s %12s %8s %6s %6s %11s %11s %8s %8s %8s\n", "(B)", "(elements)", "", "", "",
              "(us)", "(us)", "(GB/s)", "(GB/s)", "");
  std::fflush(stdout);
}

/// Prints one line of a table.
inline void print_table_row(const row& r) {
  const std::string wrong = r.wrong < 0 ? "N/A" : std::to_string(r.wrong);
  std::printf("  %12zu %12zu %8s %6s %6zu %11.2f %11.2f %8.3f %8.3f %8s\n", r.bytes, r.count,
              r.type.c_str(), r.op.c_str(), r.iters, r.time_us, r.min_us, r.algbw, r.busbw,
              wrong.c_str());
  std::fflush(stdout);
}

/// Appends rows to a CSV file (writing the header when the file is new or empty).
class csv_writer {
 public:
  explicit csv_writer(std::string path) : path_(std::move(path)) {}
  bool enabled() const { return !path_.empty(); }

  /// Appends `r`; returns false (and warns once) if the file cannot be written.
  bool append(const row& r) {
    if (path_.empty()) return true;
    std::FILE* f = std::fopen(path_.c_str(), "a");
    if (!f) {
      if (!warned_) std::fprintf(stderr, "allreduce_perf: cannot write %s\n", path_.c_str());
      warned_ = true;
      return false;
    }
    std::fseek(f, 0, SEEK_END);
    if (std::ftell(f) == 0) {
      std::fprintf(f,
                   "kind,impl,transport,algo,mpi,ranks,bytes,count,type,op,iters,time_us,min_us,"
                   "algbw_gbs,busbw_gbs,wrong\n");
    }
    std::fprintf(f, "%s,%s,%s,%s,%s,%zu,%zu,%zu,%s,%s,%zu,%.3f,%.3f,%.4f,%.4f,%lld\n",
                 r.kind.c_str(), r.impl.c_str(), r.transport.c_str(), r.algo.c_str(), r.mpi.c_str(),
                 r.ranks, r.bytes, r.count, r.type.c_str(), r.op.c_str(), r.iters, r.time_us,
                 r.min_us, r.algbw, r.busbw, r.wrong);
    std::fclose(f);
    return true;
  }

 private:
  std::string path_;
  bool warned_ = false;
};

}  // namespace gradsync::bench
