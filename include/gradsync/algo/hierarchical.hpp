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
//
// Three levels or more: when the two_level's Inter is a two_level, InterAlgo is a
// hierarchical too (hierarchical<hierarchical<ring>>), and phase 2 runs that one's three
// phases on the Inter's own levels, inside the enclosing call's frame.
//
// The schedule runs on bytes (run_phases): one instance per pair of levels. Where InterAlgo
// runs on bytes across the nodes too, the whole call does (run_bytes, run_on_bytes), the
// element type and op erased once into a level_ops.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "gradsync/algo/concept.hpp"
#include "gradsync/algo/detail/erased_op.hpp"
#include "gradsync/algo/detail/level_pipeline.hpp"
#include "gradsync/algo/detail/partition.hpp"
#include "gradsync/algo/detail/ring_pass.hpp"
#include "gradsync/algo/tuning.hpp"
#include "gradsync/algo/ring.hpp"
#include "gradsync/check/call_frame.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/core/function_ref.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/core/stall.hpp"
#include "gradsync/kernels/finite.hpp"
#include "gradsync/transport/two_level.hpp"

namespace gradsync::algo {

template <class InterAlgo>
struct hierarchical;

}  // namespace gradsync::algo

namespace gradsync::detail {
template <class A>
inline constexpr bool is_hierarchical = false;
template <class X>
inline constexpr bool is_hierarchical<algo::hierarchical<X>> = true;
}  // namespace gradsync::detail

namespace gradsync::algo {

namespace detail {
/// The erased ops of one call over levels: what the node level reduces with (`level`:
/// op::avg sums there), the op's final step on the shard's owner (`final_op`: avg divides
/// by the whole group) and what the inter-node algorithm reduces with (`inter`: an
/// erased_op, or the inner levels' level_ops with three levels or more).
template <class InOps, class OutOps>
struct level_ops {
  InOps level;
  InOps final_op;
  OutOps inter;
};
}  // namespace detail

/// Reduce-scatter in the node, InterAlgo across nodes, allgather in the node.
template <class InterAlgo = ring>  // the allreduce across nodes (ring, tree, native, ...)
struct hierarchical {
 private:
  template <class In>
  using op_on = detail::erased_op<typename detail::ring_pass<In>::executor_t>;
  /// op::avg sums at every level and divides once, by the whole group, on the shard's owner.
  template <class Op>
  using level_op_t = std::conditional_t<std::is_same_v<Op, op::avg_t>, op::sum_t, Op>;

 public:
  static constexpr std::string_view name = "hierarchical";
  static constexpr algorithm_traits traits{.needs_two_level = true};
  using inter_algorithm = InterAlgo;

  /// Observes nothing (run()'s default): see run_observed.
  struct no_phases {
    void operator()(std::string_view, std::chrono::steady_clock::time_point,
                    std::chrono::steady_clock::time_point) const {}
  };

  /// Whether a call whose node messages go through In and cross-node ones through Out
  /// runs on bytes: InterAlgo runs on bytes over Out, or, when Out has levels, is a
  /// hierarchical that does over them.
  template <class In, class Out>
  static constexpr bool bytes_over() {
    if constexpr (transport::leveled<Out>) {
      if constexpr (gradsync::detail::is_hierarchical<InterAlgo>) {
        return InterAlgo::template bytes_over<typename Out::intra_type, typename Out::inter_type>();
      } else {
        return false;  // refused by the composition table (check_composition)
      }
    } else {
      return traits_of<InterAlgo, Out>().on_bytes;
    }
  }

  /// What InterAlgo reduces T with Op by across Out: its erased op, or over levels the
  /// inner hierarchical's ops_v.
  template <class Out, class T, class Op>
  static constexpr auto inter_ops() {
    if constexpr (transport::leveled<Out>) {
      return InterAlgo::template ops_v<typename Out::intra_type, typename Out::inter_type, T, Op>;
    } else {
      return detail::erased_op_v<Out, T, Op>;
    }
  }

