// SPDX-License-Identifier: Apache-2.0
// What a compression policy is. For each element type it compresses it has a codec that
// moves one bucket through a `channel` the allreducer hands it: a *summable* encoding
// (a cast, int8 codes on a scale agreed first) calls the composition's allreduce on its
// codes; a *non-summable* one (top-k values and indices) calls allgather and sums the
// decoded contributions locally, in rank order. A codec may keep state for its bucket
// across steps (error-feedback residuals): the allreducer keeps one per bucket of the
// committed plan. The simplest codecs (casts) only say encode / decode, and run_codec
// below moves them; how a policy converts lives in its own file.
#pragma once

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>

#include "gradsync/core/dtype.hpp"
#include "gradsync/core/op.hpp"

namespace gradsync::compress {

/// A compression policy: a name, and either wire_t<T> (the element type a tensor of T is
/// reduced in; T itself where the policy leaves T alone) or compresses<T> (true for the
/// types its codec takes).
template <class C>
concept compression_policy = requires {
  { C::name } -> std::convertible_to<std::string_view>;  // for logs and stats
}
&&(
    requires {
      typename C::template wire_t<float>;  // float's wire type
      requires is_element_type_v<typename C::template wire_t<float>>;
      requires is_element_type_v<typename C::template wire_t<double>>;
    } ||
    requires {
      { C::template compresses<float> } -> std::convertible_to<bool>;
    });

/// True when C's codec takes tensors of T (other types travel as they are).
template <class C, class T>
inline constexpr bool compresses_v = [] {
  if constexpr (requires { C::template compresses<T>; }) {
    return static_cast<bool>(C::template compresses<T>);
  } else {
    return !std::same_as<typename C::template wire_t<T>, T>;
  }
}();

/// One tensor of a bucket, as a codec sees it: where it starts (elements from the bucket's
/// start), how many elements, and its matrix shape when registered with one ({0, 0}).
struct tensor_part {
  std::size_t offset = 0;
  std::size_t count = 0;
  std::size_t rows = 0;
  std::size_t cols = 0;
};

/// What the allreducer hands a codec's run() for one bucket (allreducer/bucket_runner.hpp
/// has the real one; tests may write their own):
template <class Ch>
concept channel = requires(Ch& ch, std::span<float> f, std::span<std::int8_t> q,
                           std::span<const std::byte> mine, std::span<std::byte> all,
                           std::size_t n) {
  { ch.ranks() } -> std::same_as<std::size_t>;  // ranks in the group
  { ch.rank() } -> std::same_as<std::size_t>;   // this rank
  ch.allreduce(f, op::max);  // through the composition's algorithm; counts the wire bytes
  ch.allreduce(q, op::sum);
  ch.allgather(mine, all);  // all: every rank's `mine` in rank order; counts the bytes
  { ch.scratch(n) } -> std::same_as<std::span<std::byte>>;  // valid until run() returns
  ch.timed("encode", [] {});  // runs the callable, on the timeline and in compress_seconds
  { ch.tensors() } -> std::convertible_to<std::span<const tensor_part>>;  // empty: unknown
  // true: overlapping a codec's passes with the wire pays (the group crosses a network)
  // and allreduce may be called from a helper thread, one call at a time
  // (compress/pieces.hpp)
  { ch.overlaps_wire() } -> std::same_as<bool>;
};

/// A codec without state keeps this.
struct no_state {};

/// The per-bucket state of a codec: its `state` type, or no_state.
template <class Codec>
struct state_trait {
  using type = no_state;
};
template <class Codec>
requires requires {
  typename Codec::state;
}
struct state_trait<Codec> {
  using type = typename Codec::state;
};
template <class Codec>
using state_of = typename state_trait<Codec>::type;

/// C's codec for a bucket of T reduced with Op, in either form:
///  - encode / decode (an elementwise summable encoding): encode(wire, x, count, ranks)
///    before the collective, an allreduce on wire_type with wire_op, decode(x, wire,
///    count) after; run_codec moves it;
///  - run(ch, x, st, residual): moves the bucket itself through the channel; when
///    `residual` is not null it first writes there x minus what this rank's x decodes to
///    (for error feedback). x holds the result on return, bitwise the same on every rank.
/// A residual never carries a NaN or Inf to the next step: where x (or what it encodes
/// to) is not finite, the codec writes 0 there (the step's sum is non-finite anyway, and
/// a step skipped by loss scaling then leaves no poison behind).
template <class C, class T, class Op>
concept codec_for = requires(typename C::template codec<T, Op>::wire_type* w, const T* x, T* y,
                             std::size_t n) {
  typename C::template codec<T, Op>::wire_op;  // the op on the wire
  requires is_element_type_v<typename C::template codec<T, Op>::wire_type>;
  C::template codec<T, Op>::encode(w, x, n, n);  // x -> wire (ranks: n)
  C::template codec<T, Op>::decode(y, w, n);     // wire -> x
}
|| requires {
  typename C::template codec<T, Op>::runs_itself;
};

/// Moves one bucket `x` through `ch` with C's codec for (T, Op): the codec's own run(),
/// or for an encode / decode codec: encode into scratch, allreduce, decode.
template <class C, class T, class Op, class Ch>
void run_codec(Ch& ch, std::span<T> x, state_of<typename C::template codec<T, Op>>& st,
               T* residual) {
  using codec = typename C::template codec<T, Op>;
  if constexpr (requires { typename codec::runs_itself; }) {
    codec::run(ch, x, st, residual);
  } else {
    using W = typename codec::wire_type;
    const std::span<std::byte> buf = ch.scratch(x.size() * sizeof(W));
    const std::span<W> w(reinterpret_cast<W*>(buf.data()), x.size());
    const std::size_t n = ch.ranks();
    ch.timed("compress", [&] { codec::encode(w.data(), x.data(), x.size(), n); });
    if (residual) {
      // What this rank's x decodes to: Wire(x / n) * n for avg (which divides first).
      const T scale = Op::id == reduce_op::avg ? static_cast<T>(n) : T(1);
      ch.timed("residual", [&] {
        for (std::size_t i = 0; i < x.size(); ++i) {
          T back;
          codec::decode(&back, &w[i], 1);
          const T lost = x[i] - back * scale;
          residual[i] = std::isfinite(lost) ? lost : T(0);  // a NaN would stay for good
        }
      });
    }
    ch.allreduce(w, typename codec::wire_op{});
    ch.timed("decompress", [&] { codec::decode(x.data(), w.data(), x.size()); });
  }
}

}  // namespace gradsync::compress
