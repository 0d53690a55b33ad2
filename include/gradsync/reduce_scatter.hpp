// SPDX-License-Identifier: Apache-2.0
// gradsync::reduce_scatter — every rank contributes `in` (n blocks of out.size() elements,
// block q meant for rank q) and rank r receives block r reduced over every rank in `out`
// (MPI_Reduce_scatter_block; a sharded optimizer's gradient step). With the same
// guarantees as allreduce: a deadline on every wait, the call's arguments agreed across
// ranks before data moves (errc::mismatch naming the ranks), check_finite. On shm each
// rank reads its block of every rank's input (algo::reduce_scatter_direct). Over
// levels (transport/levels.hpp) the node reduces first (each local rank the blocks of its column),
// then each column across the nodes, so every element crosses the network once; across a network,
// in pieces whose crossing overlaps the next piece's reduction in the node.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <type_traits>

#include "gradsync/algo/detail/erased_op.hpp"
#include "gradsync/algo/detail/level_pipeline.hpp"
#include "gradsync/algo/detail/partition.hpp"
#include "gradsync/algo/reduce_scatter_direct.hpp"
#include "gradsync/algo/reduce_scatter_ring.hpp"
#include "gradsync/algo/tuning.hpp"
#include "gradsync/allreduce.hpp"
#include "gradsync/check/call_frame.hpp"
#include "gradsync/core/call.hpp"
#include "gradsync/core/device_memory.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/core/workspace.hpp"
#include "gradsync/detail/host_collective.hpp"
#include "gradsync/detail/native_collectives.hpp"
#include "gradsync/kernels/finite.hpp"
#include "gradsync/transport/concept.hpp"
#include "gradsync/transport/levels.hpp"

