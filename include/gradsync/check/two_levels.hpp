// SPDX-License-Identifier: Apache-2.0
// A check over a transport::two_level, written once: it runs inside every node, then
// across the nodes, so that every rank ends with the same verdict at once. A node whose
// ranks disagreed among themselves still joins the cross-node round, marked poisoned,
// so that the other nodes fail now instead of waiting for it until their deadline; its
// own ranks then report their node's finding. The argument agreement and result
// verification of algo::hierarchical and the bucket-plan check use it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "gradsync/check/consistency.hpp"
#include "gradsync/check/verify.hpp"
#include "gradsync/core/function_ref.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/kernels/hash.hpp"
#include "gradsync/transport/two_level.hpp"

namespace gradsync::detail {

/// Runs `inside(rank_of)` on t.intra(), then `across(poisoned, rank_of)` on t.inter();
/// each throws gradsync::error with code `finding` when the ranks it sees disagree, and
/// `rank_of` maps a rank of its group to the global rank its message names. `poisoned`
/// tells `across` that this node already disagrees (it must still take part, and tell
/// the other nodes). This rank's node's finding is rethrown before anything `across`
/// throws; other errors (timeout, peer_lost) pass through.
template <class Intra, class Inter, class Inside, class Across>
void check_two_levels(transport::two_level<Intra, Inter>& t, errc finding, Inside&& inside,
                      Across&& across) {
  std::exception_ptr node_error;
  if (t.intra().size() > 1) {
    try {
      inside([&t](std::size_t q) { return t.global_of_intra(q); });
    } catch (const error& e) {
      if (e.code() != finding) throw;
      node_error = std::current_exception();
    }
  }
  if (t.inter().size() > 1) {
    try {
      across(node_error != nullptr, [&t](std::size_t q) { return t.global_of_inter(q); });
    } catch (...) {
      if (node_error) std::rethrow_exception(node_error);
      throw;
    }
  }
  if (node_error) std::rethrow_exception(node_error);
}

/// The algorithm field of a header from a node whose own ranks disagree.
inline constexpr std::string_view poisoned_name = "node-mismatch";

/// Agrees on one call over both levels (errc::mismatch on every rank at once): `in` and
/// `out` are the transports the call runs on inside the node and across it (t.intra() and
/// t.inter(), or wrappers of them), numbered in_seq and out_seq; make(seq, algo_name)
/// builds this rank's header; `collective` names the call in the messages.
template <class Intra, class Inter, class In, class Out>
void agree_two_levels(transport::two_level<Intra, Inter>& t, In& in, Out& out, std::uint64_t in_seq,
                      std::uint64_t out_seq, deadline until, std::string_view algo_name,
                      function_ref<call_header(std::uint64_t, std::string_view)> make,
                      std::string_view collective) {
  std::vector<call_header> table;
  check_two_levels(
      t, errc::mismatch,
      [&](auto rank_of) { agree(in, make(in_seq, algo_name), until, table, rank_of, collective); },
      [&](bool node_failed, auto rank_of) {
        try {
          agree(out, make(out_seq, node_failed ? poisoned_name : algo_name), until, table, rank_of,
                collective);
        } catch (const error& e) {
          if (e.code() != errc::mismatch) throw;
          for (const call_header& h : table) {
            if (h.algo_name() == poisoned_name) {
              throw error(errc::mismatch, {t.rank(), error_site::npos, in_seq},
                          "the ranks of another node called " + std::string(collective) +
                              " with different arguments among themselves (that node's ranks "
                              "name the difference); this node's ranks agree");
            }
          }
          throw;
        }
      });
}

/// call_options::verify over two levels: the ranks of each node compare hashes of their
/// `bytes` result bytes, then the ranks of each local index across nodes (equal in every
/// node and every column means equal everywhere); errc::diverged on every rank at once,
/// a node that disagrees poisoning the cross-node round. `in` / `out` and the seqs as in
/// agree_two_levels; `collective` names the call in the message.
template <class Intra, class Inter, class In, class Out>
void verify_two_levels(transport::two_level<Intra, Inter>& t, In& in, Out& out,
                       std::uint64_t in_seq, std::uint64_t out_seq, const void* data,
                       std::size_t bytes, deadline until, std::string_view collective) {
  result_record mine;
  mine.bytes = bytes;
  mine.hash = kernels::buffer_hash(data, bytes);
  const auto fail = [&](const std::string& what) {
    throw error(
        errc::diverged, {t.rank(), error_site::npos, in_seq},
        std::string(collective) + " results differ across ranks: " + what + divergence_hint());
  };
  check_two_levels(
      t, errc::diverged,
      [&](auto rank_of) {
        mine.seq = in_seq;
        const std::string d = describe_divergence(exchange_results(in, mine, until), rank_of);
        if (!d.empty()) fail("inside node " + std::to_string(t.inter().rank()) + ", " + d);
      },
      [&](bool node_failed, auto rank_of) {
        mine.seq = out_seq;
        mine.flags = node_failed ? result_record::poisoned : 0;
        const auto by_rank = exchange_results(out, mine, until);
        if (node_failed) return;  // this node's own finding is rethrown
        for (const result_record& x : by_rank) {
          if (x.flags & result_record::poisoned)
            fail(
                "the ranks of another node hold different results among themselves (that "
                "node's ranks name them); this node's ranks agree");
        }
        const std::string d = describe_divergence(by_rank, rank_of);
        if (!d.empty()) fail("across nodes, " + d);
      });
}

}  // namespace gradsync::detail
