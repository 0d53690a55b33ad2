// SPDX-License-Identifier: Apache-2.0
// The non-finite check (call_options::check_finite, GRADSYNC_CHECK_FINITE=1): before data
// moves, each rank states where its first NaN or Inf is (kernels/finite.hpp finds it),
// the ranks share those findings in one small allgather, and if any rank found one every
// rank throws the same errc::non_finite naming the first such rank (global rank and host),
// the tensor and the index — before the value is summed into every replica's gradient.
// Over a transport::two_level: inside the node, then across the nodes (two exchanges).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "gradsync/core/call.hpp"
#include "gradsync/core/deadline.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/core/function_ref.hpp"
#include "gradsync/kernels/finite.hpp"
#include "gradsync/transport/bruck_exchange.hpp"
#include "gradsync/transport/concept.hpp"
#include "gradsync/transport/two_level.hpp"

namespace gradsync {

/// What one rank found (or, after an exchange, the first rank that found something).
struct finite_finding {
  static constexpr std::uint64_t none = ~std::uint64_t{0};
  std::uint64_t tensor = none;  ///< tensor index within the call; none: every input finite
  std::uint64_t index = 0;      ///< element index within that tensor
  std::uint64_t rank = 0;       ///< the finder's rank (global over a two_level)
  std::uint64_t ranks_bad = 0;  ///< how many ranks found one (after an exchange)
  char value[8] = {};           ///< "NaN", "+Inf" or "-Inf"
  char who[64] = {};            ///< the finder, as messages name it ("rank 5 on node-b")

