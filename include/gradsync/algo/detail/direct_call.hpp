// SPDX-License-Identifier: Apache-2.0
// The shared machinery of the direct algorithms (algo/direct.hpp): the call header
// round through the ranks' slots, chunk barriers on the stage flag, and the rank-order
// reduction loops every rank runs identically.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "gradsync/algo/concept.hpp"
#include "gradsync/algo/detail/erased_op.hpp"
#include "gradsync/algo/detail/host_loops.hpp"
#include "gradsync/algo/detail/partition.hpp"
#include "gradsync/algo/tuning.hpp"
#include "gradsync/check/call_frame.hpp"
#include "gradsync/check/consistency.hpp"
#include "gradsync/check/finite.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/kernels/finite.hpp"
#include "gradsync/kernels/host.hpp"
#include "gradsync/transport/concept.hpp"

namespace gradsync::algo {
namespace detail {

/// Flag numbers of peer_memory_transport used here (0 and 1 are the slot stamps).
inline constexpr unsigned flag_stage = 2;  // chunk steps of the current call
inline constexpr unsigned flag_done = 3;   // last direct call this rank finished reading

/// Elements combined per block: the destination block stays in L1 across all sources.
inline constexpr std::size_t direct_block_bytes = 16 << 10;

/// Calls at least this large write their results with non-temporal stores: the vector
/// cannot stay in cache anyway, and streaming stores skip the read-for-ownership of
/// every destination line (one third of the DRAM traffic of a copy).
inline constexpr std::size_t direct_stream_min_bytes = 8 << 20;

/// memcpy, optionally with non-temporal stores (x86 SSE2); call stream_fence() after.
inline void copy_out(void* dst, const void* src, std::size_t bytes, bool stream) {
#if defined(__SSE2__)
  if (stream && bytes >= 256) {
    auto* d = static_cast<char*>(dst);
    const auto* s = static_cast<const char*>(src);
    const std::size_t head = (16 - (reinterpret_cast<std::uintptr_t>(d) & 15)) & 15;
    std::memcpy(d, s, head);
    d += head;
    s += head;
    bytes -= head;
    std::size_t i = 0;
    for (; i + 64 <= bytes; i += 64) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
      const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
    }
    std::memcpy(d + i, s + i, bytes - i);
    return;
  }
#endif
  (void)stream;
  if (bytes) std::memcpy(dst, src, bytes);
}

/// Orders earlier non-temporal stores before what follows.
inline void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

/// dst = src(0) (+) src(1) (+) ... (+) src(n-1) for `count` elements of `elem` bytes,
/// combined in exactly this order by `loops`. `src(j)` returns rank j's copy; none of them
/// may overlap dst.
template <class Src>
void reduce_rank_order(std::byte* dst, Src&& src, std::size_t nsrc, std::size_t count,
                       std::size_t elem, const host_loops& loops) {
  const std::size_t blk = std::max<std::size_t>(1, direct_block_bytes / elem);
  for (std::size_t off = 0; off < count; off += blk) {
    const std::size_t len = std::min(blk, count - off), at = off * elem;
    if (nsrc == 1) {
      std::memcpy(dst + at, src(0) + at, len * elem);
      continue;
    }
    loops.reduce_to(dst + at, src(0) + at, src(1) + at, len);
    for (std::size_t j = 2; j < nsrc; ++j) loops.reduce_into(dst + at, src(j) + at, len);
  }
}

/// Throws errc::mismatch (with agree()'s wording, naming `what`) unless every header
/// equals rank 0's.
inline void compare_headers(const std::byte* const* hdr, std::size_t n, std::size_t rank,
                            std::uint64_t seq, std::string_view what = "allreduce") {
  bool same = true;
  for (std::size_t i = 1; i < n && same; ++i)
    same = std::memcmp(hdr[i], hdr[0], sizeof(call_header)) == 0;
  if (same) return;
  call_header ref, h;
  std::memcpy(&ref, hdr[0], sizeof ref);
  std::string diffs;
  std::size_t ndiff = 0;
  for (std::size_t i = 1; i < n; ++i) {
    std::memcpy(&h, hdr[i], sizeof h);
    const std::string field = gradsync::detail::first_difference(ref, h);
    if (field.empty() || ndiff++ >= 8) continue;
    diffs += "\n  rank " + std::to_string(i) + " differs from rank 0 in " + field +
             " [rank 0: " + gradsync::detail::describe(ref) + "; rank " + std::to_string(i) + ": " +
             gradsync::detail::describe(h) + "]";
  }
  throw error(errc::mismatch, {rank, error_site::npos, seq},
              "ranks called " + std::string(what) + " with different arguments (" +
                  std::to_string(ndiff) + " rank(s) differ from rank 0):" + diffs);
}

/// One direct call on one rank: the header round, chunk stages, and the final flag. It
/// works on bytes: counts are in elements of elem_ bytes, reduced by loops_ (erased_op.hpp).
template <class Tr>
class direct_call {
 public:
  /// The erased element type and op of a call over Tr.
  using op_type = erased_op<decltype(std::declval<const Tr&>().executor())>;

