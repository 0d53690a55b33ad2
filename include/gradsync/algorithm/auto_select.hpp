// SPDX-License-Identifier: Apache-2.0
// algo::auto_select — picks ring, tree or halving_doubling per call from the message
// size and the rank count, using the small tables below (one for ranks on one host, one
// for ranks across a network: the transport's crosses_network()). The choice depends only on
// (count * sizeof(T), n), which every rank agrees on (the consistency header checks
// count and type), so every rank runs the same algorithm. The choice is logged at
// GRADSYNC_LOG=debug, e.g. "auto_select: 4194304 bytes, 4 ranks -> ring".
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "gradsync/algorithm/concept.hpp"
#include "gradsync/algorithm/direct.hpp"
#include "gradsync/algorithm/halving_doubling.hpp"
#include "gradsync/algorithm/ring.hpp"
#include "gradsync/algorithm/tree.hpp"
#include "gradsync/algorithm/tuning.hpp"
#include "gradsync/core/log.hpp"
#include "gradsync/transport/concept.hpp"

namespace gradsync::algo {

/// What auto_select can run.
enum class auto_choice : std::uint8_t { ring, tree, halving_doubling };

inline constexpr std::string_view auto_choice_name(auto_choice c) {
  switch (c) {
    case auto_choice::ring:
      return "ring";
    case auto_choice::tree:
      return "tree";
    case auto_choice::halving_doubling:
      return "halving_doubling";
  }
  return "ring";
}

/// One row of the selection table: for rank counts in [min_ranks, max_ranks] and
/// messages of at most max_bytes bytes, run `algo`. The first matching row wins.
struct auto_rule {
  std::size_t min_ranks;
  std::size_t max_ranks;
  std::size_t max_bytes;
  auto_choice algo;
};

namespace tuning {
inline constexpr std::size_t any_size = static_cast<std::size_t>(-1);

/// Selection table for transports without peer access; past every row: ring.
/// Measured with tests/core/measure_algorithms (transport::local, float sum, check on,
/// ranks lined up before each call, order rotated, median of 9 calls per run, median of
/// 3 runs) on the 2-core CI machine while other builds ran (load 9-14), twice; figures
/// are ring / tree / halving_doubling in microseconds, "a; b" for the two sessions.
/// At 2 MiB and 8 MiB the three stay within the noise of each other (all are bound by
/// memory bandwidth on 2 cores; e.g. 8 ranks, 8 MiB: 51814/46775/52937; 66492/71100/
/// 69136), so ring, the bandwidth-optimal one, keeps every size past the rows. 2 ranks:
/// equal within 5% at every size (4 KiB: 5.5/5.6/5.5; 7.8/8.0/7.6), so ring.
inline constexpr auto_rule auto_rules[] = {
    // 4 ranks, 32 KiB: 101.8/65.5/56.0; 79.1/61.7/60.6 (4 KiB: 61.1/45.5/37.9).
    {4, 4, 32 << 10, auto_choice::halving_doubling},
    // 6 ranks, 32 KiB: 186.9/150.2/129.2; 8 ranks, 32 KiB: 331.0/203.7/173.6;
    // 379.7/217.5/203.4. 7 ranks not measured: between 6 and 8.
    {6, 8, 32 << 10, auto_choice::halving_doubling},
    // 128 KiB, ring vs tree: 3 ranks 77.4 vs 66.4; 118.8 vs 111.1. 4 ranks 161.6 vs
    // 120.3; 139.1 vs 124.4. 5 ranks 216.3 vs 153.7; 247.7 vs 157.5. 6 ranks 320.0 vs
    // 278.3. 8 ranks 659.2 vs 431.9; 580.0 vs 474.4. At 512 KiB ring is level again
    // (4 ranks 363.2/382.9; 364.6/404.9). More than 8 ranks: not measured (threads on
    // 2 cores), tree's log-depth latency assumed to win the same range.
    {3, any_size, 128 << 10, auto_choice::tree},
};
/// Selection table for transports whose ranks span hosts (crosses_network()); past every
/// row: ring. Measured with allreduce_perf over transport::mpi across simulated hosts
/// (scripts/vcluster, 1 rank per host, Open MPI, medians of 10; docs/cluster.md), ring /
/// tree / halving_doubling in microseconds at 1 Gbit/s; 10 Gbit/s. 2 ranks: within 10 %
/// up to 32 KiB (8 B: 78.5/81.1/81.4; 42.7/44.8/43.0), ring from 128 KiB (2 MiB:
/// 17522/22556/27715; 1956/2914/2942), so ring.
inline constexpr auto_rule auto_rules_network[] = {
    // 4 ranks, 512 B-32 KiB: 1284/1070/940, 1104/1339/987; 1296/1006/879, 1299/1125/1179.
    {3, 8, 32 << 10, auto_choice::halving_doubling},
    // 4 ranks, 128 KiB: 1705/2048/1758; 1577/1347/1865. From 512 KiB ring (6504/10041/6785).
    {3, any_size, 128 << 10, auto_choice::tree},
};
}  // namespace tuning

/// The table's answer for `bytes` bytes on `ranks` ranks (ring when no row matches);
/// `network`: the ranks span hosts (tuning::auto_rules_network).
inline constexpr auto_choice auto_choose(std::size_t bytes, std::size_t ranks,
                                         bool network = false) {
  const auto pick = [&](const auto& rules) {
    for (const auto_rule& rule : rules) {
      if (ranks >= rule.min_ranks && ranks <= rule.max_ranks && bytes <= rule.max_bytes) {
        return rule.algo;
      }
    }
    return auto_choice::ring;
  };
  return network ? pick(tuning::auto_rules_network) : pick(tuning::auto_rules);
}

struct auto_select {
  static constexpr std::string_view name = "auto";
  static constexpr bool needs_peer_access = false;
  static constexpr bool needs_native = false;
  /// Whether every choice over Tr is a direct algorithm (host peer-memory transports: shm).
  template <class Tr>
  static constexpr bool direct_on = peer_memory_transport<Tr> && (Tr::memory == memory_space::host);
  /// On shm every choice is a direct algorithm, which compares the call headers itself,
  /// so allreduce() skips its agree() round trip there.
  template <class Tr>
  static constexpr bool checks_headers_on = direct_on<Tr>;

