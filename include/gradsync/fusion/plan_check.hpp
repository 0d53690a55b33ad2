// SPDX-License-Identifier: Apache-2.0
// Cross-rank agreement on the bucket plan, done once at registration: every rank learns
// every other rank's (tensor count, plan digest); if any differs, rank 0's tensor list
// is sent to every rank, each finds its first differing tensor, and the findings are
// shared so that every rank throws the same errc::mismatch naming that tensor — never
// a hang on a bucket whose size differs between ranks. Over a transport::two_level the
// check runs inside each node, then across nodes (one verdict for every rank).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include "gradsync/check/consistency.hpp"
#include "gradsync/check/two_levels.hpp"
#include "gradsync/core/deadline.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/fusion/plan.hpp"
#include "gradsync/fusion/tensor.hpp"
#include "gradsync/transport/concept.hpp"
#include "gradsync/transport/two_level.hpp"

namespace gradsync::fusion {

namespace detail {

using gradsync::detail::allgather_pod;

struct plan_summary {
  std::uint64_t magic = 0x67734650;  // "gsFP"
  std::uint64_t tensors = 0;
  std::uint64_t digest = 0;
};

struct wire_desc {
  std::uint64_t count = 0;
  std::uint64_t type = 0;
};

struct diff_report {
  std::uint64_t index = ~std::uint64_t{0};  // first differing tensor; ~0: lists equal
  wire_desc mine{}, ref{};                  // this rank's and rank 0's tensor there
  std::uint64_t has_mine = 0, has_ref = 0;  // 0 when the list is too short
};

inline std::string describe_desc(const wire_desc& w) {
  return "count " + std::to_string(w.count) + " " +
         std::string(dtype_name(static_cast<dtype>(w.type)));
}

inline constexpr std::uint64_t poisoned_magic = 0x67734658;  // "gsFX": my node disagrees

/// check_plan over one transport. `poisoned`: this rank's own node already disagrees
/// (two levels, below); then it only tells its peers so, and returns. `rank_of` maps a
/// rank of `t` to the rank named in messages.
template <transport_policy Tr, class RankOf>
void check_plan_on(Tr& t, std::span<const tensor_desc> tensors, const plan& p, deadline d,
                   bool poisoned, RankOf rank_of) {
  const std::size_t n = t.size(), r = t.rank();
  if (n == 1) return;
  const std::uint64_t seq = t.next_seq();
  std::vector<detail::plan_summary> table;
  detail::allgather_pod(
      t, detail::plan_summary{poisoned ? poisoned_magic : 0x67734650, tensors.size(), p.digest},
      table, consistency_tag(seq), d);
  // A summary that is neither kind comes from a corrupt peer or another program: named
  // (every rank checks the same table, so every rank throws).
  for (std::size_t q = 0; q < n; ++q) {
    if (table[q].magic == 0x67734650 || table[q].magic == poisoned_magic) continue;
    throw error(errc::mismatch, {rank_of(r), rank_of(q), seq},
                "rank " + std::to_string(rank_of(q)) +
                    " sent a bucket-plan summary with an unknown magic number " +
                    std::to_string(table[q].magic) + " (a corrupt peer, or not gradsync)");
  }
  for (const auto& s : table) {
    if (s.magic != poisoned_magic) continue;
    if (poisoned) return;  // the caller rethrows its node's own finding
    throw error(errc::mismatch, {rank_of(r), error_site::npos, seq},
                "ranks registered different tensor lists for the bucket plan: the ranks of "
                "another node differ among themselves (their errors name the first differing "
                "tensor); this node's ranks agree");
  }
  bool same = true;
  for (const auto& s : table) {
    same = same && s.magic == table[0].magic && s.tensors == table[0].tensors &&
           s.digest == table[0].digest;
  }
  if (same) return;

  // Rank 0's list goes to everyone (the slow path: only taken on a mismatch), each rank
  // getting it as far as one past its own list: what it receives is sized by its own
  // count, never by the count rank 0 claims.
  const auto wanted = [&](std::uint64_t own) -> std::size_t {
    return static_cast<std::size_t>(own < table[0].tensors ? own + 1 : table[0].tensors);
  };
  std::vector<detail::wire_desc> ref(r == 0 ? tensors.size() : wanted(tensors.size()));
  if (r == 0) {
    for (std::size_t i = 0; i < ref.size(); ++i) {
      ref[i] = {tensors[i].count, static_cast<std::uint64_t>(tensors[i].type)};
    }
    std::vector<typename Tr::request> sends;
    for (std::size_t q = 1; q < n; ++q) {
      sends.push_back(t.isend(q, ref.data(), wanted(table[q].tensors) * sizeof(detail::wire_desc),
                              data_tag(seq)));
    }
    for (auto& s : sends) t.wait(s, d);
  } else {
    auto rq = t.irecv(0, ref.data(), ref.size() * sizeof(detail::wire_desc), data_tag(seq));
    t.wait(rq, d);
  }
  detail::diff_report mine;
  const std::size_t common = std::min(ref.size(), tensors.size());
  for (std::size_t i = 0; i <= common; ++i) {
    const bool have_m = i < tensors.size(), have_r = i < ref.size();
    if (!have_m && !have_r) break;
    const detail::wire_desc m{have_m ? tensors[i].count : 0,
                              have_m ? static_cast<std::uint64_t>(tensors[i].type) : 0};
    if (have_m && have_r && m.count == ref[i].count && m.type == ref[i].type) continue;
    mine = {i, m, have_r ? ref[i] : detail::wire_desc{}, have_m, have_r};
    break;
  }
  std::vector<detail::diff_report> diffs;
  const std::uint64_t seq2 = t.next_seq();
  detail::allgather_pod(t, mine, diffs, consistency_tag(seq2), d);

  std::string msg = "ranks registered different tensor lists for the bucket plan:";
  std::size_t shown = 0;
  for (std::size_t q = 1; q < n && shown < 4; ++q) {
    const auto& f = diffs[q];
    const std::string who = "rank " + std::to_string(rank_of(q));
    if (f.index == ~std::uint64_t{0}) {
      if (table[q].digest != table[0].digest) {
        msg += "\n  " + who + " has the same tensors as rank " + std::to_string(rank_of(0)) +
               " but different plan parameters "
               "(bucket size, order, storage or compression policy)";
        ++shown;
      }
      continue;
    }
    ++shown;
    std::string here;
    // Every rank that has tensor #index names it: the ranks differ in its shape, not
    // its role, so each one's own name points at the layer (a rank without it says so).
    if (f.index < tensors.size() && !tensors[f.index].name.empty()) {
      here = " '" + tensors[f.index].name + "'";
    }
    msg += "\n  first differing tensor is #" + std::to_string(f.index) + here + ": " + who +
           " has " +
           (f.has_mine ? detail::describe_desc(f.mine)
                       : "no such tensor (" + std::to_string(table[q].tensors) + " registered)") +
           ", rank " + std::to_string(rank_of(0)) + " has " +
           (f.has_ref ? detail::describe_desc(f.ref)
                      : "no such tensor (" + std::to_string(table[0].tensors) + " registered)");
  }
  throw error(errc::mismatch, {rank_of(r), error_site::npos, seq}, msg);
}

}  // namespace detail

/// Throws errc::mismatch on every rank unless all ranks registered the same tensor list
/// with the same plan parameters (`p.digest`). Uses two sequence numbers of `t` when
/// the lists differ and one when they agree (the same on every rank either way).
template <transport_policy Tr>
void check_plan(Tr& t, std::span<const tensor_desc> tensors, const plan& p, deadline d) {
  detail::check_plan_on(t, tensors, p, d, false, same_rank{});
}

namespace detail {
/// check_plan over every level of t: inside the node, then across nodes (a nested Inter
/// in turn over its own levels). `poisoned`: an enclosing level's node already disagrees;
/// `outer` maps t's global ranks to the ranks messages name.
template <class Intra, class Inter, class RankOf>
void check_plan_levels(transport::two_level<Intra, Inter>& t, std::span<const tensor_desc> tensors,
                       const plan& p, deadline d, bool poisoned, RankOf outer) {
  gradsync::detail::check_two_levels(
      t, errc::mismatch,
      [&](auto rank_of) {
        check_plan_on(t.intra(), tensors, p, d, poisoned,
                      [&](std::size_t q) { return outer(rank_of(q)); });
      },
      [&](bool node_poisoned, auto rank_of) {
        const auto named = [&](std::size_t q) { return outer(rank_of(q)); };
        if constexpr (transport::is_two_level_v<Inter>) {
          check_plan_levels(t.inter(), tensors, p, d, poisoned || node_poisoned, named);
        } else {
          check_plan_on(t.inter(), tensors, p, d, poisoned || node_poisoned, named);
        }
      });
}
}  // namespace detail

/// The same over a transport::two_level: inside the node, then across nodes. A node whose
/// ranks disagree joins the cross-node round poisoned, so the other nodes fail at once
/// too (not at their deadline); messages name global ranks.
template <class Intra, class Inter>
void check_plan(transport::two_level<Intra, Inter>& t, std::span<const tensor_desc> tensors,
                const plan& p, deadline d) {
  detail::check_plan_levels(t, tensors, p, d, false, same_rank{});
}

}  // namespace gradsync::fusion