  /// ops_v's value (the inter-node part reduces with level_op_t<Op> throughout).
  template <class In, class Out, class T, class Op>
  static constexpr auto make_ops() {
    using level_op = level_op_t<Op>;
    return detail::level_ops<op_on<In>, decltype(inter_ops<Out, T, level_op>())>{
        detail::erased_op_v<In, T, level_op>, detail::erased_op_v<In, T, Op>,
        inter_ops<Out, T, level_op>()};
  }

  /// The erased ops of element type T and op Op over In and Out (bytes_over<In, Out>), a
  /// constant: what run_on_bytes and run_bytes take.
  template <class In, class Out, class T, class Op>
  static constexpr auto ops_v = make_ops<In, Out, T, Op>();

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

  /// As the inter-node algorithm of an enclosing hierarchical call (three levels or more:
  /// t is that call's Inter): the enclosing call's frame has numbered, agreed and checked
  /// the call over every level, so this runs the schedule on t's levels, by c's deadline.
  template <class Intra, class Inter, class T, class Op>
  static void run(transport::two_level<Intra, Inter>& t, std::span<T> data, Op,
                  const call_context& c) {
    const auto [in_c, out_c] = open_inner(
        t, c, {"allreduce across nodes", name, dtype_of<T>::value, Op::id, data.size(), {}});
    no_phases none;
    run_schedule(t, t.intra(), t.inter(), data, Op{}, in_c, out_c, none);
  }

  /// run() above on `count` elements at `base` whose type and op `ops` erased (ops_v over
  /// t's own levels): how an enclosing hierarchical call that runs on bytes calls this one.
  template <class Intra, class Inter, class InOps, class OutOps>
  static void run_bytes(transport::two_level<Intra, Inter>& t, std::byte* base, std::size_t count,
                        const detail::level_ops<InOps, OutOps>& ops, const call_context& c) {
    const auto [in_c, out_c] = open_inner(
        t, c, {"allreduce across nodes", name, ops.final_op.type, ops.final_op.id, count, {}});
    no_phases none;
    run_schedule_bytes(t, t.intra(), t.inter(), base, count, ops, in_c, out_c, none);
  }

  /// run_observed with every message of the two levels moved through `in` and `out`:
  /// t.intra() and t.inter() themselves, or wrappers that forward to them (the allreducer
  /// passes observe::traced_transport, which counts the bytes each level sends).
  template <class Intra, class Inter, class In, class Out, class T, class Op, class Phase>
  static void run_on(transport::two_level<Intra, Inter>& t, In& in, Out& out, std::span<T> data,
                     Op op, const call_options& opt, Phase&& phase) {
    const gradsync::detail::level_frame<Intra, Inter, In, Out> f(
        t, in, out, opt, {"allreduce", name, dtype_of<T>::value, Op::id, data.size(), {}},
        "allreduce inside the node", "allreduce across nodes");
    const bool finite = kernels::can_be_non_finite_v<T> && opt.check_finite;
    f.run([&] {
      run_checked(
          f, data.data(), data.size_bytes(), finite,
          [&] { f.check_finite(data.data(), data.size()); },
          [&] { run_schedule(t, in, out, data, op, f.inside(), f.across(), phase); });
    });
  }

  /// run_on on `count` elements at `base` whose type and op `ops` erased (ops_v<In, Out>),
  /// for a caller that erased them once (an allreducer's bucket). Without a finite check:
  /// such a caller checks its input in its own pass, and `opt` asks for none.
  template <class Intra, class Inter, class In, class Out, class InOps, class OutOps, class Phase>
  static void run_on_bytes(transport::two_level<Intra, Inter>& t, In& in, Out& out, std::byte* base,
                           std::size_t count, const detail::level_ops<InOps, OutOps>& ops,
                           const call_options& opt, Phase&& phase) {
    const gradsync::detail::level_frame<Intra, Inter, In, Out> f(
        t, in, out, opt, {"allreduce", name, ops.final_op.type, ops.final_op.id, count, {}},
        "allreduce inside the node", "allreduce across nodes");
    f.run([&] {
      run_checked(
          f, base, count * ops.level.elem, false, [] {},
          [&] { run_schedule_bytes(t, in, out, base, count, ops, f.inside(), f.across(), phase); });
    });
  }