  /// On a host peer-memory transport: one-shot up to this size, two-shot above.
  static constexpr std::size_t one_shot_max_bytes = 256 << 10;

  /// The algorithm run() uses for `bytes` over `n` ranks of Tr (for statistics and
  /// logs; run() decides with the same rules); `network`: Tr's crosses_network().
  template <class Tr>
  static std::string_view choice(std::size_t bytes, std::size_t n, bool network = false) {
    if constexpr (direct_on<Tr>) {
      return bytes <= one_shot_max_bytes ? direct_one_shot::name : direct_two_shot::name;
    } else {
      return auto_choice_name(auto_choose(bytes, n, network));
    }
  }

  template <transport_policy Tr, class T, class Op>
  static void run(Tr& t, std::span<T> data, Op op, const call_context& ctx) {
    const std::size_t bytes = data.size() * sizeof(T), n = t.size();
    // Host peer-memory transports (shm) always take a direct algorithm; the choice
    // depends only on (bytes, n), so every rank makes the same one. Any other transport,
    // peer access or not, goes by the table.
    if constexpr (direct_on<Tr>) {
      // transport::shm, measured with tests/shm/shm_probe (2-core EPYC VM shared
      // with ~10 busy processes, ranks at nice -20, float sum, median us per call):
      //   2 ranks   8 B: one-shot 0.41, two-shot 0.83, ring 1.33, tree 1.50
      //            32 KiB: one 9.5, two 31, ring 21, tree 18; 256 KiB: one 166, two 248
      //            64 MiB: two-shot 206-270 ms, ring 320-1350 ms, h-d 216-1100 ms
      //   4 ranks  64 KiB: one 189, two 250; 256 KiB: one 2426, two 5977;
      //            4 MiB: one 32461, two 15638; 64 MiB: two 249 ms, ring 375 ms
      // One-shot (header round + one stage per chunk; inline in the slot up to 32 KiB)
      // wins up to 256 KiB; above, two-shot reads each byte once per rank. Only direct
      // algorithms here: they compare call headers themselves (checks_headers_on).
      const bool one = bytes <= one_shot_max_bytes;
      if (log_enabled(log_level::debug)) {
        log(log_level::debug, t.rank(), "auto_select: %zu bytes, %zu ranks -> %s", bytes, n,
            one ? "direct_one_shot" : "direct_two_shot");
      }
      if (one) return direct_one_shot::run(t, data, op, ctx);
      return direct_two_shot::run(t, data, op, ctx);
    }
    const bool network = tuning::crosses_network(t);
    const auto_choice c = auto_choose(bytes, n, network);
    if (log_enabled(log_level::debug)) {
      log(log_level::debug, t.rank(), "auto_select: %zu bytes, %zu ranks%s -> %s", bytes, n,
          network ? " across hosts" : "", auto_choice_name(c).data());
    }
    switch (c) {
      case auto_choice::tree:
        tree::run(t, data, op, ctx);
        return;
      case auto_choice::halving_doubling:
        halving_doubling::run(t, data, op, ctx);
        return;
      case auto_choice::ring:
        break;
    }
    ring::run(t, data, op, ctx);
  }
};

}  // namespace gradsync::algo
