// SPDX-License-Identifier: Apache-2.0
// transport::two_level — the ranks of a job seen at two levels: the processes (or
// threads) of one node share a fast point-to-point `Intra` transport (shm, local), and the
// ranks with the same local index on every node share an `Inter` transport (mpi).
// Host memory only (device buffers: transport::nccl, whose own allreduce is hierarchical).
// It carries no messages itself: algo::hierarchical (algo/hierarchical.hpp) runs
// a reduce-scatter inside the node, an allreduce of each rank's shard across the nodes,
// and an allgather inside the node.
//
//   // per process, from MPI (transport/two_level/from_mpi.hpp): shm inside the node,
//   // mpi across nodes
//   auto t = gradsync::transport::two_level_from_mpi(MPI_COMM_WORLD);
//   gs::allreduce<gs::algo::hierarchical<>>(t, std::span<float>(grad), gs::op::avg);
//
// Ranks are numbered node-major: rank = node * local_size + local_rank, where node is
// the rank in the Inter group. Every node must have the same number of ranks and each
// Inter group must join one local index: the constructor checks both, collectively over
// both transports, and every rank throws errc::mismatch (naming the counts) when any
// rank found a fault, so an uneven or misbuilt job fails at start, never with wrong
// sums later.
//
// Inter may itself be a two_level: three levels or more (threads inside a process, the
// processes of a host, the hosts), run by algo::hierarchical<algo::hierarchical<...>>.
// The levels are a recursion, and a two_level is a transport::leveled group
// (transport/levels.hpp): the allreducer, its runner and the entry points ask for that
// concept, so they do not tell two levels from three, nor this class from another group
// with levels. The call checks see a nested Inter as one group through
// detail::allgather_pod / allgather_blocks below. Allreduce only: the other collectives
// and split() take a flat Inter.
#pragma once

#include <algorithm>
#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gradsync/core/call.hpp"
#include "gradsync/core/deadline.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/transport/bruck_exchange.hpp"
#include "gradsync/transport/concept.hpp"
#include "gradsync/transport/levels.hpp"
#include "gradsync/transport/split.hpp"
#include "gradsync/transport/two_level/split.hpp"

namespace gradsync::transport {

template <class Intra, class Inter>
class two_level;

/// True for a transport::two_level (which algo::hierarchical runs on).
template <class T>
inline constexpr bool is_two_level_v = false;
template <class Intra, class Inter>
inline constexpr bool is_two_level_v<two_level<Intra, Inter>> = true;

}  // namespace gradsync::transport

namespace gradsync::detail {

/// allgather_blocks over every level of a two_level: out[i * mine.size() + k] is global
/// rank i's mine[k] (node-major, whatever the depth). Each level's exchange carries a tag
/// of its own sequence, so `tag` is not used; defined below the class.
template <class Intra, class Inter, class Record>
void allgather_blocks(transport::two_level<Intra, Inter>& t, const std::vector<Record>& mine,
                      std::vector<Record>& out, std::uint32_t tag, deadline d);
/// allgather_pod over every level of a two_level: out[i] is global rank i's.
template <class Intra, class Inter, class Record>
void allgather_pod(transport::two_level<Intra, Inter>& t, const Record& mine,
                   std::vector<Record>& out, std::uint32_t tag, deadline d);

}  // namespace gradsync::detail

namespace gradsync::transport {

/// Two transports forming one group: Intra inside a node, Inter across nodes.
template <class Intra,  // ranks of this node, point to point (shm, local)
          class Inter>  // this local index on every node (mpi, or a two_level: more levels)
class two_level {
  static_assert(transport_policy<Intra>,
                "gradsync: two_level's Intra must be a point-to-point transport (shm, local); "
                "cuda_ipc has no point-to-point messages");
  static_assert(level_group<Inter>,
                "gradsync: two_level's Inter must be a transport (mpi; see "
                "transport/concept.hpp) or a two_level (three levels)");
  static_assert(Intra::memory == memory_space::host && Inter::memory == memory_space::host,
                "gradsync: two_level is for host memory (shm or local inside the node, mpi "
                "across nodes); for device buffers use transport::nccl with algo::native, "
                "which already runs NVLink inside the node and the network across nodes");