  /// A call that reduces `count` elements at `data` of the type and op `op` erased.
  direct_call(Tr& t, std::byte* data, std::size_t count, const op_type& op, const call_context& ctx)
      : t_(t),
        data_(data),
        count_(count),
        elem_(op.elem),
        type_(op.type),
        id_(op.id),
        loops_(op.host),
        ctx_(ctx),
        n_(t.size()),
        r_(t.rank()),
        parity_(static_cast<unsigned>(ctx.seq & 1)) {}
  /// A call that moves bytes and reduces nothing (broadcast, allgather).
  direct_call(Tr& t, const call_context& ctx) : direct_call(t, nullptr, 0, bytes_only(), ctx) {}

  std::size_t inline_capacity() const { return (t_.slot_bytes() - sizeof(call_header)) / elem_; }
  std::size_t half_elems() const { return t_.exchange_bytes() / 2 / elem_; }
  std::size_t third_stride() const { return t_.exchange_bytes() / 3 / 64 * 64; }
  std::size_t third_elems() const { return third_stride() / elem_; }
  std::byte* third(std::size_t rank, std::size_t chunk) {
    return t_.exchange(rank) + (chunk % 3) * third_stride();
  }
  std::byte* half(std::size_t rank, std::size_t chunk) {
    return t_.exchange(rank) + (chunk & 1) * (t_.exchange_bytes() / 2);
  }
  std::byte* payload_bytes(std::size_t rank) {
    return t_.slot(rank, parity_) + sizeof(call_header);
  }
  /// Bytes a rank can publish after its header in the header round.
  std::size_t inline_bytes() const { return t_.slot_bytes() - sizeof(call_header); }
  /// The `i`-th element from p (counts in elements, pointers in bytes).
  std::byte* at(std::byte* p, std::size_t i) const { return p + i * elem_; }
  const std::byte* at(const std::byte* p, std::size_t i) const { return p + i * elem_; }
  std::size_t bytes(std::size_t elems) const { return elems * elem_; }

  /// reduce_rank_order() of this call's element type and op.
  template <class Src>
  void reduce(std::byte* dst, Src&& src, std::size_t nsrc, std::size_t count) const {
    reduce_rank_order(dst, src, nsrc, count, elem_, *loops_);
  }

  /// The header round; with `with_payload` the whole input travels inline too, else
  /// `extra_bytes` of `extra` (if any) are published at the start of the payload.
  void open(std::string_view algo, bool with_payload, const void* extra = nullptr,
            std::size_t extra_bytes = 0) {
    const call_header h =
        gradsync::detail::header_of(ctx_.seq, {"allreduce", algo, type_, id_, count_, {}}, algo,
                                    check_finite() ? call_header::finite_checked : 0);
    if (with_payload) {
      open_header(h, "allreduce", data_, bytes(count_));
    } else {
      open_header(h, "allreduce", extra, extra_bytes);
    }
  }

