// SPDX-License-Identifier: Apache-2.0
// algo::hierarchical<InterAlgo> — allreduce over a transport::two_level in three phases:
//   1. reduce-scatter inside the node (ring over Intra): local rank l ends with one
//      shard of the vector reduced over its node;
//   2. allreduce of that shard across the nodes with InterAlgo over Inter (the ranks of
//      one local index, each with the same shard);
//   3. allgather inside the node (ring over Intra).
// Each byte crosses the slow inter-node level once per node instead of once per rank,
// and all local ranks drive the inter-node links at the same time, on their own shard.
// op::avg sums in both levels and divides once by the whole group's size, on the shard's
// owner, so every rank receives the same bits. Ranks call:
//
//   gs::allreduce<gs::algo::hierarchical<>>(t, std::span<float>(grad), gs::op::sum);
//   gs::allreduce<gs::algo::hierarchical<gs::algo::native>>(t, span, op);  // MPI_Allreduce
//
// The call's arguments, the inter-node algorithm included, are checked on both levels
// (errc::mismatch on every rank, at once).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "gradsync/algo/concept.hpp"
#include "gradsync/algo/detail/inter_worker.hpp"
#include "gradsync/algo/detail/partition.hpp"
#include "gradsync/algo/detail/ring_pass.hpp"
#include "gradsync/algo/tuning.hpp"
#include "gradsync/algo/ring.hpp"
#include "gradsync/check/consistency.hpp"
#include "gradsync/check/finite.hpp"
#include "gradsync/check/two_levels.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/core/flight_recorder.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/core/stall.hpp"
#include "gradsync/kernels/finite.hpp"
#include "gradsync/check/verify.hpp"
#include "gradsync/transport/two_level.hpp"
#include "gradsync/transport/two_level/call.hpp"

namespace gradsync::algo {

/// Reduce-scatter in the node, InterAlgo across nodes, allgather in the node.
template <class InterAlgo = ring>  // the allreduce across nodes (ring, tree, native, ...)
struct hierarchical {
  static constexpr std::string_view name = "hierarchical";
  static constexpr bool needs_peer_access = false;
  static constexpr bool needs_native = false;
  static constexpr bool needs_two_level = true;  // runs on transport::two_level only
  using inter_algorithm = InterAlgo;

  /// Observes nothing (run()'s default): see run_observed.
  struct no_phases {
    void operator()(std::string_view, std::chrono::steady_clock::time_point,
                    std::chrono::steady_clock::time_point) const {}
  };

  template <class Intra, class Inter, class T, class Op>
  static void run(transport::two_level<Intra, Inter>& t, std::span<T> data, Op op,
                  const call_options& opt) {
    run_observed(t, data, op, opt, no_phases{});
  }

  /// run() that reports each phase to `phase(name, begin, end)`: "intra_reduce_scatter",
  /// "inter_allreduce" (the cross-node allreduce and avg's division), "intra_allgather"
  /// (the allreducer puts them on the timeline).
  template <class Intra, class Inter, class T, class Op, class Phase>
  static void run_observed(transport::two_level<Intra, Inter>& t, std::span<T> data, Op op,
                           const call_options& opt, Phase&& phase) {
    run_on(t, t.intra(), t.inter(), data, op, opt, phase);
  }

  /// run_observed with every message of the two levels moved through `in` and `out`:
  /// t.intra() and t.inter() themselves, or wrappers that forward to them (the allreducer
  /// passes observe::traced_transport, which counts the bytes each level sends).
  template <class Intra, class Inter, class In, class Out, class T, class Op, class Phase>
  static void run_on(transport::two_level<Intra, Inter>& t, In& in, Out& out, std::span<T> data,
                     Op op, const call_options& opt, Phase&& phase) {
    transport::detail::two_level_call(
        t, in, out, opt, {"allreduce", name, dtype_of<T>::value, Op::id, data.size(), {}},
        "allreduce inside the node", "allreduce across nodes",
        [&](const call_context& in_c, const call_context& out_c) {
          run_levels(t, in, out, data, op, opt, phase, in_c.until, in_c.seq, out_c.seq);
        });
  }

