// SPDX-License-Identifier: Apache-2.0
// traced_transport<Tr>: a transport that forwards to Tr and records what an algorithm
// does with it — every wait becomes a "send"/"recv" event on the timeline (the steps of
// the algorithm) and every reduction a "reduce" event — and counts the bytes this rank
// sends (the "bytes on the wire" statistic). The allreducer runs generic algorithms
// (those written against the transport concept alone) through it; algorithms that use
// a transport's own extras (peer access, a native allreduce) run on Tr directly.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "gradsync/algo/concept.hpp"
#include "gradsync/algo/tuning.hpp"
#include "gradsync/core/deadline.hpp"
#include "gradsync/core/stall.hpp"
#include "gradsync/core/workspace.hpp"
#include "gradsync/observe/timeline.hpp"
#include "gradsync/transport/concept.hpp"

namespace gradsync::observe {

/// True when algorithm A on transport Tr only uses the transport concept, so it can run
/// on a traced_transport (which hides Tr's extras): A declares itself generic
/// (its traits say `generic`, algo/concept.hpp).
template <class A, class Tr>
inline constexpr bool traces_steps_v =
    !A::traits.needs_peer_access && !A::traits.needs_native && traits_of<A, Tr>().generic;

/// An executor that times reductions and otherwise behaves as Ex (it derives from it).
template <class Ex>
struct timed_executor : Ex {
  timeline* tl = nullptr;
  track tr = track::progress;

  template <class T, class Op>
  void reduce_into(T* dst, const T* src, std::size_t n, Op op) const {
    if (!tl || !tl->enabled()) return Ex::reduce_into(dst, src, n, op);
    const auto t0 = std::chrono::steady_clock::now();
    Ex::reduce_into(dst, src, n, op);
    tl->complete("reduce", tr, t0, std::chrono::steady_clock::now(),
                 "\"elements\":" + std::to_string(n));
  }
};

template <transport_policy Tr>
class traced_transport {
 public:
  static constexpr std::string_view name = Tr::name;
  static constexpr memory_space memory = Tr::memory;
  static constexpr bool peer_access = false;       // extras are not forwarded
  static constexpr bool native_allreduce = false;  // (see traces_steps_v)
  /// The wrapped transport's pipeline segment, ring send lag and pieces in flight, so
  /// that tracing keeps the same steps; crosses_network() is forwarded (below).
  static constexpr transport_traits traits{
      .pipeline_segment_bytes = transport_traits_of<Tr>().pipeline_segment_bytes,
      .ring_send_lag = transport_traits_of<Tr>().ring_send_lag,
      .pieces_in_flight = transport_traits_of<Tr>().pieces_in_flight,
      .may_cross_network = true,
      .watches_stalls = true};

  /// A request of Tr plus what it was for.
  struct request {
    typename Tr::request inner;
    std::size_t peer = 0, bytes = 0;
    bool send = false;
  };

  traced_transport(Tr& t, timeline* tl, track tr) : t_(t), tl_(tl), tr_(tr) {}

  std::size_t rank() const { return t_.rank(); }
  std::size_t size() const { return t_.size(); }
  /// Forwarded too: across a network the algorithms keep more receives in flight.
  bool crosses_network() const { return gradsync::crosses_network(t_); }

  request isend(std::size_t peer, const void* data, std::size_t bytes, std::uint32_t tag) {
    sent_ += bytes;
    return {t_.isend(peer, data, bytes, tag), peer, bytes, true};
  }
  request irecv(std::size_t peer, void* data, std::size_t bytes, std::uint32_t tag) {
    return {t_.irecv(peer, data, bytes, tag), peer, bytes, false};
  }
  void wait(request& r, deadline d) {
    if (!tl_ || !tl_->enabled()) return t_.wait(r.inner, d);
    const auto t0 = std::chrono::steady_clock::now();
    t_.wait(r.inner, d);
    tl_->complete(r.send ? "send" : "recv", tr_, t0, std::chrono::steady_clock::now(),
                  "\"peer\":" + std::to_string(r.peer) + ",\"bytes\":" + std::to_string(r.bytes));
  }

  std::uint64_t next_seq() { return t_.next_seq(); }
  /// Forwarded: the stall watch belongs to the wrapped transport (core/stall.hpp).
  void enter_call(std::uint64_t seq, const call_note& note) {
    gradsync::detail::enter_call(t_, seq, note);
  }
  workspace& scratch() { return t_.scratch(); }
  auto executor() const {
    timed_executor<decltype(t_.executor())> ex{t_.executor()};
    ex.tl = tl_;
    ex.tr = tr_;
    return ex;
  }

  /// Bytes passed to isend since construction.
  std::size_t bytes_sent() const { return sent_; }

 private:
  Tr& t_;
  timeline* tl_;
  track tr_;
  std::size_t sent_ = 0;
};

}  // namespace gradsync::observe