  /// The header round with a header the caller built (`what` names the collective in a
  /// mismatch); `extra_bytes` (<= inline_bytes()) of `extra` are published after it.
  void open_header(const call_header& h, std::string_view what, const void* extra,
                   std::size_t extra_bytes) {
    const std::uint64_t stamp = ctx_.seq + 1;
    // Slot reuse: when the previous call was not a direct call, a peer may still be
    // reading this slot's last contents; wait for it to have finished that call.
    const std::uint64_t last = t_.flag(r_, parity_);
    if (last != 0 && t_.flag(r_, parity_ ^ 1u) != ctx_.seq)
      t_.wait_flags(flag_done, last, ctx_.until);
    // The stage flag holds the call's number in 32 bits (stage_value): every 2^32 calls
    // it starts low again, below this rank's last value, and peers comparing with >= would
    // pass this call's barriers at once. Lowered here, once every peer has closed this
    // rank's last direct call (none reads the flag then) and before this call's header, so
    // the header round orders it before any peer's barrier. Once per 2^32 calls.
    if (t_.flag(r_, flag_stage) > stage_value(0)) {
      t_.wait_flags(flag_done, t_.flag(r_, flag_done), ctx_.until);
      t_.post_flag(flag_stage, 0);
    }
    std::memcpy(t_.slot(r_, parity_), &h, sizeof h);
    if (extra_bytes) std::memcpy(payload_bytes(r_), extra, extra_bytes);  // extra may be null at 0
    t_.post_flag(parity_, stamp);
    t_.wait_flags(parity_, stamp, ctx_.until);
    const std::byte* stack_hdr[16];
    std::vector<const std::byte*> heap_hdr;
    const std::byte** hdr = stack_hdr;
    if (n_ > 16) {
      heap_hdr.resize(n_);
      hdr = heap_hdr.data();
    }
    for (std::size_t i = 0; i < n_; ++i) hdr[i] = t_.slot(i, parity_);
    try {
      compare_headers(hdr, n_, r_, ctx_.seq, what);
    } catch (...) {
      close();  // nobody reads the slots any more: let a later call reuse them
      throw;
    }
  }
  void close() { t_.post_flag(flag_done, ctx_.seq + 1); }

  /// Bytes of one staged piece of the direct collectives when `parts` pieces share a half
  /// of the staging buffer (at least 64 while parts <= 32: the buffer is >= 2 pages).
  std::size_t staged_piece_bytes(std::size_t parts = 1) const {
    return std::min(tuning::direct_collective_chunk_bytes,
                    t_.exchange_bytes() / 2 / parts / 64 * 64);
  }

  /// Ends a call whose peers read this rank's buffers in place: once every rank passed
  /// the barrier, none reads them any more.
  void close_in_place(bool stream) {
    if (stream) stream_fence();
    barrier(1);
    close();
  }

  /// Runs `f` (a check every rank makes once the headers agree); if it throws, the call
  /// closes first so that a later call can reuse the slots.
  template <class F>
  void after_open(F&& f) {
    try {
      f();
    } catch (...) {
      close();
      throw;
    }
  }

  /// Posts chunk step `step` (>= 1) of this call and waits until every rank has.
  /// Steps count from `step_base` (raised by rounds a call adds in front).
  void barrier(std::uint64_t step) {
    const std::uint64_t v = stage_value(step);
    t_.post_flag(flag_stage, v);
    t_.wait_flags(flag_stage, v, ctx_.until);
  }

  /// Whether this call checks its input for NaN and Inf itself (call_context::check_finite).
  bool check_finite() const { return loops_ && loops_->can_be_non_finite && ctx_.check_finite; }