 private:
  using clock = std::chrono::steady_clock;
  /// Reports one phase (name, begin, end) to run_observed's observer.
  using phase_fn =
      gradsync::detail::function_ref<void(std::string_view, clock::time_point, clock::time_point)>;
  /// InterAlgo's allreduce of `count` elements at `p` across the nodes.
  using inter_fn =
      gradsync::detail::function_ref<void(std::byte* p, std::size_t count, const call_context& c)>;
  /// Numbers an inner call (run() and run_bytes() above) on t's levels and tells their
  /// stall watches, so a late rank there is named: its contexts inside and across.
  template <class Intra, class Inter>
  static std::pair<call_context, call_context> open_inner(transport::two_level<Intra, Inter>& t,
                                                          const call_context& c,
                                                          const call_note& note) {
    const std::uint64_t in_seq = t.intra().next_seq(), out_seq = t.inter().next_seq();
    gradsync::detail::enter_call(t.intra(), in_seq, note);
    gradsync::detail::enter_call(t.inter(), out_seq, note);
    return {call_context{c.until, in_seq, data_tag(in_seq)},
            call_context{c.until, out_seq, data_tag(out_seq)}};
  }

  /// A call's body in its frame `f`: the header agreement, the finite check `scan` (when
  /// `finite`), the schedule and the check of the `bytes` result bytes at `data`.
  template <class Intra, class Inter, class In, class Out>
  static void run_checked(const gradsync::detail::level_frame<Intra, Inter, In, Out>& f,
                          const void* data, std::size_t bytes, bool finite,
                          gradsync::detail::function_ref<void()> scan,
                          gradsync::detail::function_ref<void()> schedule) {
    // The header names InterAlgo too: a different InterAlgo on some nodes must be caught
    // (their messages would not match).
    f.agree(header_name(), finite ? call_header::finite_checked : 0);
    if (finite) scan();
    f.mark_checked();
    schedule();
    f.verify(data, bytes);
  }

  /// The three phases of T and Op over the levels: on bytes throughout where InterAlgo
  /// runs on bytes across (bytes_over), else run_phases with InterAlgo's typed run across
  /// (algo::native). When Out is itself a two_level (three levels or more), InterAlgo is a
  /// hierarchical too and runs its own levels through run() or run_bytes() above.
  template <class Intra, class Inter, class In, class Out, class T, class Op, class Phase>
  static void run_schedule(transport::two_level<Intra, Inter>& t, In& in, Out& out,
                           std::span<T> data, Op, const call_context& in_c,
                           const call_context& out_c, Phase& phase) {
    std::byte* const base = reinterpret_cast<std::byte*>(data.data());
    if constexpr (bytes_over<In, Out>()) {
      run_schedule_bytes(t, in, out, base, data.size(), ops_v<In, Out, T, Op>, in_c, out_c, phase);
    } else {
      using level_op = level_op_t<Op>;
      run_phases(
          t, in, base, data.size(), detail::erase_op_for<T, level_op>(in),
          detail::erase_op_for<T, Op>(in),
          [&](std::byte* p, std::size_t count, const call_context& c) {
            InterAlgo::run(out, std::span<T>(reinterpret_cast<T*>(p), count), level_op{}, c);
          },
          phase, in_c, out_c);
    }
  }

  /// run_schedule on bytes: InterAlgo's run_bytes across, with ops.inter.
  template <class Intra, class Inter, class In, class Out, class InOps, class OutOps, class Phase>
  static void run_schedule_bytes(transport::two_level<Intra, Inter>& t, In& in, Out& out,
                                 std::byte* base, std::size_t count,
                                 const detail::level_ops<InOps, OutOps>& ops,
                                 const call_context& in_c, const call_context& out_c,
                                 Phase& phase) {
    run_phases(
        t, in, base, count, ops.level, ops.final_op,
        [&](std::byte* p, std::size_t n, const call_context& c) {
          InterAlgo::run_bytes(out, p, n, ops.inter, c);
        },
        phase, in_c, out_c);
  }