 public:
  using intra_type = Intra;
  using inter_type = Inter;
  static constexpr std::string_view name = "two_level";
  static constexpr memory_space memory = Intra::memory;
  /// crosses_network() (agreed at construction), both levels' thread levels, and split()
  /// when both levels split (a nested Inter does not).
  static constexpr transport_traits traits{.may_cross_network = true,
                                           .thread_levels = true,
                                           .aborts = true,
                                           .splits = transport_policy<Inter> &&
                                                     transport_traits_of<Intra>().splits &&
                                                     transport_traits_of<Inter>().splits};

  /// Takes both transports; collective over both (checks the layout, see above).
  two_level(Intra intra, Inter inter) : intra_(std::move(intra)), inter_(std::move(inter)) {
    check_shape();
  }

  /// The ranks that pass the same `color` (>= 0) form a two_level of their own (collective
  /// over this one, within `d`; both levels must have split(): local, shm, mpi). Its nodes
  /// are ordered by the smallest key on each, its ranks inside a node by key, then by rank,
  /// so a sub-group is numbered node-major like this one (MPI_Comm_split's order where
  /// that is node-major). A colour must take the same number of ranks at the same local
  /// indices on every node it uses, else every rank gets errc::invalid_argument naming
  /// the colour and two of its ranks: its ranks could not be linked by the old levels.
  two_level split(int color, int key,
                  deadline d = deadline::after(default_timeout())) requires(traits.splits) {
    if (color < 0) {
      throw error(errc::invalid_argument, {rank(), error_site::npos, ~std::uint64_t{0}},
                  "split color must be >= 0 (every rank joins exactly one group)");
    }
    // The job's table of (colour, key): the node's first, then every node's.
    std::vector<detail::split_entry> node, job;
    gradsync::detail::allgather_pod(intra_, detail::split_entry{color, key}, node,
                                    data_tag(intra_.next_seq()), d);
    gradsync::detail::allgather_blocks(inter_, node, job, data_tag(inter_.next_seq()), d);
    const detail::two_level_split_plan plan =
        detail::plan_two_level_split(job, intra_.size(), rank());
    if (!plan.fault.empty()) {
      throw error(errc::invalid_argument, {rank(), error_site::npos, ~std::uint64_t{0}},
                  plan.fault);
    }
    Intra in = intra_.split(color, key, d);
    Inter across = inter_.split(color, plan.node_key, d);
    return two_level(std::move(in), std::move(across));
  }

  std::size_t rank() const { return global_of_intra(intra_.rank()); }
  /// The global rank of rank q of this node's Intra group.
  std::size_t global_of_intra(std::size_t q) const { return inter_.rank() * intra_.size() + q; }
  /// The global rank of rank q of this rank's Inter group (node q, this local index).
  std::size_t global_of_inter(std::size_t q) const { return q * intra_.size() + intra_.rank(); }
  std::size_t size() const { return inter_.size() * intra_.size(); }
  /// Numbers a call over the whole group (the same on every rank): an enclosing level's
  /// checks use it when this two_level is their Inter.
  std::uint64_t next_seq() { return seq_++; }
  /// This rank as messages name it: as Inter names it when Inter knows the job's ranks
  /// and hosts (transport::mpi: "rank 5 on node-b"), else "rank <rank()>".
  std::string describe_self() const {
    if constexpr (transport_traits_of<Inter>().describes_ranks) {
      return inter_.describe_rank(inter_.rank());
    } else {
      return "rank " + std::to_string(rank());
    }
  }
  /// Aborts both levels (their abort(), where they have one): every wait of this rank
  /// fails with errc::aborted. Thread-safe and async-signal-safe where the levels' are.
  void abort() noexcept {
    if constexpr (transport_traits_of<Intra>().aborts) intra_.abort();
    if constexpr (transport_traits_of<Inter>().aborts) inter_.abort();
  }
  /// After this rank failed with `e` (timeout, peer_lost, aborted): tells the peers of
  /// both levels, where the level can carry it (shm marks the rank failed with the cause,
  /// mpi sends a notice), so that a rank lost on one level ends the waits on the other
  /// at once, and their errors quote the first cause (the lost rank) instead of blaming
  /// this one.
  void relay_failure(const error& e) noexcept {
    if (e.code() != errc::timeout && e.code() != errc::peer_lost && e.code() != errc::aborted)
      return;
    if constexpr (transport_traits_of<Intra>().relays_failures) intra_.announce_failure(e.what());
    if constexpr (is_two_level_v<Inter>) {
      inter_.relay_failure(e);
    } else if constexpr (transport_traits_of<Inter>().relays_failures) {
      inter_.announce_failure(e.what());
    }
  }
  /// After this rank timed out: a failure another rank announced on either level (see
  /// relay_failure), or "". A rank that timed out waiting on one level while the lost
  /// rank's news sat on the other names the lost rank this way.
  std::string failure_notice() {
    std::string n;
    if constexpr (is_two_level_v<Inter> || transport_traits_of<Inter>().relays_failures)
      n = inter_.failure_notice();
    if constexpr (transport_traits_of<Intra>().relays_failures) {
      if (n.empty()) n = intra_.failure_notice();
    }
    return n;
  }
  /// While it lives (one call, on the calling thread): this rank's waits inside the node
  /// also serve the inter-node level (Intra::set_wait_hook, Inter::serve_peers: shm and
  /// mpi), so that peers on other nodes asking where this rank is (the stall inspector)
  /// hear that it is in the call and whom of its node it waits for, instead of silence;
  /// and a failure notice from another node ends the node-level wait at once.
  class serving {
   public:
    explicit serving(two_level& t) : t_(t) {
      if constexpr (can_serve) {
        t.intra_.set_wait_hook([&t](std::size_t peer) {
          if (!t.serve_paused_) return t.inter_.serve_peers(peer + 1);
          t.set_node_wait(peer + 1);  // the pipeline's helper says so when it answers
          return std::string();
        });
      }
    }
    serving(const serving&) = delete;
    serving& operator=(const serving&) = delete;
    ~serving() {
      if constexpr (can_serve) t_.intra_.set_wait_hook({});
    }

