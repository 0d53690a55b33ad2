// SPDX-License-Identifier: Apache-2.0
// gradsync::allgather — every rank contributes `in` (the same length on every rank) and
// every rank receives all of them in rank order in `out` (n * in.size() elements). With
// the same guarantees as allreduce: a deadline on every wait, the call's arguments agreed
// across ranks before data moves (errc::mismatch naming the ranks), the same bytes on
// every rank. On shm each rank reads the others' blocks (algo::allgather_direct). Over
// levels (transport/levels.hpp) the blocks cross the network once per rank (its Inter
// group), then spread inside the node; across a network, in pieces whose spreading in the node
// overlaps the next piece's crossing.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "gradsync/algo/allgather_direct.hpp"
#include "gradsync/algo/allgather_ring.hpp"
#include "gradsync/algo/detail/level_pipeline.hpp"
#include "gradsync/algo/detail/partition.hpp"
#include "gradsync/algo/tuning.hpp"
#include "gradsync/allreduce.hpp"
#include "gradsync/check/call_frame.hpp"
#include "gradsync/core/call.hpp"
#include "gradsync/core/device_memory.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/detail/host_collective.hpp"
#include "gradsync/detail/native_collectives.hpp"
#include "gradsync/transport/concept.hpp"
#include "gradsync/transport/levels.hpp"

