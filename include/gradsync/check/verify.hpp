// SPDX-License-Identifier: Apache-2.0
// Result verification (call_options::verify, GRADSYNC_VERIFY=1): after an allreduce every
// rank hashes the bytes of its result and the ranks exchange the hashes (a Bruck
// allgather of 32-byte records, as the argument check). Every rank is meant to hold the
// same bits; if any rank's hash differs from rank 0's, every rank throws errc::diverged
// naming the ranks and hashes, so a transport, algorithm or memory fault that corrupted
// a result (or a buffer written during the call) is reported instead of training on.
// Cost: one read of the result (kernels/hash.hpp, at memory speed with AVX2) and one small
// exchange per call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "gradsync/check/consistency.hpp"
#include "gradsync/core/deadline.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/kernels/hash.hpp"
#include "gradsync/transport/concept.hpp"
#include "gradsync/transport/two_level.hpp"

namespace gradsync {

/// What each rank states about its result after a verified call.
struct result_record {
  static constexpr std::uint32_t magic_value = 0x67735652;  // "gsVR"
  static constexpr std::uint32_t poisoned = 1;  // flag: this rank's node already diverged
  std::uint32_t magic = magic_value;
  std::uint32_t flags = 0;
  std::uint64_t seq = 0;
  std::uint64_t bytes = 0;
  std::uint64_t hash = 0;
};
static_assert(sizeof(result_record) == 32);

namespace detail {

inline std::string hex64(std::uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

/// Exchanges `mine` with every rank of t; returns the records indexed by rank. Uses the
/// consistency tag of the same call: its header exchange (if any) is complete on this
/// rank, and messages between two ranks with one tag match in order.
template <transport::level_group T>
std::vector<result_record> exchange_results(T& t, const result_record& mine, deadline d) {
  std::vector<result_record> by_rank;
  allgather_pod(t, mine, by_rank, consistency_tag(mine.seq), d);
  return by_rank;
}

/// The ranks whose record differs from rank 0's ("" when none); up to 8 named.
template <class RankOf>
std::string describe_divergence(const std::vector<result_record>& by_rank, RankOf rank_of) {
  const result_record& ref = by_rank[0];
  std::string diffs;
  std::size_t ndiff = 0;
  for (std::size_t q = 1; q < by_rank.size(); ++q) {
    const result_record& x = by_rank[q];
    if (x.magic == ref.magic && x.seq == ref.seq && x.bytes == ref.bytes && x.hash == ref.hash)
      continue;
    if (ndiff++ < 8) {
      diffs += "\n  rank " + std::to_string(rank_of(q)) + ": hash " + hex64(x.hash) + " of " +
               std::to_string(x.bytes) + " bytes (call " + std::to_string(x.seq) + ")";
    }
  }
  if (!ndiff) return {};
  return std::to_string(ndiff) + " rank(s) hold a different result than rank " +
         std::to_string(rank_of(0)) + " (hash " + hex64(ref.hash) + " of " +
         std::to_string(ref.bytes) + " bytes, call " + std::to_string(ref.seq) + "):" + diffs;
}

inline const char* divergence_hint() {
  return "\n  the reduced bits must be identical on every rank: a transport or algorithm "
         "corrupted data, memory failed, or a buffer was written while the call ran";
}

}  // namespace detail

/// Compares a hash of this rank's `bytes` result bytes with every rank's; throws
/// errc::diverged on every rank if any differs. `seq` is the call's sequence number on
/// t; `rank_of` maps a rank of t to the rank messages name (a two_level's global rank).
template <transport_policy T, class RankOf = same_rank>
void verify_result(T& t, std::uint64_t seq, const void* data, std::size_t bytes, deadline d,
                   RankOf rank_of = {}, std::string_view collective = "allreduce") {
  if (t.size() < 2) return;
  result_record mine;
  mine.seq = seq;
  mine.bytes = bytes;
  mine.hash = kernels::buffer_hash(data, bytes);
  const std::vector<result_record> by_rank = detail::exchange_results(t, mine, d);
  const std::string what = detail::describe_divergence(by_rank, rank_of);
  if (!what.empty()) {
    throw error(errc::diverged, {rank_of(t.rank()), error_site::npos, seq},
                std::string(collective) + " results differ across ranks: " + what +
                    detail::divergence_hint());
  }
}

}  // namespace gradsync