   private:
    two_level& t_;
  };
  /// Whether serving does anything for these levels.
  static constexpr bool can_serve =
      transport_traits_of<Intra>().takes_wait_hook && transport_traits_of<Inter>().serves_peers;
  /// Stops (true) or resumes serving from the node's waits, while another thread calls
  /// Inter (algo::hierarchical's pipeline helper, which serves it itself when idle).
  void pause_serving(bool p) {
    serve_paused_ = p;
    set_node_wait(0);
  }
  /// While serving is paused: the job rank + 1 this rank's node-level wait is waiting
  /// for (0: none), written by that wait, read by the helper answering the stall queries.
  void set_node_wait(std::uint64_t v) {
    std::atomic_ref<std::uint64_t>(node_wait_).store(v, std::memory_order_relaxed);
  }
  std::uint64_t node_wait() {
    return std::atomic_ref<std::uint64_t>(node_wait_).load(std::memory_order_relaxed);
  }

  Intra& intra() { return intra_; }
  Inter& inter() { return inter_; }
  const Intra& intra() const { return intra_; }
  const Inter& inter() const { return inter_; }

  /// True when the inter-node level crosses a network (its transport's
  /// crosses_network(), agreed by every rank at construction).
  bool crosses_network() const { return network_; }
  /// True when algo::hierarchical pipelines large vectors: the inter-node level crosses
  /// a network, is one transport (a nested two_level runs on the caller's thread) and
  /// every rank's Inter may be called from a helper thread (Inter::allows_helper_thread(),
  /// e.g. MPI_THREAD_SERIALIZED; agreed at construction).
  bool pipelines() const { return pipelines_; }

  /// The allreducer's progress-thread check (allreducer/thread_level.hpp), for both levels:
  /// two_level<shm, mpi> needs MPI_THREAD_SERIALIZED like mpi alone.
  static void require_thread_level() {
    if constexpr (transport_traits_of<Intra>().thread_levels) Intra::require_thread_level();
    if constexpr (transport_traits_of<Inter>().thread_levels) Inter::require_thread_level();
  }
  /// Whether algo::hierarchical may call Inter from its pipeline's helper thread.
  static bool allows_helper_thread() { return transport::helper_thread_ok<Inter>(); }