namespace gradsync {

namespace detail {
using rs_algo = algo::reduce_scatter_ring;

/// A reduce_scatter over one flat transport, its call numbered and checked.
template <transport_policy Tr, class T, class Op>
std::size_t reduce_scatter_flat(Tr& t, std::span<const T> in, std::span<T> out, Op op,
                                const call_options& opt) {
  const bool native =
      use_native_collective(has_native_reduce_scatter<Tr, T, Op>, in.size() * sizeof(T));
  const std::string_view name = has_direct_collectives<Tr> ? algo::reduce_scatter_direct::name
                                : native                   ? native_collective_name
                                                           : rs_algo::name;
  const call_frame<Tr> f(t, opt,
                         {"reduce_scatter", name, dtype_of<T>::value, Op::id, out.size(), {}});
  const call_context& ctx = f.context();
  const bool finite = kernels::can_be_non_finite_v<T> && opt.check_finite;
  std::size_t sent = 0;
  f.run([&] {
    const call_header h = f.header(finite ? call_header::finite_checked : 0);
    auto check_inputs = [&] {
      if (finite) f.check_finite(in.data(), in.size());
    };
    if constexpr (has_direct_collectives<Tr>) {  // its header round is the agreement
      sent = algo::reduce_scatter_direct::run(t, in, out, op, h, ctx, check_inputs);
      return;
    }
    f.agree(h);
    check_inputs();
    if constexpr (has_native_reduce_scatter<Tr, T, Op>) {
      if (native) {  // reports (n - 1) blocks, the least any algorithm sends
        t.reduce_scatter_native(in.data(), out.data(), out.size(), op, ctx);
        sent = (t.size() - 1) * out.size() * sizeof(T);
        return;
      }
    }
    sent = rs_algo::run(t, in, out, op, ctx);
  });
  return sent;
}

/// The same over both levels of a group with levels.
template <transport::leveled Tr, class T, class Op>
std::size_t reduce_scatter_flat(Tr& t, std::span<const T> in, std::span<T> out, Op op,
                                const call_options& opt) {
  using Intra = typename Tr::intra_type;
  using Inter = typename Tr::inter_type;
  using direct = algo::reduce_scatter_direct;
  // A peer-memory node level combines each column straight from `in` (no gathering copy).
  constexpr bool node_direct = has_direct_collectives<Intra>;
  const std::string_view name = node_direct ? direct::name : rs_algo::name;
  const std::size_t m = out.size(), local = t.intra().size(), nodes = t.inter().size();
  const bool finite = kernels::can_be_non_finite_v<T> && opt.check_finite;
  std::size_t sent = 0;
  const std::uint16_t flags = finite ? call_header::finite_checked : 0;
  const frame_for<Tr> f(t, opt, {"reduce_scatter", name, dtype_of<T>::value, Op::id, m, {}},
                        {"reduce_scatter inside the node", "reduce_scatter across nodes"});
  const call_context &in_c = f.inside(), &out_c = f.across();
  f.run([&] {
    f.agree(name, flags);
    if (finite) f.check_finite(in.data(), in.size());
    // Column l is the blocks of global ranks q * local + l (node q), node-major: the
    // node's reduce-scatter leaves local rank l their node-wide sums, in pieces of the
    // blocks' elements, each piece's columns together. The ring needs each piece's
    // columns side by side (`column`). Kept across calls in the node transport's
    // workspace (as the two-level allgather's).
    T* const column = static_cast<T*>(t.intra().scratch().template get<level_scratch_across>(
        node_direct ? 0 : in.size() * sizeof(T)));
    T* const mine = static_cast<T*>(
        t.intra().scratch().template get<level_scratch_inside>(nodes * m * sizeof(T)));
    // op::avg: sums on both levels, one division by the whole group at the end.
    using level_op = std::conditional_t<std::is_same_v<Op, op::avg_t>, op::sum_t, Op>;
    const std::size_t pieces = algo::tuning::hierarchical_pieces(in.size_bytes(), t.pipelines());
    std::size_t sent_across = 0;
    std::optional<algo::detail::direct_call<Intra>> dc;
    std::uint64_t step = 0;
    if constexpr (node_direct) {
      dc.emplace(t.intra(), nullptr, 0, algo::detail::erase_op_for<T, level_op>(t.intra()), in_c);
      dc->open_header(f.header(name, flags), "reduce_scatter", nullptr, 0);
    }
    auto inside = [&](std::size_t i) {  // piece i's columns, reduced inside the node
      const algo::detail::range p = algo::detail::part(m, pieces, i);
      if constexpr (node_direct) {
        if (p.count == 0) return;
        // Element x of column l: node x / p.count's block, at x % p.count in the piece.
        const std::size_t pc = p.count;
        step = direct::staged(
            *dc, nodes * pc, pc,
            [&](std::size_t l, std::size_t x) {
              return reinterpret_cast<const std::byte*>(in.data() + ((x / pc) * local + l) * m +
                                                        p.offset + x % pc);
            },
            reinterpret_cast<std::byte*>(mine + nodes * p.offset), step,
            [](std::size_t, std::size_t) {});
        sent += (local - 1) * nodes * pc * sizeof(T);
        return;
      }
      T* const col = column + local * nodes * p.offset;
      for (std::size_t l = 0; l < local; ++l) {
        for (std::size_t q = 0; q < nodes; ++q) {
          if (p.count) {
            std::memcpy(col + (l * nodes + q) * p.count, in.data() + (q * local + l) * m + p.offset,
                        p.count * sizeof(T));
          }
        }
      }
      sent +=
          rs_algo::run(t.intra(), std::span<const T>(col, local * nodes * p.count),
                       std::span<T>(mine + nodes * p.offset, nodes * p.count), level_op{}, in_c);
    };
    auto across = [&](std::size_t i) {  // piece i's node sums, reduced across the nodes
      const algo::detail::range p = algo::detail::part(m, pieces, i);
      sent_across +=
          rs_algo::run(t.inter(), std::span<const T>(mine + nodes * p.offset, nodes * p.count),
                       out.subspan(p.offset, p.count), level_op{}, out_c);
    };
    if (pieces == 1) {
      inside(0);
      across(0);
    } else {  // piece i crosses the network while piece i + 1 is reduced in the node
      algo::detail::level_pipeline<Intra, Inter> pipe(t, across);
      for (std::size_t i = 0; i < pieces; ++i) {
        inside(i);
        t.set_node_wait(0);  // no longer held up inside the node (set by its waits)
        pipe.ready(i);
      }
      pipe.wait(pieces - 1);
    }
    if constexpr (node_direct) dc->close();
    sent += sent_across;
    t.intra().executor().finalize(out.data(), m, t.size(), op);
  });
  return sent;
}
}  // namespace detail

/// out := block rank() of the reduction of every rank's `in`, which holds size() blocks of
/// out.size() elements (block q for rank q; over levels, the global ranks). op::avg divides
/// by size(). Returns the bytes this rank sent. Host memory; T an element type.
template <class Tr, class TIn, class T, class Op>
requires std::is_same_v<std::remove_const_t<TIn>, T> std::size_t reduce_scatter(
    Tr& t, std::span<TIn> in, std::span<T> out, Op op, const call_options& opt = {}) {
  check_element_type<T>();
  check_op_for<T, Op>();
  detail::check_host_collective<Tr>();
  detail::check_blocks("reduce_scatter", "input", in.size(), "output", out.size(), t.size(),
                       t.rank());
  if (detail::in_place_block("reduce_scatter", "output", "input", out.data(), out.size_bytes(),
                             in.data(), in.size_bytes(), t.rank())) {
    // In place: this rank's block of `in` is one of the summands of `out`, which the
    // algorithms write while they still read it, so the result takes a detour through
    // the transport's workspace (no allocation once it has grown).
    workspace* ws = nullptr;
    if constexpr (transport::leveled<Tr>) {
      ws = &t.intra().scratch();
    } else {
      ws = &t.scratch();
    }
    const std::span<T> result(
        static_cast<T*>(ws->template get<detail::in_place_result>(out.size_bytes())), out.size());
    const std::size_t sent =
        detail::reduce_scatter_flat(t, std::span<const T>(in), result, op, opt);
    std::copy(result.begin(), result.end(), out.begin());
    return sent;
  }
  return detail::reduce_scatter_flat(t, std::span<const T>(in), out, op, opt);
}

/// out := block rank() of the reduction of every rank's `in`, in device memory, enqueued
/// on t's stream (returns without waiting; t.synchronize(deadline) waits). Tr: a device
/// transport with its own reduce_scatter (nccl: ncclReduceScatter; mpi_device:
/// MPI_Ireduce_scatter_block; cuda_ipc: a kernel).
template <class Tr, class TIn, class T, class Op>
requires std::is_same_v<std::remove_const_t<TIn>, T>
void reduce_scatter(Tr& t, device_span<TIn> in, device_span<T> out, Op op,
                    const call_options& opt = {}) {
  detail::check_device_collective<Tr>();
  static_assert(!device_transport<Tr> || detail::has_native_reduce_scatter<Tr, T, Op>,
                "gradsync::reduce_scatter on device memory needs a transport with its own "
                "reduce_scatter: transport::nccl, transport::mpi_device or transport::cuda_ipc");
  if constexpr (device_transport<Tr> && detail::has_native_reduce_scatter<Tr, T, Op>) {
    check_element_type<T>();
    check_op_for<T, Op>();
    detail::check_blocks("reduce_scatter", "input", in.size(), "output", out.size(), t.size(),
                         t.rank());
    // In place is each device transport's own (NCCL's rule; mpi_device stages through host
    // memory; cuda_ipc stages each chunk before it writes it); any other overlap would
    // overwrite input not yet read.
    (void)detail::in_place_block("reduce_scatter", "output", "input", out.data(), out.size_bytes(),
                                 in.data(), in.size_bytes(), t.rank());
    const detail::call_frame<Tr> f(t, opt,
                                   {"reduce_scatter",
                                    detail::native_collective_name,
                                    dtype_of<T>::value,
                                    Op::id,
                                    out.size(),
                                    {}},
                                   detail::on_device);
    const call_context& ctx = f.context();
    if (!out.empty()) {
      t.reduce_scatter_native(static_cast<const T*>(in.data()), out.data(), out.size(), op, ctx);
    }
  }
}

}  // namespace gradsync