  /// The three phases on `count` elements of level.elem bytes at `base`: `level` reduces
  /// inside the node, `inter` across the nodes, final_op finalizes (avg divides by the
  /// whole group). One instance per pair of levels, whatever the element type and op.
  template <class Intra, class Inter, class In>
  static void run_phases(transport::two_level<Intra, Inter>& t, In& in, std::byte* base,
                         std::size_t count, const op_on<In>& level, const op_on<In>& final_op,
                         inter_fn inter, phase_fn phase, const call_context& in_c,
                         const call_context& out_c) {
    const std::size_t elem = level.elem;
    const auto ex = in.executor();
    const std::size_t local = in.size();
    if (local == 1 || count == 0) {
      const auto i0 = clock::now();
      inter(base, count, out_c);
      final_op.finalize(ex, base, count, t.size());
      phase("inter_allreduce", i0, clock::now());
      return;
    }
    const std::size_t pieces = tuning::hierarchical_pieces(count * elem, t.pipelines());
    if (pieces > 1) {
      return run_pipelined(t, in, base, count, level, final_op, inter, in_c, out_c, pieces, phase);
    }
    detail::ring_pass<In> pass(in, base, count, elem, in_c);
    const auto r0 = clock::now();
    pass.reduce_scatter(level, 0, false);
    const auto r1 = clock::now();
    const detail::range mine = pass.owned();
    std::byte* const shard = base + mine.offset * elem;
    inter(shard, mine.count, out_c);
    final_op.finalize(ex, shard, mine.count, t.size());
    const auto i1 = clock::now();
    pass.allgather();
    pass.finish();
    const auto g1 = clock::now();
    phase("intra_reduce_scatter", r0, r1);
    phase("inter_allreduce", r1, i1);
    phase("intra_allgather", i1, g1);
  }

  /// run_phases over `pieces` pieces of the vector: the node's reduce-scatter of piece
  /// i+1 runs while a helper thread (detail/level_pipeline.hpp) allreduces piece i's shard
  /// across the nodes, and each piece is allgathered in the node once its shard is back,
  /// so the network is busy from the first piece's shard to the last's.
  template <class Intra, class Inter, class In>
  static void run_pipelined(transport::two_level<Intra, Inter>& t, In& in, std::byte* base,
                            std::size_t count, const op_on<In>& level, const op_on<In>& final_op,
                            inter_fn inter, const call_context& in_c, const call_context& out_c,
                            std::size_t pieces, phase_fn phase) {
    const std::size_t elem = level.elem;
    std::vector<detail::ring_pass<In>> passes;
    passes.reserve(pieces);
    std::vector<detail::range> shards(pieces);  // element ranges of the whole vector
    clock::time_point i0{}, i1{};
    detail::level_pipeline<Intra, Inter> worker(t, [&](std::size_t i) {
      if (i == 0) i0 = clock::now();
      std::byte* const p = base + shards[i].offset * elem;
      inter(p, shards[i].count, out_c);
      final_op.finalize(in.executor(), p, shards[i].count, t.size());
      if (i + 1 == pieces) i1 = clock::now();
    });
    const auto r0 = clock::now();
    for (std::size_t i = 0; i < pieces; ++i) {
      const detail::range p = detail::part(count, pieces, i);
      passes.emplace_back(in, base + p.offset * elem, p.count, elem, in_c);
      passes.back().reduce_scatter(level, 0, false);
      t.set_node_wait(0);  // no longer held up inside the node (set by its waits)
      const detail::range mine = passes.back().owned();
      shards[i] = {p.offset + mine.offset, mine.count};
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
  }

  /// The header's algorithm field: "hier<" + InterAlgo's name + ">".
  static const std::string& header_name() {
    static const std::string n = "hier<" + std::string(InterAlgo::name) + ">";  // built once
    return n;
  }
};

}  // namespace gradsync::algo
