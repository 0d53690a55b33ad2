// SPDX-License-Identifier: Apache-2.0
// The functions consistency.hpp declares: inline in a header-only build, compiled once by
// <gradsync/src.hpp> under GRADSYNC_SEPARATE_COMPILATION (config.hpp).
#pragma once

#include "gradsync/check/consistency.hpp"

namespace gradsync::detail {

GRADSYNC_DECL std::string describe(const call_header& h) {
  if (h.flags & call_header::step_of_plan) {
    return "seq=" + std::to_string(h.seq) + " step " + std::to_string(h.count) + " of " +
           h.algo_name() + " op=" + std::string(op_name(static_cast<reduce_op>(h.op))) +
           (h.flags & call_header::finite_checked ? " check_finite" : "");
  }
  return "seq=" + std::to_string(h.seq) + " count=" + std::to_string(h.count) +
         " type=" + std::string(dtype_name(static_cast<dtype>(h.type))) +
         " op=" + std::string(op_name(static_cast<reduce_op>(h.op))) + " algo=" + h.algo_name() +
         (h.root ? " root=" + std::to_string(h.root) : std::string()) +
         (h.flags & call_header::finite_checked ? " check_finite" : "");
}

GRADSYNC_DECL std::string first_difference(const call_header& a, const call_header& b) {
  if (a.magic != b.magic) return "header magic (a rank is running a different protocol)";
  if (a.seq != b.seq)
    return "sequence number " + std::to_string(a.seq) + " vs " + std::to_string(b.seq) +
           " (ranks have made a different number of calls)";
  if ((a.flags ^ b.flags) & call_header::step_of_plan) {
    auto kind = [](const call_header& h) {
      return h.flags & call_header::step_of_plan ? "the start of an allreducer step"
                                                 : "a collective call";
    };
    return std::string("the kind of call: ") + kind(a) + " vs " + kind(b) +
           " (allreducer steps, grouped calls and free collectives must come in the same order "
           "on every rank)";
  }
  if (a.flags & call_header::step_of_plan) {
    if (a.algo != b.algo)
      return "the allreducer (" + a.algo_name() + " vs " + b.algo_name() +
             "): the ranks run steps of different plans";
    if (a.count != b.count)
      return "step number " + std::to_string(a.count) + " vs " + std::to_string(b.count);
  }
  if (a.count != b.count)
    return "count " + std::to_string(a.count) + " vs " + std::to_string(b.count);
  if (a.type != b.type)
    return std::string("element type ") + std::string(dtype_name(static_cast<dtype>(a.type))) +
           " vs " + std::string(dtype_name(static_cast<dtype>(b.type)));
  if (a.op != b.op)
    return std::string("op ") + std::string(op_name(static_cast<reduce_op>(a.op))) + " vs " +
           std::string(op_name(static_cast<reduce_op>(b.op)));
  if (a.algo != b.algo) return "algorithm " + a.algo_name() + " vs " + b.algo_name();
  if (a.root != b.root) return "root " + std::to_string(a.root) + " vs " + std::to_string(b.root);
  if (a.flags != b.flags) {
    auto on = [](const call_header& h) {
      return h.flags & call_header::finite_checked ? "on" : "off";
    };
    return std::string("check_finite ") + on(a) + " vs " + on(b) +
           " (set call_options::check_finite, or GRADSYNC_CHECK_FINITE, alike on every rank)";
  }
  return {};
}

GRADSYNC_DECL void check_agreement(const std::vector<call_header>& table, std::size_t r,
                                   const call_header& mine,
                                   function_ref<std::size_t(std::size_t)> rank_of,
                                   std::string_view collective) {
  const std::size_t n = table.size();
  // Compare everyone against rank 0 (at table index (n - r) % n).
  const call_header& ref = table[(n - r) % n];
  std::string diffs;
  std::size_t ndiff = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t rank_i = (r + i) % n;
    const std::string what = first_difference(ref, table[i]);
    if (!what.empty()) {
      if (ndiff++ < 8) {
        const std::string who = "rank " + std::to_string(rank_of(rank_i));
        const std::string first = "rank " + std::to_string(rank_of(0));
        diffs += "\n  " + who + " differs from " + first + " in " + what + " [" + first + ": " +
                 describe(ref) + "; " + who + ": " + describe(table[i]) + "]";
      }
    }
  }
  if (ndiff) {
    throw error(errc::mismatch, {rank_of(r), error_site::npos, mine.seq},
                "ranks called " + std::string(collective) + " with different arguments (" +
                    std::to_string(ndiff) + " rank(s) differ from rank " +
                    std::to_string(rank_of(0)) + "):" + diffs);
  }
}

}  // namespace gradsync::detail
