// SPDX-License-Identifier: Apache-2.0
// The collective that moves one allreducer bucket, for a transport and an algorithm: the
// algorithm on the transport (traced where it is generic, so its messages are counted and
// on the timeline; over a group with levels, each level), on bytes where the algorithm
// runs on bytes (the element type then erased once, in the allreducer's step table). The
// runner calls it for a bucket no codec takes, and a codec's channel for its wire type,
// so neither goes back up into the runner.
#pragma once

#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "gradsync/algo/composition.hpp"
#include "gradsync/algo/concept.hpp"
#include "gradsync/algo/detail/erased_op.hpp"
#include "gradsync/algo/hierarchical.hpp"
#include "gradsync/core/call.hpp"
#include "gradsync/detail/host_allreduce.hpp"
#include "gradsync/observe/stats.hpp"
#include "gradsync/observe/timeline.hpp"
#include "gradsync/observe/traced_transport.hpp"
#include "gradsync/transport/concept.hpp"
#include "gradsync/transport/levels.hpp"

namespace gradsync::detail {

/// What a bucket's messages go through over transport Tr (or a level) with algorithm A: a
/// traced_transport where A is generic (its messages counted and on the timeline), else Tr.
template <class Tr, class A, bool = observe::traces_steps_v<A, Tr>>
struct wire_transport {
  using type = Tr;
};
template <class Tr, class A>
struct wire_transport<Tr, A, true> {
  using type = observe::traced_transport<Tr>;
};

/// One bucket's collective for a transport and an algorithm.
template <class Transport,  ///< the allreducer's transport (or levels of them)
          class Algorithm>  ///< its algorithm
class bucket_wire {
  using steady = std::chrono::steady_clock;

  /// What a bucket's messages go through over levels: the node's through a
  /// traced_transport always, the cross-node ones through one where the inter-node
  /// algorithm is generic (else, for algo::native, the level itself).
  template <class Tr = Transport>
  struct level_wire {
    using intra_t = typename Tr::intra_type;
    using inter_t = typename Tr::inter_type;
    static constexpr bool traced_out =
        observe::traces_steps_v<typename Algorithm::inter_algorithm, inter_t>;
    using in = observe::traced_transport<intra_t>;
    using out = typename wire_transport<inter_t, typename Algorithm::inter_algorithm>::type;
  };

 public:
  /// Over `t`, each call run with `opt` (its label names the bucket) and its messages
  /// and phases put on `tl`; all three must outlive it.
  bucket_wire(Transport& t, const call_options& opt, observe::timeline& tl)
      : t_(t), opt_(opt), tl_(tl) {}

  /// Whether a bucket's collective runs on bytes: an algorithm with run_bytes on the flat
  /// transport (algorithm_traits::on_bytes), or over levels a hierarchical whose
  /// inter-node algorithm runs on bytes (hierarchical::bytes_over).
  static constexpr bool on_bytes = [] {
    if constexpr (transport_policy<Transport>) {
      return traits_of<Algorithm, Transport>().on_bytes;
    } else if constexpr (is_hierarchical<Algorithm>) {
      return Algorithm::template bytes_over<typename level_wire<>::in,
                                            typename level_wire<>::out>();
    } else {
      return false;  // refused by the composition table
    }
  }();

  /// The erased ops a bucket of T reduced with Op runs on (on_bytes only), a constant: for
  /// the executor of the transport their messages go through, or over levels the
  /// hierarchical's level_ops for the transports of each level.
  template <class T, class Op>
  static constexpr const auto& ops_of() {
    if constexpr (transport_policy<Transport>) {
      return algo::detail::erased_op_v<typename wire_transport<Transport, Algorithm>::type, T, Op>;
    } else {
      return Algorithm::template ops_v<typename level_wire<>::in, typename level_wire<>::out, T,
                                       Op>;
    }
  }

  /// The type of the erased ops its buckets run on (on_bytes only): the same for every
  /// element type and op.
  template <class T = float, class Op = op::sum_t>
  using ops_type = std::remove_cvref_t<decltype(ops_of<T, Op>())>;

  Transport& transport() const { return t_; }
  const call_options& options() const { return opt_; }
  observe::timeline& timeline() const { return tl_; }

