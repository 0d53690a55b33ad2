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
#include <utility>

#include "gradsync/algo/composition.hpp"
#include "gradsync/algo/concept.hpp"
#include "gradsync/algo/detail/erased_op.hpp"
#include "gradsync/core/call.hpp"
#include "gradsync/detail/host_allreduce.hpp"
#include "gradsync/observe/stats.hpp"
#include "gradsync/observe/timeline.hpp"
#include "gradsync/observe/traced_transport.hpp"
#include "gradsync/transport/concept.hpp"
#include "gradsync/transport/levels.hpp"

namespace gradsync::detail {

/// What a bucket's messages go through over the flat transport Tr with algorithm A: a
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

 public:
  /// Over `t`, each call run with `opt` (its label names the bucket) and its messages
  /// and phases put on `tl`; all three must outlive it.
  bucket_wire(Transport& t, const call_options& opt, observe::timeline& tl)
      : t_(t), opt_(opt), tl_(tl) {}

  /// Whether a bucket's collective runs on bytes: one flat transport, and an algorithm
  /// with run_bytes on it (algorithm_traits::on_bytes).
  static constexpr bool on_bytes = [] {
    if constexpr (transport_policy<Transport>) {
      return traits_of<Algorithm, Transport>().on_bytes;
    } else {
      return false;
    }
  }();

  /// The type of the erased ops its buckets run on (on_bytes only): for the executor of
  /// the transport their messages go through.
  template <class W = typename wire_transport<Transport, Algorithm>::type>
  using ops_type = algo::detail::erased_op<decltype(std::declval<const W&>().executor())>;

  /// The erased ops a bucket of T reduced with Op runs on (on_bytes only): a constant.
  template <class T, class Op>
  static constexpr const auto& ops_of() {
    return algo::detail::erased_op_v<typename wire_transport<Transport, Algorithm>::type, T, Op>;
  }

  Transport& transport() const { return t_; }
  const call_options& options() const { return opt_; }
  observe::timeline& timeline() const { return tl_; }

  /// The collective of `count` elements at `data`, their type and op erased into `ops`
  /// (on_bytes).
  template <class Ex>
  void run_bytes(const algo::detail::erased_op<Ex>& ops, void* data, std::size_t count,
                 observe::track tr, observe::call_stats& acc) const {
    std::byte* const base = static_cast<std::byte*>(data);
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
      if constexpr (transport::leveled<Transport>) {
        run_levels<T, Op>(s, tr, acc);
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
  /// Over levels: the phases on the timeline, and the bytes each level sends counted
  /// by a traced_transport around it (the node's ring always; the inter-node algorithm
  /// when it is generic, else, for algo::native, the ring model of the shard).
  template <class T, class Op>
  void run_levels(std::span<T> s, observe::track tr, observe::call_stats& acc) const {
    using intra_t = typename Transport::intra_type;
    using inter_t = typename Transport::inter_type;
    using inter_algo = typename Algorithm::inter_algorithm;
    auto phase = [&](std::string_view name, steady::time_point b, steady::time_point e) {
      tl_.complete_with(name, tr, b, e, [&] { return "\"elements\":" + std::to_string(s.size()); });
    };
    observe::traced_transport<intra_t> in(t_.intra(), &tl_, tr);
    if constexpr (observe::traces_steps_v<inter_algo, inter_t>) {
      observe::traced_transport<inter_t> out(t_.inter(), &tl_, tr);
      Algorithm::run_on(t_, in, out, s, Op{}, opt_, phase);
      acc.bytes_wire += in.bytes_sent() + out.bytes_sent();
    } else {
      Algorithm::run_on(t_, in, t_.inter(), s, Op{}, opt_, phase);
      const std::size_t local = t_.intra().size();
      acc.bytes_wire +=
          in.bytes_sent() + ring_wire_bytes(s.size_bytes() / local, t_.inter().size());
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
