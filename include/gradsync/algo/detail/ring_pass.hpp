// SPDX-License-Identifier: Apache-2.0
// The two phases of a ring allreduce over one vector, for algo::ring and for
// algo::hierarchical (which runs the inter-node allreduce between them). Each step is
// cut into segments so that receiving segment j+1 overlaps reducing segment j, and a
// reduced segment is forwarded as soon as it is final.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "gradsync/algo/concept.hpp"
#include "gradsync/algo/detail/erased_op.hpp"
#include "gradsync/algo/detail/partition.hpp"
#include "gradsync/algo/tuning.hpp"
#include "gradsync/transport/concept.hpp"

namespace gradsync::algo::detail {

/// Names the ring's in-flight receive buffers in the workspace (every ring pass shares them).
struct ring_pass_scratch;

/// One ring pass over `data` (n = t.size() > 1 ranks). reduce_scatter() leaves this rank
/// holding chunk owned() reduced over all ranks; allgather() spreads every rank's owned
/// chunk; finish() completes the outstanding sends. It works on bytes (erased_op.hpp):
/// one instance per transport serves every element type and op.
template <transport_policy Tr>
class ring_pass {
 public:
  /// What Tr's executor() returns: the type erase_op_for gives ops for.
  using executor_t = decltype(std::declval<const Tr&>().executor());
  /// The pass over `data`, elements of T.
  template <class T>
  ring_pass(Tr& t, std::span<T> data, const call_context& ctx)
      : ring_pass(t, reinterpret_cast<std::byte*>(data.data()), data.size(), sizeof(T), ctx) {}

  /// The pass over `count` elements of `elem` bytes at `base`.
  ring_pass(Tr& t, std::byte* base, std::size_t count, std::size_t elem, const call_context& ctx)
      : t_(t),
        ctx_(ctx),
        n_(t.size()),
        r_(t.rank()),
        count_(count),
        elem_(elem),
        seg_(std::max<std::size_t>(1, tuning::segment_bytes_for<Tr>() / elem)),
        k_(tuning::inflight_segments(t, segments(part(count_, n_, 0).count, seg_),
                                     tuning::ring_inflight)),
        base_(base),
        buf_(
            static_cast<std::byte*>(t.scratch().template get<ring_pass_scratch>(k_ * seg_ * elem))),
        recvs_(k_) {}

  /// The chunk this rank holds reduced after reduce_scatter().
  range owned() const { return chunk(r_ + 1); }

  /// Reduce-scatter: at step s send chunk r-s, receive chunk r-s-1 and reduce it in with
  /// `op` (erase_op_for<T, Op>(t)). The owned chunk is finalized for `finalize_ranks`
  /// ranks (op::avg divides; 0: not at all) and, with `forward`, sent on at once as the
  /// allgather's first step.
  void reduce_scatter(const erased_op<executor_t>& op, std::size_t finalize_ranks, bool forward) {
    const executor_t ex = t_.executor();
    send_segments(sends_, chunk(r_));
    for (std::size_t s = 0; s + 1 < n_; ++s) {
      const range rc = chunk(r_ + 2 * n_ - s - 1);
      const std::size_t m = segments(rc.count, seg_);
      const bool last = s + 2 == n_;  // rc is then the chunk this rank owns
      auto len_of = [&](std::size_t j) { return std::min(seg_, rc.count - j * seg_); };
      for (std::size_t j = 0; j < std::min(k_, m); ++j) {
        recvs_[j] = t_.irecv(left(), at(buf_, j * seg_), len_of(j) * elem_, ctx_.tag);
      }
      for (std::size_t j = 0; j < m; ++j) {
        t_.wait(recvs_[j % k_], ctx_.until);
        std::byte* dst = at(base_, rc.offset + j * seg_);
        op.reduce_into(ex, dst, at(buf_, (j % k_) * seg_), len_of(j));
        if (last && finalize_ranks) op.finalize(ex, dst, len_of(j), finalize_ranks);
        if (j + k_ < m) {
          recvs_[j % k_] =
              t_.irecv(left(), at(buf_, (j % k_) * seg_), len_of(j + k_) * elem_, ctx_.tag);
        }
        if (!last || forward) {
          next_sends_.push_back(t_.isend(right(), dst, len_of(j) * elem_, ctx_.tag));
        }
        complete_lagging_send(j);
      }
      wait_all(sends_);
      std::swap(sends_, next_sends_);
    }
    forwarded_ = forward;
  }

  /// Allgather: at step s forward chunk r+1-s, receive chunk r-s in place.
  void allgather() {
    if (!forwarded_) send_segments(sends_, owned());
    for (std::size_t s = 0; s + 1 < n_; ++s) {
      const range rc = chunk(r_ + n_ - s);
      const std::size_t m = segments(rc.count, seg_);
      std::vector<req_t>& in = recvs_;
      in.clear();
      for (std::size_t j = 0; j < m; ++j) {
        const std::size_t len = std::min(seg_, rc.count - j * seg_);
        in.push_back(t_.irecv(left(), at(base_, rc.offset + j * seg_), len * elem_, ctx_.tag));
      }
      for (std::size_t j = 0; j < m; ++j) {
        t_.wait(in[j], ctx_.until);
        complete_lagging_send(j);
        if (s + 2 < n_) {
          const std::size_t len = std::min(seg_, rc.count - j * seg_);
          next_sends_.push_back(
              t_.isend(right(), at(base_, rc.offset + j * seg_), len * elem_, ctx_.tag));
        }
      }
      wait_all(sends_);
      std::swap(sends_, next_sends_);
      recvs_.resize(k_);
    }
  }

  /// Completes every send still in flight.
  void finish() { wait_all(sends_); }

 private:
  using req_t = typename Tr::request;
  std::byte* at(std::byte* p, std::size_t elems) const { return p + elems * elem_; }

  std::size_t left() const { return (r_ + n_ - 1) % n_; }
  std::size_t right() const { return (r_ + 1) % n_; }
  range chunk(std::size_t c) const { return part(count_, n_, c % n_); }
  void send_segments(std::vector<req_t>& out, range c) {
    for (std::size_t off = 0; off < c.count; off += seg_) {
      const std::size_t len = std::min(seg_, c.count - off);
      out.push_back(t_.isend(right(), at(base_, c.offset + off), len * elem_, ctx_.tag));
    }
  }
  // After segment j of a step has arrived, completes this step's send of segment
  // j + 1 - L (L = send_lag_for<Tr>(), 0: none): the right neighbour receives our
  // segments at the pace we receive our left's, so that send is done or nearly so.
  void complete_lagging_send(std::size_t j) {
    constexpr std::size_t L = tuning::send_lag_for<Tr>();
    if constexpr (L > 0) {
      if (j + 1 >= L && j + 1 - L < sends_.size()) t_.wait(sends_[j + 1 - L], ctx_.until);
    } else {
      (void)j;
    }
  }
  void wait_all(std::vector<req_t>& v) {
    for (auto& q : v) t_.wait(q, ctx_.until);
    v.clear();
  }

  Tr& t_;
  const call_context& ctx_;
  std::size_t n_, r_, count_, elem_, seg_;  // seg_: elements per segment
  std::size_t k_;  // receives in flight in the reduce-scatter (tuning::inflight_segments)
  std::byte* base_;
  std::byte* buf_;
  std::vector<req_t> sends_, next_sends_, recvs_;
  bool forwarded_ = false;
};

}  // namespace gradsync::algo::detail