namespace gradsync {

namespace detail {
/// The allgather of bytes over one flat transport, its call numbered and checked: the
/// transport's native allgather where detail/native_collectives.hpp says so, the direct
/// one on a peer-memory transport, else the ring. Returns the bytes sent (native: (n - 1)
/// blocks, the least any algorithm sends).
template <transport_policy Tr>
std::size_t allgather_bytes(Tr& t, std::span<const std::byte> in, std::span<std::byte> out,
                            dtype type, const call_options& opt) {
  const bool native = use_native_collective(has_native_allgather<Tr>, out.size());
  const std::string_view name = has_direct_collectives<Tr> ? algo::allgather_direct::name
                                : native                   ? native_collective_name
                                                           : algo::allgather_ring::name;
  const std::size_t count = in.size() / dtype_size(type);
  const call_frame<Tr> f(t, opt, {"allgather", name, type, reduce_op::sum, count, {}});
  const call_context& ctx = f.context();
  std::size_t sent = 0;
  f.run([&] {
    const call_header h = f.header();
    if constexpr (has_direct_collectives<Tr>) {  // its header round is the agreement
      sent = algo::allgather_direct::run(t, in, out, h, ctx);
    } else {
      f.agree(h);
      bool done = false;
      if constexpr (has_native_allgather<Tr>) {
        if (native) {
          t.allgather_native(in.data(), out.data(), in.size(), ctx);
          sent = (t.size() - 1) * in.size();
          done = true;
        }
      }
      if (!done) sent = algo::allgather_ring::run(t, in, out, ctx);
    }
    f.verify(out.data(), out.size());  // every rank gathered the same bytes
  });
  return sent;
}

/// The allgather over both levels of a group with levels: across the nodes first (this local
/// index on every node), then the nodes' blocks inside the node, so each block crosses
/// the network once; across a network, in pieces of the blocks, each piece spread in the
/// node while the next one crosses. A peer-memory node level spreads the node's own
/// blocks while the first pieces cross.
template <transport::leveled Tr>
std::size_t allgather_bytes(Tr& t, std::span<const std::byte> in, std::span<std::byte> out,
                            dtype type, const call_options& opt) {
  using Intra = typename Tr::intra_type;
  using Inter = typename Tr::inter_type;
  using ring = algo::allgather_ring;
  using direct = algo::allgather_direct;
  // A peer-memory node level gathers all pieces in one direct call, each node's block
  // straight to its place in `out` (no ring messages, no reordering copy).
  constexpr bool node_direct = has_direct_collectives<Intra>;
  const std::string_view name = node_direct ? direct::name : ring::name;
  const std::size_t nodes = t.inter().size(), local = t.intra().size(), b = in.size();
  std::size_t sent = 0, sent_across = 0;
  const frame_for<Tr> f(t, opt, {"allgather", name, type, reduce_op::sum, b / dtype_size(type), {}},
                        {"allgather inside the node", "allgather across nodes"});
  const call_context &in_c = f.inside(), &out_c = f.across();
  f.run([&] {
    f.agree(name);
    // Kept across calls in the node transport's workspace (as the two-level
    // reduce_scatter's): fresh vectors cost a zeroing pass and page faults.
    auto* const across_buf =
        static_cast<std::byte*>(t.intra().scratch().template get<level_scratch_across>(nodes * b));
    // (The ring's gathered pieces; the direct node level writes `out` in place.)
    auto* const inside_buf =
        static_cast<std::byte*>(t.intra().scratch().template get<level_scratch_inside>(
            node_direct ? 0 : local * nodes * b));
    const std::size_t pieces = algo::tuning::hierarchical_pieces(out.size(), t.pipelines());
    // In pieces (across a network): every receive is posted with the first piece, so
    // that a peer's rendezvous is answered at once; the sends go `window` pieces at a
    // time (tuning::pieces_in_flight_for: MPI interleaves concurrent sends to a peer,
    // so pieces sent together arrive together); docs/collectives.md.
    constexpr std::size_t in_flight = algo::tuning::pieces_in_flight_for<Inter>();
    const std::size_t window = in_flight == 0 ? pieces : std::min(in_flight, pieces);
    const std::size_t me = t.inter().rank(), others = nodes - 1;
    std::vector<typename Inter::request> recvs, sends;
    auto post_sends = [&](std::size_t k) {
      const algo::detail::range p = algo::detail::part(b, pieces, k);
      if constexpr (!node_direct) {  // a direct node level spreads `in` itself (spread_home)
        std::memcpy(across_buf + nodes * p.offset + me * p.count, in.data() + p.offset, p.count);
      }
      for (std::size_t q = 0; q < nodes; ++q) {
        if (q != me) {
          sends.push_back(t.inter().isend(q, in.data() + p.offset, p.count, out_c.tag));
        }
      }
    };
    auto across = [&](std::size_t i) {  // piece i of this column's blocks, every node's
      const algo::detail::range p = algo::detail::part(b, pieces, i);
      if (pieces == 1) {
        sent_across +=
            ring::run(t.inter(), in.subspan(p.offset, p.count),
                      std::span<std::byte>(across_buf + nodes * p.offset, nodes * p.count), out_c);
        return;
      }
      if (i == 0) {
        recvs.reserve(pieces * others);
        sends.reserve(pieces * others);
        for (std::size_t k = 0; k < pieces; ++k) {
          const algo::detail::range pk = algo::detail::part(b, pieces, k);
          std::byte* const got = across_buf + nodes * pk.offset;  // node q's piece at q * count
          for (std::size_t q = 0; q < nodes; ++q) {
            if (q != me) {
              recvs.push_back(t.inter().irecv(q, got + q * pk.count, pk.count, out_c.tag));
            }
          }
        }
        for (std::size_t k = 0; k < window; ++k) post_sends(k);
      }
      for (std::size_t j = i * others; j < (i + 1) * others; ++j) {
        t.inter().wait(sends[j], out_c.until);
      }
      if (i + window < pieces) post_sends(i + window);
      for (std::size_t j = i * others; j < (i + 1) * others; ++j) {
        t.inter().wait(recvs[j], out_c.until);
      }
      sent_across += others * p.count;
    };
    std::optional<algo::detail::direct_call<Intra>> dc;
    std::uint64_t step = 0;
    const bool stream = out.size() >= algo::detail::direct_stream_min_bytes;
    if constexpr (node_direct) {
      dc.emplace(t.intra(), in_c);
      dc->open_header(f.header(direct::name), "allgather", nullptr, 0);
    }
    // A peer-memory node level spreads this node's own blocks while the network phase
    // runs (they need nothing from it), so only the other nodes' blocks follow it.
    auto spread_home = [&] {
      if constexpr (node_direct) {
        step = direct::staged(
            *dc, in, step,
            [&](std::size_t l, std::size_t x, const std::byte* src, std::size_t len) {
              algo::detail::copy_out(out.data() + (me * local + l) * b + x, src, len, stream);
            });
        sent += b;
      }
    };
    auto inside = [&](std::size_t i) {  // piece i of every column's blocks, in place
      const algo::detail::range p = algo::detail::part(b, pieces, i);
      if constexpr (node_direct) {
        auto spread = [&](std::size_t q0, std::size_t q1) {  // nodes [q0, q1) of piece i
          // Byte x of local rank l's part is byte x % p.count of node q0 + x / p.count's.
          auto place = [&](std::size_t l, std::size_t x, const std::byte* src, std::size_t len) {
            while (len) {
              const std::size_t q = q0 + x / p.count, at = x % p.count;
              const std::size_t take = std::min(len, p.count - at);
              algo::detail::copy_out(out.data() + (q * local + l) * b + p.offset + at, src, take,
                                     stream);
              x += take, src += take, len -= take;
            }
          };
          step =
              direct::staged(*dc,
                             std::span<const std::byte>(
                                 across_buf + nodes * p.offset + q0 * p.count, (q1 - q0) * p.count),
                             step, place);
          sent += (q1 - q0) * p.count;
        };
        spread(0, me);
        spread(me + 1, nodes);
        return;
      }
      std::byte* const got = inside_buf + local * nodes * p.offset;
      sent += ring::run(t.intra(),
                        std::span<const std::byte>(across_buf + nodes * p.offset, nodes * p.count),
                        std::span<std::byte>(got, local * nodes * p.count), in_c);
      // got[l][q] is piece i of the block of node q's local rank l (global q * local + l).
      for (std::size_t l = 0; l < local && p.count; ++l) {
        for (std::size_t q = 0; q < nodes; ++q) {
          std::memcpy(out.data() + (q * local + l) * b + p.offset, got + (l * nodes + q) * p.count,
                      p.count);
        }
      }
    };
    if (pieces == 1) {
      across(0);
      spread_home();
      inside(0);
    } else {  // piece i spreads in the node while piece i + 1 crosses the network
      algo::detail::level_pipeline<Intra, Inter> pipe(t, across);
      pipe.ready(pieces - 1);
      spread_home();
      for (std::size_t i = 0; i < pieces; ++i) {
        pipe.wait(i);
        inside(i);
        t.set_node_wait(0);  // no longer held up inside the node (set by its waits)
      }
    }
    if constexpr (node_direct) {
      if (stream) algo::detail::stream_fence();
      dc->close();
    }
    f.verify(out.data(), out.size());  // every rank gathered the same bytes
  });
  return sent + sent_across;
}
}  // namespace detail

/// out := every rank's `in`, rank r's at out[r * in.size()]. Returns the bytes this rank
/// sent. Host memory; T an element type.
template <class Tr, class T>
std::size_t allgather(Tr& t, std::span<const T> in, std::span<T> out,
                      const call_options& opt = {}) {
  check_element_type<T>();
  detail::check_host_collective<Tr>();
  detail::check_blocks("allgather", "output", out.size(), "input", in.size(), t.size(), t.rank());
  (void)detail::in_place_block("allgather", "input", "output", in.data(), in.size_bytes(),
                               out.data(), out.size_bytes(), t.rank());
  const auto bytes_in = std::as_bytes(in);
  const auto bytes_out = std::as_writable_bytes(out);
  constexpr dtype type = dtype_of<T>::value;
  return detail::allgather_bytes(t, bytes_in, bytes_out, type, opt);  // one level or more
}

/// out := every rank's `in`, in device memory, enqueued on t's stream (returns without
/// waiting; t.synchronize(deadline) waits). Tr: a device transport with its own allgather
/// (nccl: ncclAllGather; mpi_device: MPI_Iallgather; cuda_ipc: a kernel).
template <class Tr, class TIn, class T>
requires std::is_same_v<std::remove_const_t<TIn>, T>
void allgather(Tr& t, device_span<TIn> in, device_span<T> out, const call_options& opt = {}) {
  detail::check_device_collective<Tr>();
  static_assert(!device_transport<Tr> || detail::has_native_allgather<Tr>,
                "gradsync::allgather on device memory needs a transport with its own "
                "allgather: transport::nccl, transport::mpi_device or transport::cuda_ipc");
  if constexpr (device_transport<Tr> && detail::has_native_allgather<Tr>) {
    check_element_type<T>();
    detail::check_blocks("allgather", "output", out.size(), "input", in.size(), t.size(), t.rank());
    (void)detail::in_place_block("allgather", "input", "output", in.data(), in.size_bytes(),
                                 out.data(), out.size_bytes(), t.rank());
    const detail::call_frame<Tr> f(t, opt,
                                   {"allgather",
                                    detail::native_collective_name,
                                    dtype_of<T>::value,
                                    reduce_op::sum,
                                    in.size(),
                                    {}},
                                   detail::on_device);
    const call_context& ctx = f.context();
    if (!in.empty()) {
      t.allgather_native(reinterpret_cast<const std::byte*>(in.data()),
                         reinterpret_cast<std::byte*>(out.data()), in.size_bytes(), ctx);
    }
  }
}

}  // namespace gradsync