 private:
  /// run_on's body, its calls numbered in_seq (node level) and out_seq (across nodes).
  template <class Intra, class Inter, class In, class Out, class T, class Op, class Phase>
  static void run_levels(transport::two_level<Intra, Inter>& t, In& in, Out& out, std::span<T> data,
                         Op op, const call_options& opt, Phase& phase, deadline until,
                         std::uint64_t in_seq, std::uint64_t out_seq) {
    using clock = std::chrono::steady_clock;
    const call_context in_c{until, in_seq, data_tag(in_seq)};
    const call_context out_c{until, out_seq, data_tag(out_seq)};
    const bool finite = kernels::can_be_non_finite_v<T> && opt.check_finite;
    if (opt.check) {
      check_arguments<T, Op>(t, in, out, data.size(), in_seq, out_seq, until,
                             finite ? call_header::finite_checked : 0);
    }
    if (finite) {
      const std::size_t bad = kernels::first_non_finite(data.data(), data.size());
      agree_finite(
          t, in, out,
          gradsync::detail::make_finding(
              0, bad, bad < data.size() ? data.data() + bad : static_cast<const T*>(nullptr),
              t.rank(), t.describe_self()),
          until, [](std::size_t) { return std::string("its input"); });
    }
    if (opt.recorder) opt.recorder->mark(in_seq, flight_recorder::phase::checked);
    // op::avg: sums at both levels, one division by the whole group on the shard's owner.
    using level_op = std::conditional_t<std::is_same_v<Op, op::avg_t>, op::sum_t, Op>;
    const std::size_t local = in.size();
    if (local == 1 || data.empty()) {
      const auto i0 = clock::now();
      InterAlgo::run(out, data, level_op{}, out_c);
      in.executor().finalize(data.data(), data.size(), t.size(), op);
      phase("inter_allreduce", i0, clock::now());
      if (opt.verify) {
        gradsync::detail::verify_two_levels(t, in, out, in_seq, out_seq, data.data(),
                                            data.size_bytes(), until, "allreduce");
      }
      return;
    }
    const std::size_t pieces = tuning::hierarchical_pieces(data.size_bytes(), t.pipelines());
    if (pieces > 1) {
      return run_pipelined<InterAlgo, level_op>(t, in, out, data, op, opt, in_c, out_c, pieces,
                                                phase, in_seq, out_seq, until);
    }
    detail::ring_pass<In> pass(in, data, in_c);
    const auto r0 = clock::now();
    pass.reduce_scatter(detail::erase_op_for<T, level_op>(in), 0, false);
    const auto r1 = clock::now();
    const detail::range mine = pass.owned();
    const std::span<T> shard = data.subspan(mine.offset, mine.count);
    InterAlgo::run(out, shard, level_op{}, out_c);
    in.executor().finalize(shard.data(), shard.size(), t.size(), op);
    const auto i1 = clock::now();
    pass.allgather();
    pass.finish();
    const auto g1 = clock::now();
    phase("intra_reduce_scatter", r0, r1);
    phase("inter_allreduce", r1, i1);
    phase("intra_allgather", i1, g1);
    if (opt.verify)
      gradsync::detail::verify_two_levels(t, in, out, in_seq, out_seq, data.data(),
                                          data.size_bytes(), until, "allreduce");
  }

