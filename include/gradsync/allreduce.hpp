// SPDX-License-Identifier: Apache-2.0
// The free-function entry points: allreduce<Algorithm>(transport, in, out, op) and the
// in-place allreduce<Algorithm>(transport, data, op).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "gradsync/algorithm/concept.hpp"
#include "gradsync/core/consistency.hpp"
#include "gradsync/core/deadline.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/core/verify.hpp"
#include "gradsync/transport/concept.hpp"

namespace gradsync {

/// In-place allreduce of `data` across the ranks of `t` with algorithm A. Every rank
/// ends with bitwise-identical contents. Throws gradsync::error (timeout, peer_lost,
/// mismatch, invalid_argument, transport) instead of hanging; with opt.verify the ranks
/// then compare hashes of their results (diverged if any differs).
template <class A, class Tr, class T, class Op>
void allreduce(Tr& t, std::span<T> data, Op op, const call_options& opt = {}) {
  check_composition<A, Tr, std::remove_const_t<T>, Op>();
  static_assert(!std::is_const_v<T>,
                "gradsync: the in-place allreduce writes its buffer; pass a std::span of "
                "non-const elements (or use the overload with a separate output span)");
  const std::uint64_t seq = t.next_seq();
  const call_context ctx{opt.make_deadline(), seq, data_tag(seq)};
  // Algorithms that compare call headers in their own first exchange (algo::direct_*)
  // declare `checks_headers = true` (or `checks_headers_on<Tr>`) and skip this round trip.
  constexpr bool checks_always = requires {
    requires A::checks_headers;
  };
  constexpr bool checks_on_tr = requires {
    requires A::template checks_headers_on<Tr>;
  };
  constexpr bool self_checked = checks_always || checks_on_tr;
  if (!self_checked && opt.check && t.size() > 1) {
    std::vector<call_header> table;
    agree(t, call_header::make(seq, data.size(), dtype_of<T>::value, Op::id, A::name), ctx.until,
          table);
  }
  A::run(t, data, op, ctx);
  if (opt.verify) verify_result(t, seq, data.data(), data.size_bytes(), ctx.until);
}

/// Out-of-place allreduce: `out` receives the reduction of every rank's `in`; `in` is
/// left untouched. The spans must have the same length and must not partly overlap.
template <class A, class Tr, class TIn, class T, class Op>
requires std::is_same_v<std::remove_const_t<TIn>, T>
void allreduce(Tr& t, std::span<TIn> in, std::span<T> out, Op op, const call_options& opt = {}) {
  check_composition<A, Tr, T, Op>();
  if (in.size() != out.size()) {
    throw error(errc::invalid_argument, {t.rank(), error_site::npos, ~std::uint64_t{0}},
                "input has " + std::to_string(in.size()) + " elements but output has " +
                    std::to_string(out.size()));
  }
  const auto* ib = reinterpret_cast<const std::byte*>(in.data());
  const auto* ob = reinterpret_cast<const std::byte*>(out.data());
  const std::size_t bytes = in.size_bytes();
  if (ib != ob && bytes && ib < ob + bytes && ob < ib + bytes) {
    throw error(errc::invalid_argument, {t.rank(), error_site::npos, ~std::uint64_t{0}},
                "input and output partly overlap; pass the same span for in-place or disjoint "
                "spans");
  }
  t.executor().copy(out.data(), in.data(), bytes);
  allreduce<A>(t, out, op, opt);
}

}  // namespace gradsync
