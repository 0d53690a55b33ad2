// SPDX-License-Identifier: Apache-2.0
// gradsync::process_set — a subset of a transport's ranks with a transport of its own
// (Horovod's process sets, PyTorch's new_group), built on the transport's split(). Every
// rank of the parent constructs it with the same list of parent ranks (collective; a rank
// that passes another list fails every rank with errc::mismatch naming it). The listed
// ranks get a transport over themselves, ranked in list order; the others get none.
// Several sets can exist, overlap and progress at once (from different threads):
//
//   gs::process_set evens(t, {0, 2, 4});
//   if (evens.contains()) gs::allreduce<gs::algo::ring>(evens.transport(), grads, gs::op::avg);
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gradsync/core/call.hpp"
#include "gradsync/core/deadline.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/kernels/hash.hpp"
#include "gradsync/transport/allgather.hpp"
#include "gradsync/transport/concept.hpp"

namespace gradsync {

/// A transport that forms sub-groups: t.split(color, key) returns a transport of its own
/// kind over the ranks that pass `color` (transport::local, shm and mpi).
template <class Tr>
concept splittable_transport = transport_policy<Tr> && requires(Tr& t) {
  { t.split(0, 0) } -> std::same_as<Tr>;
};

/// The ranks `ranks` of `parent` (Tr: a splittable_transport; two_level and the device
/// transports have no split yet) as a group with its own transport.
template <class Tr>
class process_set {
  static_assert(splittable_transport<Tr>,
                "gradsync::process_set: this transport has no split(color, key); use "
                "transport::local, shm or mpi (two_level and the device transports cannot "
                "form sub-groups yet)");

 public:
  /// Collective over every rank of `parent`, within `d`: each passes the same list of
  /// distinct parent ranks (non-empty, each < parent.size()).
  process_set(Tr& parent, std::vector<std::size_t> ranks,
              deadline d = deadline::after(default_timeout()))
      : ranks_(std::move(ranks)) {
    const std::size_t n = parent.size(), r = parent.rank();
    const std::uint64_t seq = parent.next_seq();
    agree(parent, seq, d);
    // Every rank has the same list now, so every rank throws alike.
    std::vector<bool> seen(n);
    for (std::size_t q : ranks_) {
      if (q >= n || seen[q]) {
        throw error(errc::invalid_argument, {r, error_site::npos, seq},
                    "process_set: rank " + std::to_string(q) +
                        (q >= n ? " is out of range for " + std::to_string(n) + " ranks"
                                : " is listed twice") +
                        " (list each rank of the set once)");
      }
      seen[q] = true;
    }
    if (ranks_.empty()) {
      throw error(errc::invalid_argument, {r, error_site::npos, seq},
                  "process_set: the list of ranks is empty");
    }
    std::size_t pos = n;
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      if (ranks_[i] == r) pos = i;
    }
    // Members: colour 0, ranked by their place in the list. The others form a group of
    // their own (colour 1) that is dropped at once.
    const int color = pos < n ? 0 : 1, key = static_cast<int>(pos < n ? pos : r);
    Tr sub = [&] {
      if constexpr (requires { parent.split(color, key, d); }) {  // local, shm: within d
        return parent.split(color, key, d);
      } else {
        return parent.split(color, key);
      }
    }();
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
  // Every rank compares the lists (their length and hash) with every other's.
  void agree(Tr& parent, std::uint64_t seq, deadline d) {
    struct stated {
      std::uint64_t count, hash;
    };
    const std::uint64_t mine_hash =
        kernels::buffer_hash(ranks_.data(), ranks_.size() * sizeof(std::size_t), /*portable=*/true);
    std::vector<stated> all;  // all[q]: rank q's
    gradsync::detail::allgather_pod(parent, stated{ranks_.size(), mine_hash}, all, data_tag(seq),
                                    d);
    std::string differ;
    for (std::size_t q = 1; q < all.size(); ++q) {
      if (all[q].count != all[0].count || all[q].hash != all[0].hash) {
        differ += (differ.empty() ? "" : ", ") + std::to_string(q);
      }
    }
    if (!differ.empty()) {
      throw error(errc::mismatch, {parent.rank(), error_site::npos, seq},
                  "process_set: rank(s) " + differ +
                      " passed another list of ranks than rank 0 (every rank must pass the "
                      "same list, in the same order)");
    }
  }

  std::vector<std::size_t> ranks_;
  std::optional<Tr> sub_;
};

}  // namespace gradsync
