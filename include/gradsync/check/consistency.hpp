// SPDX-License-Identifier: Apache-2.0
// Cross-rank consistency: before data moves, every rank learns every other rank's
// (sequence number, count, element type, op, algorithm, root) through a Bruck allgather of
// 48-byte headers (ceil(log2 n) rounds). Every rank sees the same table, so on a
// mismatch every rank throws the same errc::mismatch naming the ranks and values.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "gradsync/config.hpp"
#include "gradsync/core/call.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/core/function_ref.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/transport/bruck_exchange.hpp"
#include "gradsync/transport/concept.hpp"
#include "gradsync/transport/two_level.hpp"

namespace gradsync {

/// What each rank states about a collective call before it starts.
struct call_header {
  static constexpr std::uint32_t magic_value = 0x67735348;  // "gsSH"
  std::uint32_t magic = magic_value;
  std::uint8_t type = 0;    // dtype
  std::uint8_t op = 0;      // reduce_op
  std::uint16_t flags = 0;  // finite_checked, step_of_plan
  std::uint64_t seq = 0;
  std::uint64_t count = 0;
  std::array<char, 20> algo{};  // algorithm name, NUL-padded (19 characters kept)
  std::uint32_t root = 0;       // broadcast's root (0 for the other collectives)

  static constexpr std::uint16_t finite_checked = 1;  ///< the call checks its inputs (check_finite)
  /// The start of an allreducer's step: count is the step's number, algo "plan " and the
  /// committed plan's digest; the step's buckets state no headers of their own.
  static constexpr std::uint16_t step_of_plan = 2;

  static call_header make(std::uint64_t seq, std::size_t count, dtype t, reduce_op o,
                          std::string_view algo_name, std::uint16_t flags = 0,
                          std::size_t root = 0) {
    call_header h;
    h.flags = flags;
    h.root = static_cast<std::uint32_t>(root);
    h.seq = seq;
    h.count = count;
    h.type = static_cast<std::uint8_t>(t);
    h.op = static_cast<std::uint8_t>(o);
    std::memcpy(h.algo.data(), algo_name.data(), std::min(algo_name.size(), h.algo.size() - 1));
    return h;
  }
  /// The algorithm field up to its NUL, as messages print it: a peer's bytes, so each
  /// byte outside printable ASCII is written as a backslash, 'x' and two hex digits.
  std::string algo_name() const {
    static constexpr char hex[] = "0123456789abcdef";
    std::string s;
    for (std::size_t i = 0; i < algo.size() && algo[i] != '\0'; ++i) {
      const auto c = static_cast<unsigned char>(algo[i]);
      if (c >= 0x20 && c < 0x7f) {
        s += static_cast<char>(c);
      } else {
        s += "\\x";
        s += hex[c >> 4];
        s += hex[c & 0xf];
      }
    }
    return s;
  }
};
static_assert(sizeof(call_header) == 48);

namespace detail {
GRADSYNC_DECL std::string describe(const call_header& h);

// Names the first field that differs between a and b, e.g. "count 1000 vs 999".
GRADSYNC_DECL std::string first_difference(const call_header& a, const call_header& b);

}  // namespace detail

/// Names a rank of the transport in messages as itself.
struct same_rank {
  std::size_t operator()(std::size_t q) const { return q; }
};

namespace detail {
/// Throws errc::mismatch (naming ranks by `rank_of`) if any header of `table` (table[i]:
/// rank (r + i) % n, as bruck_allgather leaves it) differs from rank 0's. Not a template
/// over the transport: the message is built once per program.
GRADSYNC_DECL void check_agreement(const std::vector<call_header>& table, std::size_t r,
                                   const call_header& mine,
                                   function_ref<std::size_t(std::size_t)> rank_of,
                                   std::string_view collective);
}  // namespace detail

/// Exchanges `mine` with every rank and throws errc::mismatch (on every rank) if any
/// rank's header differs from rank 0's. `table` is reused scratch of n headers.
/// `rank_of` maps a rank of `t` to the rank messages name (a two_level's global rank);
/// `collective` names the call in the message. t may be a two_level: the Inter of a
/// deeper one, agreed as one group.
template <transport::level_group T, class RankOf = same_rank>
void agree(T& t, const call_header& mine, deadline d, std::vector<call_header>& table,
           RankOf rank_of = {}, std::string_view collective = "allreduce") {
  const std::size_t n = t.size(), r = t.rank();
  table.resize(n);
  if constexpr (transport_policy<T>) {
    table[0] = mine;  // table[i] holds rank (r + i) % n
    detail::bruck_allgather(t, table, consistency_tag(mine.seq), d);
  } else {
    std::vector<call_header> by_rank;
    detail::allgather_pod(t, mine, by_rank, consistency_tag(mine.seq), d);
    for (std::size_t i = 0; i < n; ++i) table[i] = by_rank[(r + i) % n];
  }
  detail::check_agreement(table, r, mine, rank_of, collective);
}

/// agree() for one call, when opt.check asks for it and there are peers.
template <transport_policy T, class RankOf = same_rank>
void agree_if_checked(T& t, const call_options& opt, const call_header& mine, deadline d,
                      RankOf rank_of = {}, std::string_view collective = "allreduce") {
  if (!opt.check || t.size() < 2) return;
  std::vector<call_header> table;
  agree(t, mine, d, table, rank_of, collective);
}

}  // namespace gradsync

#if GRADSYNC_HEADER_ONLY
#include "gradsync/check/consistency.ipp"
#endif