  /// barrier(step), posted with a mark when this rank `found` a NaN or Inf in what it read
  /// before it; true when any rank did, the same answer on every rank: a marked flag
  /// stays as it is until every rank has left the call (the next call's header round
  /// waits for all), and an unmarked one can only grow to a later step's value.
  bool barrier_marked(std::uint64_t step, bool found) {
    const std::uint64_t v = stage_value(step);
    t_.post_flag(flag_stage, found ? v | found_mark : v);
    t_.wait_flags(flag_stage, v, ctx_.until);
    for (std::size_t j = 0; j < n_; ++j) {
      if (t_.flag(j, flag_stage) == (v | found_mark)) return true;
    }
    return false;
  }

  /// After barrier_marked() said true: every rank states its first NaN or Inf in
  /// [from, from + len) (element `first` of the input; ranks that found none there state
  /// none), the ranks agree, and every rank throws errc::non_finite naming the first such
  /// rank. `reduced`: how many elements before `first` the call has already reduced in place.
  [[noreturn]] void fail_non_finite(const std::byte* from, std::size_t len, std::size_t first,
                                    std::size_t reduced) {
    const std::size_t i = loops_->first_non_finite(from, len);
    const finite_finding mine = gradsync::detail::make_finding_named(
        0, first + i, i < len ? loops_->non_finite_name(at(from, i)) : nullptr, r_,
        describe_rank(t_, r_));
    const std::string left =
        reduced == 0 ? std::string(gradsync::detail::nothing_reduced)
                     : "no rank summed it, but the first " + std::to_string(reduced) +
                           " elements were already reduced in place, some only in part: "
                           "large direct calls check each chunk as they stage it";
    after_open([&] {
      gradsync::detail::call_frame<Tr>::share_finding(t_, mine, ctx_.until,
                                                      gradsync::detail::its_input, left);
    });
    // The marking rank reads its value again; only an input changed during the call
    // (another thread writing it) gets here.
    close();
    throw error(errc::non_finite, {r_, error_site::npos, ctx_.seq},
                "non-finite input: a rank found a NaN or Inf while staging its input but not "
                "when reading it again; was the buffer written during the call?");
  }

  /// For paths that read every rank's input before sharing a chunk: the whole input is
  /// checked first, with one marked barrier (it then counts as a step of its own).
  void check_finite_first() {
    if (!check_finite()) return;
    const bool bad = loops_->first_non_finite(data_, count_) < count_;
    if (barrier_marked(1, bad)) fail_non_finite(data_, count_, 0, 0);
    step_base += 1;
  }

  void finalize(std::byte* p, std::size_t len) const { loops_->finalize(p, len, n_); }

  Tr& t_;
  std::byte* data_;
  std::size_t count_;
  std::size_t elem_;
  dtype type_;
  reduce_op id_;
  const host_loops* loops_;  ///< null in a call that reduces nothing
  const call_context& ctx_;
  std::size_t n_, r_;
  unsigned parity_;
  std::uint64_t step_base = 0;

 private:
  /// The erased op of a call that reduces nothing: elements are bytes.
  static constexpr op_type bytes_only() {
    return {1, dtype::i8, reduce_op::sum, nullptr, nullptr, nullptr};
  }
  /// Steps stay below this bit; barrier_marked() sets it.
  static constexpr std::uint64_t found_mark = std::uint64_t{1} << 31;
  /// The call's number modulo 2^32 above the step: (seq + 1) << 32 itself would wrap to 0
  /// after 2^32 calls. open_header() lowers the flag when the number starts again.
  std::uint64_t stage_value(std::uint64_t step) const {
    return (((ctx_.seq + 1) & 0xffffffffu) << 32) | (step_base + step);
  }
};

template <class Tr>
constexpr void check_direct_transport() {
  static_assert(peer_memory_transport<Tr>,
                "gradsync: algo::direct_one_shot/direct_two_shot read the peers' memory and need "
                "a transport that exposes it (peer_memory_transport: transport::shm); use "
                "algo::ring or algo::auto_select with this transport");
  static_assert(Tr::memory == memory_space::host,
                "gradsync: algo::direct_* reduces with host loops; for device memory use the "
                "transport's own algorithms (algo::ring over nccl, or cuda_ipc's kernels)");
}

}  // namespace detail

}  // namespace gradsync::algo
