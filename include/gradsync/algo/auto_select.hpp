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

#include "gradsync/algo/concept.hpp"
#include "gradsync/algo/detail/erased_op.hpp"
#include "gradsync/algo/detail/erasing_run.hpp"
#include "gradsync/algo/direct.hpp"
#include "gradsync/algo/halving_doubling.hpp"
#include "gradsync/algo/ring.hpp"
#include "gradsync/algo/tree.hpp"
#include "gradsync/algo/tuning.hpp"
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

/// Selection table for transports without peer access; past every row: ring (bandwidth-
/// optimal; from 512 KiB all three are memory-bound on 2 cores). Measurements:
/// docs/perf/tuning.md, "ranks on one host".
inline constexpr auto_rule auto_rules[] = {
    {4, 4, 32 << 10, auto_choice::halving_doubling},  // fewest rounds of small messages
    {6, 8, 32 << 10, auto_choice::halving_doubling},  // 7 ranks not measured
    {3, any_size, 128 << 10, auto_choice::tree},      // log-depth latency; ring level at 512 KiB
};
/// Selection table for transports whose ranks span hosts (crosses_network()); past every
/// row: ring (2 ranks: ring at every size). Measurements: docs/perf/tuning.md, "across a
/// network".
inline constexpr auto_rule auto_rules_network[] = {
    {3, 8, 32 << 10, auto_choice::halving_doubling},
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

struct auto_select : detail::erasing_run<auto_select> {
  static constexpr std::string_view name = "auto";
  /// Whether every choice over Tr is a direct algorithm (host peer-memory transports: shm).
  template <class Tr>
  static constexpr bool direct_on = detail::reads_host_peers_v<Tr>;
  static constexpr algorithm_traits traits{.chooses = true};
  /// On shm every choice is a direct algorithm, which compares the call headers and
  /// checks for NaN and Inf itself, so allreduce() skips those passes there. Where Tr
  /// has no extras to choose, every choice is ring, tree or halving_doubling (generic).
  /// Every choice runs on bytes, so auto_select does too.
  template <class Tr>
  static constexpr algorithm_traits traits_on{.generic = !Tr::peer_access && !Tr::native_allreduce,
                                              .checks_headers = direct_on<Tr>,
                                              .checks_finite = direct_on<Tr>,
                                              .chooses = true,
                                              .on_bytes = true};

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

  /// run() on `count` elements of op.elem bytes at `base`.
  template <transport_policy Tr, class Ex>
  static void run_bytes(Tr& t, std::byte* base, std::size_t count, const detail::erased_op<Ex>& op,
                        const call_context& ctx) {
    const std::size_t bytes = count * op.elem, n = t.size();
    // Host peer-memory transports (shm) always take a direct algorithm; the choice
    // depends only on (bytes, n), so every rank makes the same one. Any other transport,
    // peer access or not, goes by the table.
    if constexpr (direct_on<Tr>) {
      // One-shot wins up to 256 KiB, two-shot (each byte read once per rank) above
      // (docs/perf/tuning.md, "transport::shm"). Only direct algorithms here: they
      // compare call headers themselves (checks_headers_on).
      const bool one = bytes <= one_shot_max_bytes;
      if (log_enabled(log_level::debug)) {
        log(log_level::debug, t.rank(), "auto_select: %zu bytes, %zu ranks -> %s", bytes, n,
            one ? "direct_one_shot" : "direct_two_shot");
      }
      if (one) return direct_one_shot::run_bytes(t, base, count, op, ctx);
      return direct_two_shot::run_bytes(t, base, count, op, ctx);
    } else {
      const bool network = tuning::crosses_network(t);
      const auto_choice c = auto_choose(bytes, n, network);
      if (log_enabled(log_level::debug)) {
        log(log_level::debug, t.rank(), "auto_select: %zu bytes, %zu ranks%s -> %s", bytes, n,
            network ? " across hosts" : "", auto_choice_name(c).data());
      }
      switch (c) {
        case auto_choice::tree:
          tree::run_bytes(t, base, count, op, ctx);
          return;
        case auto_choice::halving_doubling:
          halving_doubling::run_bytes(t, base, count, op, ctx);
          return;
        case auto_choice::ring:
          break;
      }
      ring::run_bytes(t, base, count, op, ctx);
    }
  }
};

}  // namespace gradsync::algo