  /// The collective of `count` elements at `data`, their type and op erased into `ops`
  /// (on_bytes: ops_of<T, Op>()).
  template <class Ops>
  void run_bytes(const Ops& ops, void* data, std::size_t count, observe::track tr,
                 observe::call_stats& acc) const {
    std::byte* const base = static_cast<std::byte*>(data);
    if constexpr (transport::leveled<Transport>) {
      const std::size_t bytes = count * ops.level.elem;
      acc.bytes_encoded += bytes;
      run_levels(count, bytes, tr, acc, [&](auto& in, auto& out, auto& phase) {
        Algorithm::run_on_bytes(t_, in, out, base, count, ops, opt_, phase);
      });
    } else {
      const std::size_t bytes = count * ops.elem;
      acc.bytes_encoded += bytes;
      if constexpr (observe::traces_steps_v<Algorithm, Transport>) {
        observe::traced_transport<Transport> tt(t_, &tl_, tr);
        host_allreduce_bytes<Algorithm>(tt, base, count, ops, opt_);
        acc.bytes_wire += tt.bytes_sent();
      } else {  // not generic on Transport, so not traced: the bytes are the ring's model
        host_allreduce_bytes<Algorithm>(t_, base, count, ops, opt_);
        acc.bytes_wire += ring_wire_bytes(bytes, t_.size());
        acc.wire_measured = false;
      }
    }
  }

  /// The collective of `count` elements of T at `data` reduced with Op, one call below
  /// the public entry point (the composition is checked here, at compile time, and the
  /// span is the allreducer's own).
  template <class T, class Op>
  void run(T* data, std::size_t count, observe::track tr, observe::call_stats& acc) const {
    check_composition<Algorithm, Transport, T, Op>();
    if constexpr (on_bytes) {
      run_bytes(ops_of<T, Op>(), data, count, tr, acc);
    } else {
      std::span<T> s(data, count);
      acc.bytes_encoded += s.size_bytes();
      if constexpr (transport::leveled<Transport>) {  // algo::hierarchical<algo::native>
        run_levels(s.size(), s.size_bytes(), tr, acc, [&](auto& in, auto& out, auto& phase) {
          Algorithm::run_on(t_, in, out, s, Op{}, opt_, phase);
        });
      } else if constexpr (observe::traces_steps_v<Algorithm, Transport>) {
        observe::traced_transport<Transport> tt(t_, &tl_, tr);
        host_allreduce<Algorithm>(tt, s, Op{}, opt_);
        acc.bytes_wire += tt.bytes_sent();
      } else {  // peer memory or the transport's own allreduce: no messages to count
        host_allreduce<Algorithm>(t_, s, Op{}, opt_);
        acc.bytes_wire += ring_wire_bytes(s.size_bytes(), t_.size());
        acc.wire_measured = false;
      }
    }
  }

 private:
  /// Over levels: `run(in, out, phase)` runs the bucket's `elements` elements (`bytes`
  /// bytes) with its phases put on the timeline, and the bytes each level sends counted
  /// by a traced_transport around it (the node's ring always; the inter-node algorithm
  /// when it is generic, else, for algo::native, the ring model of the shard).
  template <class Run>
  void run_levels(std::size_t elements, std::size_t bytes, observe::track tr,
                  observe::call_stats& acc, Run&& run) const {
    using wire = level_wire<>;
    auto phase = [&](std::string_view name, steady::time_point b, steady::time_point e) {
      tl_.complete_with(name, tr, b, e, [&] { return "\"elements\":" + std::to_string(elements); });
    };
    typename wire::in in(t_.intra(), &tl_, tr);
    if constexpr (wire::traced_out) {
      typename wire::out out(t_.inter(), &tl_, tr);
      run(in, out, phase);
      acc.bytes_wire += in.bytes_sent() + out.bytes_sent();
    } else {
      run(in, t_.inter(), phase);
      const std::size_t local = t_.intra().size();
      acc.bytes_wire += in.bytes_sent() + ring_wire_bytes(bytes / local, t_.inter().size());
      acc.wire_measured = false;
    }
  }

  /// Bytes a rank sends in a ring allreduce of `bytes` over n ranks, 2(n-1)/n of them: the
  /// model for collectives whose messages gradsync does not see.
  static std::size_t ring_wire_bytes(std::size_t bytes, std::size_t n) {
    return n > 1 ? bytes * 2 * (n - 1) / n : 0;
  }

  Transport& t_;
  const call_options& opt_;
  observe::timeline& tl_;
};

}  // namespace gradsync::detail
