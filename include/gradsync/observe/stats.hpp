// SPDX-License-Identifier: Apache-2.0
// Statistics of allreducer calls: what one call moved and how fast (per call), and the
// running totals (cumulative), with a one-line summary for trainers to print.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace gradsync::observe {

/// One bucket of a call: its payload, what its codec handed to the collectives (the
/// payload itself when uncompressed), and what this rank sent for it.
struct bucket_stats {
  std::size_t bytes_in = 0;       ///< payload bytes of the bucket
  std::size_t bytes_encoded = 0;  ///< bytes given to allreduce / allgather (this rank's part)
  std::size_t bytes_wire = 0;     ///< bytes this rank sent for it (as call_stats::bytes_wire)
  /// Compression ratio: payload / encoded bytes (fp16 2, int8<256> 3.94, top-k 1 % 50).
  double ratio() const {
    return bytes_encoded ? static_cast<double>(bytes_in) / static_cast<double>(bytes_encoded) : 0;
  }
};

/// What one call (a step of registered buckets, a grouped call, or one tensor) did.
struct call_stats {
  std::size_t tensors = 0;        ///< tensors reduced
  std::size_t buckets = 0;        ///< collectives issued (buckets, or tensors when unfused)
  std::size_t bytes_in = 0;       ///< payload bytes reduced (sum of tensor sizes)
  std::size_t bytes_wire = 0;     ///< bytes this rank sent (measured; see wire_measured)
  bool wire_measured = true;      ///< false: bytes_wire is the ring model 2(n-1)/n * bytes_in
  std::size_t bytes_encoded = 0;  ///< bytes given to the collectives (sum over per_bucket)
  std::vector<bucket_stats> per_bucket;  ///< bucket k of the plan at index k
  std::size_t ranks = 1;                 ///< ranks in the group
  std::string_view algorithm;            ///< algorithm name (static storage)
  /// What ran per bucket when the algorithm chooses (algo::auto_select), e.g.
  /// "direct_one_shot x1, direct_two_shot x4"; empty when it is `algorithm` itself.
  std::string chosen;
  std::string_view fusion;       ///< fusion policy name (static storage)
  std::string_view compression;  ///< compression policy name (static storage)
  double seconds = 0;            ///< first launch to last completion (communication time)
  double pack_seconds = 0;       ///< time spent packing and unpacking buckets
  double compress_seconds = 0;   ///< time spent converting buckets to and from the wire type
  std::size_t stalls = 0;  ///< collectives longer than the stall threshold (GRADSYNC_STALL_WARN)

  /// Compression ratio of the call: bytes_in / bytes_encoded (1 uncompressed).
  double ratio() const {
    return bytes_encoded ? static_cast<double>(bytes_in) / static_cast<double>(bytes_encoded) : 0;
  }
  /// Algorithm bandwidth in GB/s: bytes_in / seconds.
  double algbw() const { return seconds > 0 ? static_cast<double>(bytes_in) / seconds / 1e9 : 0; }
  /// Bus bandwidth in GB/s: algbw * 2(n-1)/n (nccl-tests' definition for allreduce).
  double busbw() const {
    return ranks > 1 ? algbw() * 2.0 * static_cast<double>(ranks - 1) / static_cast<double>(ranks)
                     : 0;
  }
};

/// Running totals over every completed call.
struct cumulative_stats {
  std::size_t calls = 0;          ///< completed calls
  std::size_t tensors = 0;        ///< tensors reduced, summed over the calls
  std::size_t buckets = 0;        ///< collectives issued
  std::size_t bytes_in = 0;       ///< payload bytes
  std::size_t bytes_wire = 0;     ///< bytes this rank sent
  std::size_t bytes_encoded = 0;  ///< bytes the compression handed to the collectives
  double seconds = 0;             ///< time in collectives
  double pack_seconds = 0;        ///< time packing and unpacking
  double compress_seconds = 0;    ///< time in codec passes
  std::size_t stalls = 0;         ///< collectives longer than the stall threshold

  /// Adds one completed call.
  void add(const call_stats& c) {
    ++calls;
    tensors += c.tensors;
    buckets += c.buckets;
    bytes_in += c.bytes_in;
    bytes_wire += c.bytes_wire;
    bytes_encoded += c.bytes_encoded;
    seconds += c.seconds;
    pack_seconds += c.pack_seconds;
    compress_seconds += c.compress_seconds;
    stalls += c.stalls;
  }
};

namespace detail {
inline std::string human_bytes(double b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
  return buf;
}
}  // namespace detail

/// "rank 0/2 ring+bucket: last 161 tensors in 5 buckets, 97.5 MiB in, 97.5 MiB wire,
/// 21.3 ms, algbw 4.80 GB/s busbw 4.80 GB/s | total 10 calls, 975.0 MiB, 0.213 s"; with a
/// compression policy its name follows the fusion's ("ring+bucket+fp16") and the
/// conversion time and the compression ratio the packing time.
inline std::string summary_line(std::size_t rank, const call_stats& last,
                                const cumulative_stats& total) {
  const bool compressed = !last.compression.empty() && last.compression != "none";
  const std::string comp = compressed ? "+" + std::string(last.compression) : std::string();
  char conv[64] = "";
  if (compressed)
    std::snprintf(conv, sizeof conv, ", compress %.3f ms, ratio %.1fx", last.compress_seconds * 1e3,
                  last.ratio());
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "rank %zu/%zu %.*s%s+%.*s%s: last %zu tensors in %zu buckets, %s in, %s wire%s, "
                "%.3f ms (pack %.3f ms%s), algbw %.2f GB/s busbw %.2f GB/s | total %zu calls, %s "
                "in, %.3f s",
                rank, last.ranks, static_cast<int>(last.algorithm.size()), last.algorithm.data(),
                last.chosen.empty() ? "" : ("[" + last.chosen + "]").c_str(),
                static_cast<int>(last.fusion.size()), last.fusion.data(), comp.c_str(),
                last.tensors, last.buckets,
                detail::human_bytes(static_cast<double>(last.bytes_in)).c_str(),
                detail::human_bytes(static_cast<double>(last.bytes_wire)).c_str(),
                last.wire_measured ? "" : " (model)", last.seconds * 1e3, last.pack_seconds * 1e3,
                conv, last.algbw(), last.busbw(), total.calls,
                detail::human_bytes(static_cast<double>(total.bytes_in)).c_str(), total.seconds);
  return buf;
}

}  // namespace gradsync::observe
