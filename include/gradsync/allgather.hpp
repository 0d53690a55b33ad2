// SPDX-License-Identifier: Apache-2.0
// gradsync::allgather — every rank contributes `in` (the same length on every rank) and
// every rank receives all of them in rank order in `out` (n * in.size() elements). With
// the same guarantees as allreduce: a deadline on every wait, the call's arguments agreed
// across ranks before data moves (errc::mismatch naming the ranks), the same bytes on
// every rank. Over a two_level the blocks cross the network once per rank (its Inter
// group), then spread inside the node.
#pragma once

#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "gradsync/algo/allgather_ring.hpp"
#include "gradsync/allreduce.hpp"
#include "gradsync/check/consistency.hpp"
#include "gradsync/core/call.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/detail/host_collective.hpp"
#include "gradsync/transport/concept.hpp"
#include "gradsync/transport/two_level.hpp"

namespace gradsync {

namespace detail {
/// The ring allgather of bytes over one flat transport, its call numbered and checked.
/// `rank_of` names ranks in errors (a two_level level's global ranks).
template <transport_policy Tr, class RankOf = same_rank>
std::size_t allgather_bytes(Tr& t, std::span<const std::byte> in, std::span<std::byte> out,
                            dtype type, const call_options& opt, RankOf rank_of = {}) {
  const call_context ctx = begin_call(t, opt,
                                      {"allgather",
                                       algo::allgather_ring::name,
                                       type,
                                       reduce_op::sum,
                                       in.size() / dtype_size(type),
                                       {}});
  std::size_t sent = 0;
  recorded(
      opt, ctx.seq,
      [&] {
        agree_if_checked(t, opt,
                         call_header::make(ctx.seq, in.size() / dtype_size(type), type,
                                           reduce_op::sum, algo::allgather_ring::name),
                         ctx.until, rank_of, "allgather");
        sent = algo::allgather_ring::run(t, in, out, ctx);
      },
      [&] { return describe_rank(t, t.rank()); });
  return sent;
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
  const auto bytes_in = std::as_bytes(in);
  const auto bytes_out = std::as_writable_bytes(out);
  constexpr dtype type = dtype_of<T>::value;
  if constexpr (transport::is_two_level_v<Tr>) {
    // Across nodes first (this local index on every node), then the nodes' blocks inside
    // the node: each block crosses the network once.
    auto& inter = t.inter();
    auto& intra = t.intra();
    const std::size_t nodes = inter.size(), local = intra.size(), b = bytes_in.size();
    std::vector<std::byte> across(nodes * b), inside(local * nodes * b);
    std::size_t sent =
        detail::allgather_bytes(inter, bytes_in, std::span<std::byte>(across), type, opt,
                                [&](std::size_t q) { return t.global_of_inter(q); });
    sent += detail::allgather_bytes(intra, std::span<const std::byte>(across),
                                    std::span<std::byte>(inside), type, opt,
                                    [&](std::size_t q) { return t.global_of_intra(q); });
    // inside[l][q] is the block of node q's local rank l, global rank q * local + l.
    for (std::size_t l = 0; l < local; ++l) {
      for (std::size_t q = 0; q < nodes; ++q) {
        if (b)
          std::memcpy(bytes_out.data() + (q * local + l) * b, inside.data() + (l * nodes + q) * b,
                      b);
      }
    }
    return sent;
  } else {
    return detail::allgather_bytes(t, bytes_in, bytes_out, type, opt);
  }
}

}  // namespace gradsync