  bool found() const { return tensor != none; }
};

namespace detail {

/// This rank's finding for element `index` of tensor `tensor`, whose value `value` names
/// ("NaN", "+Inf", "-Inf"), or for none (`value` null).
inline finite_finding make_finding_named(std::size_t tensor, std::size_t index, const char* value,
                                         std::uint64_t rank, const std::string& who) {
  finite_finding f;
  f.rank = rank;
  std::memcpy(f.who, who.data(), std::min(who.size(), sizeof f.who - 1));
  if (value) {
    f.tensor = tensor;
    f.index = index;
    f.ranks_bad = 1;
    std::memcpy(f.value, value, std::min(std::strlen(value), sizeof f.value - 1));
  }
  return f;
}

/// This rank's finding for element `index` of tensor `tensor` (value `v`), or for none.
template <class T>
finite_finding make_finding(std::size_t tensor, std::size_t index, const T* v, std::uint64_t rank,
                            const std::string& who) {
  return make_finding_named(tensor, index, v ? kernels::non_finite_name(*v) : nullptr, rank, who);
}

/// The first finding of `all` by rank, with ranks_bad summed.
inline finite_finding first_finding(const std::vector<finite_finding>& all) {
  finite_finding first;
  std::uint64_t bad = 0;
  for (const finite_finding& f : all) {
    bad += f.ranks_bad;
    if (f.found() && (!first.found() || f.rank < first.rank)) first = f;
  }
  first.ranks_bad = bad;
  return first;
}

/// Checks the finding rank `peer` of t sent before any of it is read: its two strings
/// must end inside their fields, and a tensor it names must be one of the call's
/// `tensors`. errc::mismatch on this rank naming the peer otherwise; every rank checks
/// the same gathered table in the same order, so every rank throws it.
template <class Tr>
void check_peer_finding(const Tr& t, std::size_t peer, const finite_finding& f, std::size_t tensors,
                        std::uint64_t my_rank) {
  std::string what;
  if (!std::memchr(f.who, 0, sizeof f.who) || !std::memchr(f.value, 0, sizeof f.value)) {
    what = "a name or value field without its terminating NUL";
  } else if (f.found() && f.tensor >= tensors) {
    what = "tensor #" + std::to_string(f.tensor) + " of a call with " + std::to_string(tensors) +
           " tensor(s)";
  }
  if (what.empty()) return;
  throw error(errc::mismatch, {static_cast<std::size_t>(my_rank), peer},
              describe_rank(t, peer) + " sent a non-finite finding naming " + what +
                  " (a corrupt or mismatched peer; call_options::check_finite)");
}

/// Every rank's finding over t (one Bruck allgather on a sequence number of its own),
/// each checked before use (`tensors`: how many tensors the call has).
template <class Tr>
finite_finding gather_first(Tr& t, const finite_finding& mine, deadline d, std::size_t tensors) {
  if (t.size() == 1) return mine;
  std::vector<finite_finding> all;
  allgather_pod(t, mine, all, consistency_tag(t.next_seq()), d);
  for (std::size_t q = 0; q < all.size(); ++q) check_peer_finding(t, q, all[q], tensors, mine.rank);
  return first_finding(all);
}

/// What a failed check left behind, as its message says (the default: nothing moved).
inline constexpr std::string_view nothing_reduced = "nothing was reduced";

/// Throws the finding as errc::non_finite on this rank. `tensor_name(i)`: how the
/// call names tensor i ("tensor #3 ('fc1.weight')"; a one-buffer call: "its input").
[[noreturn]] inline void throw_finding(const finite_finding& f, const error_site& site,
                                       detail::function_ref<std::string(std::size_t)> tensor_name,
                                       std::string_view left = nothing_reduced) {
  // Bounded reads: gather_first checked the NULs, but a finding is a peer's bytes.
  std::string m = "non-finite input: " + std::string(f.who, ::strnlen(f.who, sizeof f.who)) +
                  " has " + std::string(f.value, ::strnlen(f.value, sizeof f.value)) + " in " +
                  tensor_name(static_cast<std::size_t>(f.tensor)) + " at element " +
                  std::to_string(f.index);
  if (f.ranks_bad > 1) m += " (" + std::to_string(f.ranks_bad - 1) + " more rank(s) have one too)";
  m += "; " + std::string(left) + " (call_options::check_finite)";
  throw error(errc::non_finite, site, m);
}

}  // namespace detail

/// Shares this rank's finding `mine` over t and throws errc::non_finite on every rank
/// when any rank found a NaN or Inf (the first rank's is named). Collective. `left`: what
/// the message says the call left behind; `tensors`: how many tensors the call has (a
/// peer's finding naming another is errc::mismatch on every rank).
template <transport_policy Tr>
void agree_finite(Tr& t, const finite_finding& mine, deadline d,
                  detail::function_ref<std::string(std::size_t)> tensor_name,
                  std::string_view left = detail::nothing_reduced, std::size_t tensors = 1) {
  const finite_finding first = detail::gather_first(t, mine, d, tensors);
  if (first.found()) {
    detail::throw_finding(first, {static_cast<std::size_t>(mine.rank), error_site::npos},
                          tensor_name, left);
  }
}

/// The same over two levels, its messages moved by `in` and `out` (t.intra() and
/// t.inter(), or wrappers around them): the node's first finding, then the job's.
template <class Intra, class Inter, class In, class Out>
void agree_finite(transport::two_level<Intra, Inter>& t, In& in, Out& out,
                  const finite_finding& mine, deadline d,
                  detail::function_ref<std::string(std::size_t)> tensor_name,
                  std::size_t tensors = 1, std::string_view left = detail::nothing_reduced) {
  const finite_finding node = detail::gather_first(in, mine, d, tensors);
  const finite_finding first = detail::gather_first(out, node, d, tensors);
  if (first.found()) {
    detail::throw_finding(first, {t.rank(), error_site::npos}, tensor_name, left);
  }
}

/// This rank's finding over one buffer of a call (tensor 0), named by `t`.
template <class Tr, class T>
finite_finding find_non_finite(const Tr& t, std::size_t rank, const T* x, std::size_t count) {
  const std::size_t i = kernels::first_non_finite(x, count);
  return detail::make_finding(0, i, i < count ? x + i : static_cast<const T*>(nullptr), rank,
                              describe_rank(t, t.rank()));
}

}  // namespace gradsync