  /// run_observed over `pieces` pieces of the vector: the node's reduce-scatter of piece
  /// i+1 runs while a helper thread (detail/inter_worker.hpp) allreduces piece i's shard
  /// across the nodes, and each piece is allgathered in the node once its shard is back,
  /// so the network is busy from the first piece's shard to the last's.
  template <class X, class LevelOp, class Intra, class Inter, class In, class Out, class T,
            class Op, class Phase>
  static void run_pipelined(transport::two_level<Intra, Inter>& t, In& in, Out& out,
                            std::span<T> data, Op op, const call_options& opt,
                            const call_context& in_c, const call_context& out_c, std::size_t pieces,
                            Phase& phase, std::uint64_t in_seq, std::uint64_t out_seq,
                            deadline until) {
    using clock = std::chrono::steady_clock;
    std::vector<detail::ring_pass<In>> passes;
    passes.reserve(pieces);
    std::vector<std::span<T>> shards(pieces);
    clock::time_point i0{}, i1{};
    // The helper alone calls Inter while it lives; idle, it serves the stall queries.
    t.pause_serving(true);
    struct resume_serving {
      transport::two_level<Intra, Inter>& t;
      ~resume_serving() { t.pause_serving(false); }
    } resume{t};
    detail::inter_worker worker(
        [&](std::size_t i) {
          if (i == 0) i0 = clock::now();
          X::run(out, shards[i], LevelOp{}, out_c);
          in.executor().finalize(shards[i].data(), shards[i].size(), t.size(), op);
          if (i + 1 == pieces) i1 = clock::now();
        },
        [&] {
          if constexpr (transport::two_level<Intra, Inter>::can_serve)
            (void)t.inter().serve_peers(t.node_wait());
        });
    const auto r0 = clock::now();
    for (std::size_t i = 0; i < pieces; ++i) {
      const detail::range p = detail::part(data.size(), pieces, i);
      const std::span<T> piece = data.subspan(p.offset, p.count);
      passes.emplace_back(in, piece, in_c);
      passes.back().reduce_scatter(detail::erase_op_for<T, LevelOp>(in), 0, false);
      t.set_node_wait(0);  // no longer held up inside the node (set by its waits)
      const detail::range mine = passes.back().owned();
      shards[i] = piece.subspan(mine.offset, mine.count);
      worker.ready(i);
    }
    const auto r1 = clock::now();
    for (std::size_t i = 0; i < pieces; ++i) {
      worker.wait(i);
      passes[i].allgather();
      passes[i].finish();
    }
    const auto g1 = clock::now();
    phase("intra_reduce_scatter", r0, r1);
    phase("inter_allreduce", i0, i1);
    phase("intra_allgather", i1, g1);
    if (opt.verify)
      gradsync::detail::verify_two_levels(t, in, out, in_seq, out_seq, data.data(),
                                          data.size_bytes(), until, "allreduce");
  }

  /// The header's algorithm field: "hier<" + InterAlgo's name + ">" (a different
  /// InterAlgo on some nodes must be caught: their messages would not match).
  static const std::string& header_name() {
    static const std::string n = "hier<" + std::string(InterAlgo::name) + ">";  // built once
    return n;
  }

  /// Agrees on the call inside the node, then across nodes; every rank ends with the same
  /// verdict (check/two_levels.hpp: a node that disagrees joins the cross-node round with
  /// a poisoned header, so the other nodes fail at once too).
  template <class T, class Op, class Intra, class Inter, class In, class Out>
  static void check_arguments(transport::two_level<Intra, Inter>& t, In& in, Out& out,
                              std::size_t count, std::uint64_t in_seq, std::uint64_t out_seq,
                              deadline until, std::uint16_t flags) {
    gradsync::detail::agree_two_levels(
        t, in, out, in_seq, out_seq, until, header_name(),
        [&](std::uint64_t seq, std::string_view name) {
          return call_header::make(seq, count, dtype_of<T>::value, Op::id, name, flags);
        },
        "allreduce");
  }
};

}  // namespace gradsync::algo

namespace gradsync {

namespace detail {
template <class A>
inline constexpr bool is_hierarchical = false;
template <class X>
inline constexpr bool is_hierarchical<algo::hierarchical<X>> = true;
}  // namespace detail

}  // namespace gradsync
