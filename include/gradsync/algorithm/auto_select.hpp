// algo::auto_select — picks ring, tree or halving_doubling per call from the message
// size and the rank count, using the small table below. The choice depends only on
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
/// Measured on the 2-core CI machine (load ~10 from parallel builds), transport::local,
/// float sum, check on, median of 9 calls per run, median over 3 runs; figures are
/// ring / tree / halving_doubling in microseconds, from tests/core/measure_algorithms.
/// Ring wins every size >= 128 KiB except on 4 and 8 ranks, where halving_doubling's
/// log2(n) steps still pay; non-power-of-two counts pay halving_doubling's fold.
inline constexpr auto_rule auto_rules[] = {
    // 2 ranks: 256 B 9.3/5.7/9.3, 4 KiB 10.6/8.7/12.2; at 32 KiB ring wins 18.9/21.2/26.3.
    {2, 2, 4 << 10, auto_choice::tree},
    // 3 ranks: 32 KiB 49.4/43.7/63.2; at 128 KiB ring wins 98.5/144.2/156.3.
    {3, 3, 32 << 10, auto_choice::tree},
    // 4 ranks: 4 KiB 80.6/39.3/33.7, 512 KiB 564/595/526; at 2 MiB ring 6677/9063/6971.
    {4, 4, 512 << 10, auto_choice::halving_doubling},
    // 5 ranks: 32 KiB 137.7/98.6/175.3; at 128 KiB ring wins 267/287/383.
    {5, 7, 32 << 10, auto_choice::tree},
    // 8 ranks: 4 KiB 335/140/109, 128 KiB 670/660/524; at 512 KiB ring 4172/5227/5319.
    {8, 8, 128 << 10, auto_choice::halving_doubling},
    // 6, 7 and more than 8 ranks were not measured (threads on 2 cores): extrapolated
    // from 5 ranks (tree for latency-bound sizes, ring beyond).
    {9, any_size, 32 << 10, auto_choice::tree},
};
}  // namespace tuning

/// The table's answer for `bytes` bytes on `ranks` ranks (ring when no row matches).
inline constexpr auto_choice auto_choose(std::size_t bytes, std::size_t ranks) {
  for (const auto_rule& rule : tuning::auto_rules) {
    if (ranks >= rule.min_ranks && ranks <= rule.max_ranks && bytes <= rule.max_bytes) {
      return rule.algo;
    }
  }
  return auto_choice::ring;
}

struct auto_select {
  static constexpr std::string_view name = "auto";
  static constexpr bool needs_peer_access = false;
  static constexpr bool needs_native = false;
  /// On shm every choice is a direct algorithm, which compares the call headers itself,
  /// so allreduce() skips its agree() round trip there.
  template <class Tr>
  static constexpr bool checks_headers_on =
      peer_memory_transport<Tr> && Tr::memory == memory_space::host;

  template <transport_policy Tr, class T, class Op>
  static void run(Tr& t, std::span<T> data, Op op, const call_context& ctx) {
    const std::size_t bytes = data.size() * sizeof(T), n = t.size();
    if constexpr (Tr::peer_access) {
      // HOOK for transports with peer access (shm, cuda_ipc): choose algo::direct
      // one-shot / two-shot (algorithm/direct.hpp) here for the sizes where reading
      // peers' buffers directly wins, log the choice like below, and return; fall
      // through to the table for the rest. The decision must depend only on
      // (bytes, n) so that every rank makes the same one.
      if constexpr (peer_memory_transport<Tr> && Tr::memory == memory_space::host) {
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
        const bool one = bytes <= (256 << 10);
        if (log_enabled(log_level::debug)) {
          log(log_level::debug, t.rank(), "auto_select: %zu bytes, %zu ranks -> %s", bytes, n,
              one ? "direct_one_shot" : "direct_two_shot");
        }
        if (one) return direct_one_shot::run(t, data, op, ctx);
        return direct_two_shot::run(t, data, op, ctx);
      }
    }
    const auto_choice c = auto_choose(bytes, n);
    if (log_enabled(log_level::debug)) {
      log(log_level::debug, t.rank(), "auto_select: %zu bytes, %zu ranks -> %s", bytes, n,
          auto_choice_name(c).data());
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