 private:
  // Every rank's v over group t (rank order): one small allgather
  // (transport/bruck_exchange.hpp, or the one below over a nested two_level), since a
  // transport sits below the algorithms.
  template <class Tr>
  static std::vector<std::uint64_t> gather(Tr& t, std::uint64_t v) {
    std::vector<std::uint64_t> all;
    gradsync::detail::allgather_pod(t, v, all, consistency_tag(t.next_seq()),
                                    deadline::after(default_timeout()));
    return all;
  }
  // The smallest and largest v over group t.
  template <class Tr>
  static std::pair<std::uint64_t, std::uint64_t> spread(Tr& t, std::uint64_t v) {
    const std::vector<std::uint64_t> all = gather(t, v);
    const auto [lo, hi] = std::minmax_element(all.begin(), all.end());
    return {*lo, *hi};
  }

  void check_shape() {
    const auto [min_nodes, max_nodes] = spread(intra_, inter_.size());
    const auto [min_local, max_local] = spread(inter_, intra_.size());
    const auto [min_index, max_index] = spread(inter_, intra_.rank());
    std::string why;
    if (min_index != max_index) {
      why =
          "the ranks of one Inter group must have the same local index (their rank in "
          "their node's Intra group); this group mixes local indices " +
          std::to_string(min_index) + " to " + std::to_string(max_index) +
          ". Build Inter from the ranks of the same local index on every node";
    } else if (min_nodes != max_nodes || min_local != max_local) {
      why =
          "nodes must have equal numbers of ranks; seen from here, the nodes of this local "
          "index hold " +
          std::to_string(min_local) + " to " + std::to_string(max_local) +
          " ranks and the local indices of this node span " + std::to_string(min_nodes) + " to " +
          std::to_string(max_nodes) +
          " nodes. Launch the same number of ranks per node (e.g. mpirun --map-by "
          "ppr:N:node), or use one flat transport";
    }
    // One verdict for all: a flag spread inside the node, across nodes, inside again
    // reaches every rank (each node shares a local index with every other node). Bit 0:
    // a fault; bit 1: a network; bit 2: some rank cannot run Inter on a helper thread.
    std::size_t flags = (why.empty() ? 0 : 1) | (gradsync::crosses_network(inter_) ? 2 : 0) |
                        (allows_helper_thread() ? 0 : 4);
    for (int pass = 0; pass < 3; ++pass) {
      for (const std::uint64_t f : pass == 1 ? gather(inter_, flags) : gather(intra_, flags))
        flags |= f;
    }
    network_ = (flags & 2) != 0;
    pipelines_ = network_ && (flags & 4) == 0 && transport_policy<Inter>;
    const std::size_t bad = flags & 1;
    if (bad) {
      throw error(
          errc::mismatch, {rank(), error_site::npos, ~std::uint64_t{0}},
          "two_level: " + (why.empty() ? std::string("another rank found the layout of the "
                                                     "job's ranks wrong (its error says how)")
                                       : why));
    }
  }

  Intra intra_;
  Inter inter_;
  std::uint64_t seq_ = 0;  // next_seq()
  bool network_ = false, pipelines_ = false;
  bool serve_paused_ = false;  // serving: another thread calls Inter now
  alignas(std::atomic_ref<std::uint64_t>::required_alignment) std::uint64_t node_wait_ = 0;
};

}  // namespace gradsync::transport

namespace gradsync {
/// How messages name this rank of a two_level (two_level::describe_self).
template <class Intra, class Inter>
std::string describe_self(const transport::two_level<Intra, Inter>& t) {
  return t.describe_self();
}
}  // namespace gradsync

namespace gradsync::detail {

template <class Intra, class Inter, class Record>
void allgather_blocks(transport::two_level<Intra, Inter>& t, const std::vector<Record>& mine,
                      std::vector<Record>& out, std::uint32_t, deadline d) {
  std::vector<Record> node;  // this node's ranks' blocks, in local order
  allgather_blocks(t.intra(), mine, node, consistency_tag(t.intra().next_seq()), d);
  allgather_blocks(t.inter(), node, out, consistency_tag(t.inter().next_seq()), d);
}

template <class Intra, class Inter, class Record>
void allgather_pod(transport::two_level<Intra, Inter>& t, const Record& mine,
                   std::vector<Record>& out, std::uint32_t tag, deadline d) {
  allgather_blocks(t, std::vector<Record>{mine}, out, tag, d);
}

}  // namespace gradsync::detail
