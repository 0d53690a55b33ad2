// SPDX-License-Identifier: Apache-2.0
// gradsync::process_set — a subset of a transport's ranks with a transport of its own
// (Horovod's process sets, PyTorch's new_group), built on the transport's split(). Every
// rank of the parent constructs it with the same list of parent ranks (collective; a rank
// that passes another list fails every rank with errc::mismatch naming it). The listed
// ranks get a transport over themselves, ranked in list order (where the transport cannot
// number them so, every rank gets errc::invalid_argument: a two_level numbers a set node by
// node); the others get none.
// Several sets can exist, overlap and progress at once (from different threads):
//
//   gs::process_set evens(t, {0, 2, 4});
//   if (evens.contains()) gs::allreduce<gs::algo::ring>(evens.transport(), grads, gs::op::avg);
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "gradsync/allgather.hpp"
#include "gradsync/core/call.hpp"
#include "gradsync/core/deadline.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/kernels/hash.hpp"
#include "gradsync/transport/concept.hpp"

namespace gradsync {

/// True when Tr's traits declare split(color, key, d) (checked against its members).
template <class Tr>
constexpr bool declares_split() {
  if constexpr (requires { Tr::traits; }) {
    return transport_traits_of<Tr>().splits;
  } else {
    return false;
  }
}

/// A transport that forms sub-groups: its traits say .splits, so t.split(color, key, d)
/// returns a transport of its own kind over the ranks that pass `color`
/// (transport::local, shm, mpi, nccl and two_level of those).
template <class Tr>
concept splittable_transport = declares_split<Tr>() && requires(Tr& t, const Tr& ct, deadline d) {
  { ct.rank() } -> std::same_as<std::size_t>;  // this rank, 0 .. size()-1
  { ct.size() } -> std::same_as<std::size_t>;  // ranks in the group
  { t.split(0, 0, d) } -> std::same_as<Tr>;    // a sub-group of its own kind
};

/// The ranks `ranks` of `parent` (Tr: a host-memory splittable_transport) as a group with
/// its own transport.
template <class Tr>
class process_set {
  static_assert(splittable_transport<Tr>,
                "gradsync::process_set: this transport does not declare split(color, key, d) "
                "(transport_traits::splits); use transport::local, shm, mpi or two_level of those");
  static_assert(
      !requires { Tr::memory; } || Tr::memory == memory_space::host,
      "gradsync::process_set compares the lists through a host-memory allgather; "
      "on a device transport (transport::nccl) call t.split(color, key) directly");

 public:
  /// Collective over every rank of `parent`, within `d`: each passes the same list of
  /// distinct parent ranks (non-empty, each < parent.size()).
  process_set(Tr& parent, std::vector<std::size_t> ranks,
              deadline d = deadline::after(default_timeout()))
      : ranks_(std::move(ranks)) {
    const std::size_t n = parent.size(), r = parent.rank();
    agree(parent, d);
    // Every rank has the same list now, so every rank throws alike.
    std::vector<bool> seen(n);
    for (std::size_t q : ranks_) {
      if (q >= n || seen[q]) {
        throw error(errc::invalid_argument, site(r),
                    "process_set: rank " + std::to_string(q) +
                        (q >= n ? " is out of range for " + std::to_string(n) + " ranks"
                                : " is listed twice") +
                        " (list each rank of the set once)");
      }
      seen[q] = true;
    }
    if (ranks_.empty()) {
      throw error(errc::invalid_argument, site(r), "process_set: the list of ranks is empty");
    }
    std::size_t pos = n;
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      if (ranks_[i] == r) pos = i;
    }
    // Members: colour 0, keyed by their place in the list. Each other rank forms a group
    // of its own, dropped at once (alone, it fits any transport's layout rules).
    const int color = pos < n ? 0 : static_cast<int>(1 + r),
              key = static_cast<int>(pos < n ? pos : 0);
    Tr sub = parent.split(color, key, d);
    // A transport may number a sub-group otherwise than by key (two_level: node by node);
    // every rank learns whether some member is out of list order, so all fail alike.
    const std::int64_t mine = pos < n && sub.rank() != pos;
    std::vector<std::int64_t> out_of_order(n);
    gradsync::allgather(parent, std::span<const std::int64_t>(&mine, 1),
                        std::span<std::int64_t>(out_of_order), within(d));
    for (std::size_t q = 0; q < n; ++q) {
      if (out_of_order[q]) {
        throw error(errc::invalid_argument, site(r),
                    "process_set: this transport numbers the set otherwise than the list (rank " +
                        std::to_string(q) + " would not be rank " + std::to_string(pos_of(q)) +
                        " of the set); a two_level numbers a set node by node, so list the "
                        "ranks of each node together, node after node");
      }
    }
    if (pos < n) sub_.emplace(std::move(sub));
  }

  /// Whether this rank is in the set.
  bool contains() const { return sub_.has_value(); }
  /// The set's transport (rank i: ranks()[i] of the parent); invalid_argument on a rank
  /// outside the set.
  Tr& transport() {
    if (!sub_) {
      throw error(errc::invalid_argument, {},
                  "process_set: this rank is not in the set (check contains() first)");
    }
    return *sub_;
  }
  /// The parent's ranks in the set, in set order.
  const std::vector<std::size_t>& ranks() const { return ranks_; }
  std::size_t size() const { return ranks_.size(); }

 private:
  // Its own steps are the numbered calls (its allgathers, the split), not the set.
  static error_site site(std::size_t r) { return {r, error_site::npos, ~std::uint64_t{0}}; }
  static call_options within(deadline d) {
    return {.timeout = seconds_d(std::max(1e-3, d.seconds_left()))};
  }

  // Every rank compares the lists (their length and hash) with every other's, over the
  // parent's own allgather (a flat transport's or a two_level's).
  void agree(Tr& parent, deadline d) {
    const std::int64_t mine[2] = {
        static_cast<std::int64_t>(ranks_.size()),
        static_cast<std::int64_t>(kernels::buffer_hash(
            ranks_.data(), ranks_.size() * sizeof(std::size_t), /*portable=*/true))};
    std::vector<std::int64_t> all(2 * parent.size());  // rank q's at 2q
    gradsync::allgather(parent, std::span<const std::int64_t>(mine), std::span<std::int64_t>(all),
                        within(d));
    std::string differ;
    for (std::size_t q = 1; q < parent.size(); ++q) {
      if (all[2 * q] != all[0] || all[2 * q + 1] != all[1]) {
        differ += (differ.empty() ? "" : ", ") + std::to_string(q);
      }
    }
    if (!differ.empty()) {
      throw error(errc::mismatch, site(parent.rank()),
                  "process_set: rank(s) " + differ +
                      " passed another list of ranks than rank 0 (every rank must pass the "
                      "same list, in the same order)");
    }
  }

  std::size_t pos_of(std::size_t q) const {
    return static_cast<std::size_t>(std::find(ranks_.begin(), ranks_.end(), q) - ranks_.begin());
  }

  std::vector<std::size_t> ranks_;
  std::optional<Tr> sub_;
};

}  // namespace gradsync
