// SPDX-License-Identifier: Apache-2.0
// transport::mpi — host memory over MPI point-to-point, the path across hosts. Works
// with Open MPI and MPICH. Include this header explicitly (it needs <mpi.h>); the
// umbrella gradsync.hpp stays MPI-free.
//
//   MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
//   gradsync::transport::mpi t{MPI_COMM_WORLD};          // collective: every rank
//   gradsync::allreduce<gradsync::algo::ring>(t, std::span<float>(grad), gradsync::op::avg);
//
// The communicator handed in is duplicated (its own context), so library messages
// never match the user's. Every wait polls with MPI_Test under a deadline (see
// mpi_poll.hpp): a rank that never calls raises errc::timeout instead of a hang.
//
// Sends of 16 KiB to 2 MiB to a rank on the same host go out from a copy in huge-page
// memory the transport keeps (mpi_stage.hpp; mpi_options::stage_limit_bytes, 0 turns it
// off): on one host the MPI has the receiver copy them with process_vm_readv, which pins
// the sender's pages, and from huge pages that read runs 3-4x faster. As with any send,
// keep the buffer unchanged until wait() returns (unstaged sends read it until then).
//
// Across hosts (crosses_network(), found at construction: mpi/node.hpp) the
// ring and halving_doubling keep every receive of a step in flight, and errors name the
// job's ranks (MPI_COMM_WORLD) and their hosts (docs/cluster.md).
//
// Like MPI_Comm_free, destroying a transport is collective in spirit: destroy it once
// every rank's last call on it has returned. After a timeout a late peer may still
// send; if the transport is gone by then, Open MPI may deliver that message into the
// next communicator that reuses the context id. Keep such a transport alive (or end
// the job) rather than destroy it early.
//
// MPI errors come back as errc::transport (MPI_ERRORS_RETURN is set on the duplicate).
// One exception: MPICH 4.0 raises errors found when a request completes (e.g. a peer
// sending more bytes than posted) on MPI_COMM_WORLD, whose default handler aborts the
// job; Open MPI raises them here and they become errc::mismatch. The consistency check
// (call_options::check, on by default) stops such calls before any data moves.
#pragma once

#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gradsync/core/call.hpp"
#include "gradsync/core/abort.hpp"
#include "gradsync/core/deadline.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/core/log.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/core/workspace.hpp"
#include "gradsync/kernels/host.hpp"
#include "gradsync/transport/allgather.hpp"
#include "gradsync/transport/concept.hpp"
#include "gradsync/transport/mpi/node.hpp"
#include "gradsync/transport/mpi/poll.hpp"
#include "gradsync/transport/mpi/sigpipe.hpp"
#include "gradsync/transport/mpi/stall.hpp"
#include "gradsync/transport/mpi/stage.hpp"
#include "gradsync/transport/mpi/types.hpp"
#include "gradsync/transport/split.hpp"

namespace gradsync::transport {

/// Whether a transport::mpi crosses a network (mpi_options::network).
enum class network_hint : std::uint8_t {
  detect,  ///< yes when the ranks do not all share memory (MPI_COMM_TYPE_SHARED)
  yes,     ///< tune for a network whatever the placement (tests on one host)
  no,      ///< tune for one host
};

/// Options of transport::mpi. Must be the same on every rank of the communicator.
struct mpi_options {
  /// Largest single MPI message (MPI counts are int). Longer sends and receives are
  /// split into pieces of this size, and algo::native reduces in chunks of this many
  /// bytes. Tests lower it to run the split path without 2 GiB buffers.
  std::size_t max_message_bytes = static_cast<std::size_t>(INT_MAX);
  /// Huge-page memory this transport may keep for staging its large sends
  /// (mpi_stage.hpp): a send of stage_min_bytes..2 MiB is copied there first, so that
  /// a receiver on the same host reads it 3-4x faster. 0 sends everything from the
  /// caller's memory. Ranks may differ.
  std::size_t stage_limit_bytes = std::size_t{64} << 20;
  /// Smallest send that is staged: below it MPICH/UCX sends eagerly and the copy only
  /// costs (docs/perf/tuning.md, "transport::mpi constants").
  std::size_t stage_min_bytes = std::size_t{16} << 10;
  /// Whether the ranks span hosts: the algorithms then keep every receive of a step in
  /// flight (algo::tuning::inflight_segments). Detected at construction by default.
  network_hint network = network_hint::detect;
  /// When SIGPIPE is at its default action, the constructor sets it to ignored, so that a
  /// peer dying mid-send fails this rank's call instead of killing the process without a
  /// word (transport/mpi/sigpipe.hpp). false leaves the process's signal actions alone.
  bool ignore_sigpipe = true;
};

namespace detail {
/// One under Open MPI, which interleaves concurrent sends to a peer (2 x 2 ranks, 1 Gbit/s,
/// 64 MiB: 317 -> 286 ms); all under MPICH over UCX, where overlapping the node phase with
/// UCX's progress cost more than it saved on the simulated hosts' shared cores
/// (docs/collectives.md, "two-level allgather").
#if defined(OPEN_MPI) && OPEN_MPI
inline constexpr std::size_t mpi_pieces_in_flight = 1;
#else
inline constexpr std::size_t mpi_pieces_in_flight = 0;
#endif
}  // namespace detail

class mpi {
 public:
  static constexpr std::string_view name = "mpi";
  static constexpr memory_space memory = memory_space::host;
  static constexpr bool peer_access = false;
  static constexpr bool native_allreduce = true;
  /// Pipeline segment of ring and halving_doubling (algo::tuning::segment_bytes_for).
  /// Every MPI message above the eager limit pays a rendezvous handshake and a
  /// completion message, and on one host the MPI copies it in the receiver's MPI_Test
  /// (Open MPI's and MPICH's CMA path), so a smaller segment buys no overlap
  /// (docs/perf/tuning.md, "transport::mpi constants").
  static constexpr std::size_t pipeline_segment_bytes = std::size_t{1} << 20;
  /// The ring completes each send one segment after the matching receive instead of at
  /// the end of the step (algo::tuning::send_lag_for), so a staged send's huge-page block
  /// is reused while hot (docs/perf/tuning.md, "transport::mpi constants").
  static constexpr std::size_t ring_send_lag = 1;
  /// Pieces of a pipelined two-level allgather sent to a peer at once (0: all;
  /// algo::tuning::pieces_in_flight_for): see detail::mpi_pieces_in_flight.
  static constexpr std::size_t pieces_in_flight = detail::mpi_pieces_in_flight;

  /// A posted send or receive: one MPI request per piece of at most max_message_bytes.
  /// Destroying an unfinished one cancels it (receives reliably; sends as far as the MPI
  /// allows) and never blocks.
  class request {
   public:
    request() = default;
    request(request&& o) noexcept { take(o); }
    request& operator=(request&& o) noexcept {
      if (this != &o) {
        cancel();
        take(o);
      }
      return *this;
    }
    request(const request&) = delete;
    request& operator=(const request&) = delete;
    ~request() { cancel(); }

    /// True while some piece has not been waited for.
    bool active() const { return next_ < parts_; }
    /// Number of MPI messages this send or receive was split into.
    std::size_t parts() const { return parts_; }

   private:
    friend class mpi;
    MPI_Request& part(std::size_t i) { return i == 0 ? first_ : more_[i - 1]; }
    std::size_t piece_bytes(std::size_t i) const { return std::min(piece_, bytes_ - i * piece_); }
    void reset() noexcept {
      first_ = MPI_REQUEST_NULL;
      more_.clear();
      parts_ = next_ = 0;
    }
    void take(request& o) noexcept {
      pool_ = std::move(o.pool_);
      stage_ = std::exchange(o.stage_, {});
      first_ = std::exchange(o.first_, MPI_REQUEST_NULL);
      more_ = std::move(o.more_);
      parts_ = std::exchange(o.parts_, 0);
      next_ = std::exchange(o.next_, 0);
      bytes_ = o.bytes_;
      piece_ = o.piece_;
      peer_ = o.peer_;
      tag_ = o.tag_;
      is_send_ = o.is_send_;
      o.more_.clear();
    }
    void cancel() noexcept {
      bool settled = true;  // MPI no longer reads or writes the buffer
      if (parts_ && detail::mpi_usable()) {
        for (std::size_t i = next_; i < parts_; ++i) settled = cancel_one(part(i)) && settled;
      }
      drop_stage(settled);
      reset();
    }
    // Hands the staging block back: for reuse once the send is over, for good when MPI
    // may still read it.
    void drop_stage(bool settled) noexcept {
      if (stage_.ptr) settled ? pool_->release(stage_) : pool_->abandon(stage_);
      stage_ = {};
      pool_.reset();
    }
    // A cancelled receive completes at once, and a matched one as soon as its data is in;
    // poll it a while so MPI stops writing into the caller's buffer before we return.
    // A send nobody receives never completes (Open MPI cannot cancel sends), so after a
    // few polls it is handed to MPI_Request_free, which completes it in the background
    // (false: MPI may still read the buffer).
    bool cancel_one(MPI_Request& q) const noexcept {
      if (q == MPI_REQUEST_NULL) return true;
      MPI_Cancel(&q);
      const auto until =
          clock::now() + (is_send_ ? std::chrono::milliseconds(1) : std::chrono::milliseconds(200));
      int done = 0;
      while (!done && MPI_Test(&q, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done &&
             clock::now() < until) {
        sched_yield();
      }
      if (!done && q != MPI_REQUEST_NULL) {
        MPI_Request_free(&q);
        return false;
      }
      return true;
    }

    MPI_Request first_ = MPI_REQUEST_NULL;
    std::vector<MPI_Request> more_;  // pieces 1.. of a message over max_message_bytes
    std::size_t parts_ = 0, next_ = 0, bytes_ = 0, piece_ = 1, peer_ = 0;
    std::uint32_t tag_ = 0;
    bool is_send_ = false;
    std::shared_ptr<detail::mpi_stage_pool> pool_;  // set while stage_ holds a block
    detail::mpi_stage_pool::block stage_;           // the huge-page copy a send goes from
  };

  /// Collective over `comm`: duplicates it (MPI_Comm_idup, polled with the default
  /// deadline) and sets MPI_ERRORS_RETURN on the duplicate.
  explicit mpi(MPI_Comm comm, mpi_options opt = {}) : opt_(opt) {
    check_usable_and_options(comm);
    if (opt_.ignore_sigpipe) detail::ignore_default_sigpipe();
    // MPI fills the new handle in when the idup completes: give it storage that outlives
    // a timed-out constructor (a collective cannot be cancelled, so that one is leaked).
    auto slot = std::make_unique<MPI_Comm>(MPI_COMM_NULL);
    MPI_Request req = MPI_REQUEST_NULL;
    detail::check_mpi(MPI_Comm_idup(comm, slot.get(), &req), "MPI_Comm_idup", {});
    const int rc = detail::poll_collective(
        req, deadline::after(default_timeout()), [&] { (void)slot.release(); }, {},
        "MPI_Comm_idup (every rank of the communicator constructs transport::mpi)");
    detail::check_mpi(rc, "MPI_Comm_idup", {});
    comm_ = *slot;
    adopt();
  }

  mpi(const mpi&) = delete;
  mpi& operator=(const mpi&) = delete;
  mpi(mpi&& o) noexcept : stall_(seconds_d{0}), abort_(nullptr) { swap(o); }
  mpi& operator=(mpi&& o) noexcept {
    if (this != &o) {
      release();
      swap(o);
    }
    return *this;
  }
  ~mpi() { release(); }

  std::size_t rank() const { return rank_; }
  std::size_t size() const { return size_; }
  /// The transport's own communicator (the duplicate), e.g. for a user's MPI_Barrier.
  MPI_Comm comm() const { return comm_; }
  const mpi_options& options() const { return opt_; }
  /// True when this transport's ranks are on more than one host (mpi_options::network).
  bool crosses_network() const { return network_; }
  /// True when `peer` shares memory with this rank (MPI_COMM_TYPE_SHARED).
  bool same_host(std::size_t peer) const { return peer < size_ && host_[peer] == host_[rank_]; }
  /// Rank q as messages name it: its rank in MPI_COMM_WORLD and its host ("rank 5 on
  /// node-b"), also in a sub-group.
  std::string describe_rank(std::size_t q) const {
    if (q >= size_ || world_.size() != size_) return "rank " + std::to_string(q);
    return "rank " + std::to_string(world_[q]) + " on " + names_[q];
  }

  request isend(std::size_t peer, const void* data, std::size_t bytes, std::uint32_t tag) {
    return post(true, peer, const_cast<void*>(data), bytes, tag);
  }
  request irecv(std::size_t peer, void* data, std::size_t bytes, std::uint32_t tag) {
    return post(false, peer, data, bytes, tag);
  }

 private:
  // What mpi_poll runs between polls: the stall inspector (mpi/stall.hpp).
  auto stall_poll() {
    return [this](std::chrono::steady_clock::time_point now) {
      return stall_.poll(now, comm_, rank_, world_.size() == size_ ? world_[rank_] : rank_,
                         [this](std::size_t q) { return describe_rank(q); });
    };
  }
  // The error for a wait ended by a peer's failure notice (announce_failure).
  [[noreturn]] void peer_failed() const {
    const std::size_t from = stall_.notice_from();
    throw error(errc::peer_lost, site(from),
                describe_rank(from) + " failed and told this rank why: " + stall_.notice());
  }
  // Ends a failed wait: the peer may still send its part later (see release).
  void give_up(request& r) noexcept {
    clean_ = false;
    r.cancel();
  }
  // At a timeout, the peers that do not answer the stall inspector's query within half
  // a second: the rank waited on may be alive and itself waiting for a lost one (when it
  // says so, its relayed notice is awaited until 0.9 s after the query: callers prefer it).
  std::string silent_peers() {
    return stall_.silent_peers(comm_, rank_, std::chrono::milliseconds(500),
                               [this](std::size_t q) { return describe_rank(q); });
  }
  // A native collective's error site; refuses the call once one is stuck inside MPI.
  error_site native_site(const call_context& ctx) const {
    error_site where{rank_, error_site::npos, ctx.seq};
    if (native_stuck_) {
      throw error(errc::transport, where,
                  "an earlier native collective on this transport timed out and is still "
                  "pending inside MPI, so later collectives would pair up wrongly; create a "
                  "new transport::mpi");
    }
    return where;
  }
  // A count for one MPI call, or invalid_argument when it exceeds int.
  static int one_call_count(std::size_t count, const char* call, const error_site& where) {
    if (count > static_cast<std::size_t>(INT_MAX)) {
      throw error(errc::invalid_argument, where,
                  std::string(call) + " of " + std::to_string(count) +
                      " elements exceeds one MPI call's int count");
    }
    return static_cast<int>(count);
  }
  // Polls one native collective (`call` of `what`) until `until`. MPI forbids cancelling
  // or freeing a nonblocking collective: a timed-out one is kept until it completes (if
  // the late ranks ever join) and further native calls are refused.
  void native_wait(MPI_Request& req, std::size_t bytes, const char* call, const std::string& what,
                   const error_site& where, deadline until) {
    MPI_Status st;
    const int rc =
        detail::mpi_poll(req, st, until, bytes >= detail::mpi_bulk_bytes, &abort_, stall_poll());
    if (rc == detail::mpi_poll_timed_out || rc == detail::mpi_poll_aborted ||
        rc == detail::mpi_poll_peer_failed) {
      abandoned_.push_back(req);
      native_stuck_ = true;
      clean_ = false;
      if (rc == detail::mpi_poll_aborted) {
        abort_switch::throw_aborted(where, std::string("while this rank waited in ") + call);
      }
      if (rc == detail::mpi_poll_peer_failed) peer_failed();
      const std::string silent = silent_peers();
      if (stall_.notice_from() != detail::mpi_stall::no_notice) peer_failed();
      throw error(errc::timeout, where,
                  "deadline passed in " + std::string(call) + " of " + what +
                      " (some rank did not join; set GRADSYNC_TIMEOUT or "
                      "call_options::timeout to wait longer)" +
                      silent);
    }
    detail::check_mpi(rc, call, where);
  }

 public:
  /// Completes every piece of `r` or throws: errc::timeout past `d`, errc::mismatch when
  /// the peer sent a different number of bytes, errc::transport for any other MPI error.
  void wait(request& r, deadline d) {
    if (abort_.raised()) aborted(r, "before this rank could ");
    if (stall_.notice_from() != detail::mpi_stall::no_notice) {
      give_up(r);
      peer_failed();
    }
    while (r.next_ < r.parts_) {
      MPI_Request& q = r.part(r.next_);
      MPI_Status st;
      const int rc = detail::mpi_poll(q, st, d, r.piece_bytes(r.next_) >= detail::mpi_bulk_bytes,
                                      &abort_, stall_poll());
      if (rc == detail::mpi_poll_aborted) aborted(r, "while this rank waited to ");
      if (rc == detail::mpi_poll_peer_failed) {
        give_up(r);
        peer_failed();
      }
      if (rc == detail::mpi_poll_timed_out) {
        const std::size_t peer = r.peer_, bytes = r.bytes_;
        const std::uint32_t tag = r.tag_;
        const bool send = r.is_send_;
        give_up(r);
        const std::string silent = silent_peers();
        if (stall_.notice_from() != detail::mpi_stall::no_notice) peer_failed();
        throw error(errc::timeout, site(peer),
                    std::string("deadline passed while waiting to ") +
                        (send ? "send " : "receive ") + std::to_string(bytes) + " bytes " +
                        (send ? "to" : "from") + " the peer (tag " + std::to_string(tag) +
                        "; set GRADSYNC_TIMEOUT or call_options::timeout to wait longer)" + silent);
      }
      if (rc != MPI_SUCCESS) fail(r, rc);
      if (!r.is_send_) {
        int got = 0;
        MPI_Get_count(&st, MPI_BYTE, &got);
        if (static_cast<std::size_t>(got) != r.piece_bytes(r.next_)) {
          const std::size_t peer = r.peer_, bytes = r.bytes_;
          const std::size_t sent = r.next_ * r.piece_ + static_cast<std::size_t>(got);
          give_up(r);
          throw error(errc::mismatch, site(peer),
                      "message size differs: this rank expected " + std::to_string(bytes) +
                          " bytes, the peer sent " + std::to_string(sent));
        }
      }
      ++r.next_;
    }
    r.drop_stage(true);
    r.reset();
  }

  /// Tells every peer that this rank failed, and why (transport::two_level relays a
  /// failure of its other level this way): their waits on this transport end at once
  /// with errc::peer_lost quoting `cause`. Nonblocking; once per transport.
  void announce_failure(const char* cause) noexcept { stall_.announce(comm_, rank_, cause); }
  /// Called from this rank's waits on another level of a two_level, for job rank
  /// `blocked_on - 1` (0: none): answers the peers' stall queries, saying so, and returns
  /// a peer's failure notice if one has arrived (as failure_notice()), else "".
  std::string serve_peers(std::uint64_t blocked_on) {
    if (comm_ == MPI_COMM_NULL) return {};
    if (!stall_.serve(std::chrono::steady_clock::now(), comm_, blocked_on)) return {};
    return failure_notice();
  }
  /// A peer's failure notice that has arrived ("rank 2 on node-b failed and told this rank
  /// why: ..."), or "" (two_level prefers it to a timeout of its other level).
  std::string failure_notice() {
    if (comm_ == MPI_COMM_NULL || !stall_.take_notice(comm_)) return {};
    return describe_rank(stall_.notice_from()) +
           " failed and told this rank why: " + stall_.notice();
  }

  /// This rank enters call `seq` (the entry points call it; core/stall.hpp).
  void enter_call(std::uint64_t seq, const call_note& note) { stall_.watch().enter(seq, note); }

  /// Makes this rank's wait in flight and every later one fail with errc::aborted within
  /// ~1 ms (core/abort.hpp); its peers then time out, or the job is ended
  /// (transport::abort_job). Thread-safe and async-signal-safe.
  void abort() noexcept { abort_.raise(); }

  /// False once a wait has failed or the stall board has talked: this transport then
  /// leaves its communicator allocated when destroyed (see release).
  bool frees_communicator() const { return clean_ && !stall_.had_traffic(); }

  std::uint64_t next_seq() { return seq_++; }
  std::uint64_t last_seq() const { return seq_ - 1; }
  workspace& scratch() { return scratch_; }
  kernels::host_executor executor() const { return {}; }

  /// The ranks that pass the same `color` (>= 0) form a new transport, ordered by `key`
  /// then by rank here (collective over this transport's ranks). Every rank's arguments
  /// go round first in this transport's own messages, so a rank that does not call makes
  /// the others fail by `d` naming it; MPI_Comm_split (blocking) runs once all are in.
  mpi split(int color, int key, deadline d = deadline::after(default_timeout())) {
    if (color < 0) {
      throw error(errc::invalid_argument, site(error_site::npos),
                  "split color must be >= 0 (every rank joins exactly one group)");
    }
    std::vector<detail::split_entry> all;  // all[q]: rank q's colour and key
    gradsync::detail::allgather_pod(*this, detail::split_entry{color, key}, all,
                                    data_tag(next_seq()), d);
    // The new group's places follow from this one's (no exchange in the new group).
    const std::vector<std::size_t> members = detail::split_members(all, color);
    std::vector<detail::rank_place> places(members.size());
    for (std::size_t k = 0; k < members.size(); ++k) {
      const std::size_t q = members[k];
      std::size_t lead = 0;
      while (host_[members[lead]] != host_[q]) ++lead;
      places[k] = {static_cast<int>(world_[q]), static_cast<int>(lead), names_[q]};
    }
    MPI_Comm c = MPI_COMM_NULL;
    detail::check_mpi(MPI_Comm_split(comm_, color, key, &c), "MPI_Comm_split",
                      site(error_site::npos));
    return mpi(c, opt_, std::move(places), adopt_tag{});
  }

  /// algo::native's entry point: MPI_Iallreduce in place, in chunks of at most
  /// max_message_bytes, each polled under ctx.until. half and bfloat16 use a 2-byte type
  /// and a user-defined op created once per (type, op) and kept by this transport. avg
  /// sums, then every rank divides its identical sums, so results stay bitwise equal.
  template <class T, class Op>
  void allreduce_native(T* data, std::size_t count, Op op, const call_context& ctx) {
    check_element_type<T>();
    check_op_for<T, Op>();
    const error_site where = native_site(ctx);
    const auto [type, mop] = ops_.template get<T, Op>(where);
    const std::size_t chunk = std::max<std::size_t>(1, opt_.max_message_bytes / sizeof(T));
    for (std::size_t off = 0; off < count; off += chunk) {
      const int len = static_cast<int>(std::min(chunk, count - off));
      MPI_Request req = MPI_REQUEST_NULL;
      // NOLINTNEXTLINE(performance-no-int-to-ptr): MPI_IN_PLACE is the MPI library's macro
      detail::check_mpi(MPI_Iallreduce(MPI_IN_PLACE, data + off, len, type, mop, comm_, &req),
                        "MPI_Iallreduce", where);
      native_wait(req, static_cast<std::size_t>(len) * sizeof(T), "MPI_Iallreduce",
                  std::to_string(count) + " " + std::string(dtype_name(dtype_of<T>::value)), where,
                  ctx.until);
    }
    kernels::finalize(data, count, size_, op);
  }

  /// gradsync::broadcast's native path (detail/native_collectives.hpp says when):
  /// MPI_Ibcast of `bytes` from `root`, in chunks of at most max_message_bytes, each
  /// polled under ctx.until.
  void broadcast_native(std::byte* data, std::size_t bytes, std::size_t root,
                        const call_context& ctx) {
    const error_site where = native_site(ctx);
    const std::size_t chunk = std::max<std::size_t>(1, opt_.max_message_bytes);
    for (std::size_t off = 0; off < bytes; off += chunk) {
      const int len = static_cast<int>(std::min(chunk, bytes - off));
      MPI_Request req = MPI_REQUEST_NULL;
      detail::check_mpi(MPI_Ibcast(data + off, len, MPI_BYTE, static_cast<int>(root), comm_, &req),
                        "MPI_Ibcast", where);
      native_wait(req, static_cast<std::size_t>(len), "MPI_Ibcast",
                  std::to_string(bytes) + " bytes from rank " + std::to_string(root), where,
                  ctx.until);
    }
  }
  /// gradsync::allgather's native path: MPI_Iallgather of `bytes` per rank (one call:
  /// gradsync::allgather sends only small ones here, see detail/native_collectives.hpp),
  /// polled under ctx.until.
  void allgather_native(const std::byte* in, std::byte* out, std::size_t bytes,
                        const call_context& ctx) {
    const error_site where = native_site(ctx);
    const int len = one_call_count(bytes, "MPI_Iallgather", where);
    MPI_Request req = MPI_REQUEST_NULL;
    detail::check_mpi(MPI_Iallgather(in, len, MPI_BYTE, out, len, MPI_BYTE, comm_, &req),
                      "MPI_Iallgather", where);
    native_wait(req, bytes, "MPI_Iallgather", std::to_string(bytes) + " bytes per rank", where,
                ctx.until);
  }
  /// gradsync::reduce_scatter's native path: MPI_Ireduce_scatter_block of `count`
  /// elements per rank (one call, like allgather_native), polled under ctx.until; the
  /// types and ops of allreduce_native (avg: sums, then one division here).
  template <class T, class Op>
  void reduce_scatter_native(const T* in, T* out, std::size_t count, Op op,
                             const call_context& ctx) {
    check_element_type<T>();
    check_op_for<T, Op>();
    const error_site where = native_site(ctx);
    const auto [type, mop] = ops_.template get<T, Op>(where);
    MPI_Request req = MPI_REQUEST_NULL;
    const int len = one_call_count(count, "MPI_Ireduce_scatter_block", where);
    detail::check_mpi(MPI_Ireduce_scatter_block(in, out, len, type, mop, comm_, &req),
                      "MPI_Ireduce_scatter_block", where);
    native_wait(
        req, count * sizeof(T), "MPI_Ireduce_scatter_block",
        std::to_string(count) + " " + std::string(dtype_name(dtype_of<T>::value)) + " per rank",
        where, ctx.until);
    kernels::finalize(out, count, size_, op);
  }

  /// Huge-page slabs this transport keeps for staging sends (mpi_stage.hpp), its
  /// blocks now in use by unfinished sends, and those given up to sends that were
  /// freed before they completed (for tests and statistics).
  std::size_t stage_slabs() const { return stage_ ? stage_->slabs() : 0; }
  std::size_t stage_blocks_in_use() const { return stage_ ? stage_->in_use() : 0; }
  std::size_t stage_blocks_abandoned() const { return stage_ ? stage_->abandoned() : 0; }

  /// User-defined MPI ops this transport has created (for tests).
  std::size_t user_ops() const { return ops_.user_ops(); }

  /// Throws errc::invalid_argument unless MPI was initialized with at least `needed`
  /// thread support (MPI_THREAD_SERIALIZED for one background thread at a time,
  /// MPI_THREAD_MULTIPLE for concurrent calls). The async allreducer calls this.
  static void require_thread_level(int needed = MPI_THREAD_SERIALIZED) {
    if (!detail::mpi_usable()) {
      throw error(errc::invalid_argument, {},
                  "MPI is not initialized; call MPI_Init_thread(&argc, &argv, " +
                      detail::mpi_thread_level_name(needed) + ", &provided) first");
    }
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    check_thread_level(provided, needed);
  }
  /// True when MPI lets a thread other than the creator's call this transport while the
  /// creator does not (MPI_THREAD_SERIALIZED or MULTIPLE): algo::hierarchical's pipeline.
  static bool allows_helper_thread() {
    int provided = MPI_THREAD_SINGLE;
    if (detail::mpi_usable()) MPI_Query_thread(&provided);
    return provided >= MPI_THREAD_SERIALIZED;
  }
  /// The check behind require_thread_level, for a given `provided` level.
  static void check_thread_level(int provided, int needed) {
    if (provided >= needed) return;
    const std::string want = detail::mpi_thread_level_name(needed);
    throw error(errc::invalid_argument, {},
                "MPI provides " + detail::mpi_thread_level_name(provided) + " but this needs " +
                    want + (needed == MPI_THREAD_SERIALIZED ? " or MPI_THREAD_MULTIPLE" : "") +
                    ": initialize MPI with MPI_Init_thread(&argc, &argv, " + want +
                    ", &provided) and check `provided`");
  }

 private:
  struct adopt_tag {};
  // Takes ownership of an already private communicator (from split).
  mpi(MPI_Comm owned, mpi_options opt, std::vector<detail::rank_place> places, adopt_tag)
      : comm_(owned), opt_(opt) {
    adopt(std::move(places));
  }

  void check_usable_and_options(MPI_Comm comm) const {
    if (!detail::mpi_usable()) {
      throw error(errc::invalid_argument, {},
                  "MPI is not initialized (or already finalized); call MPI_Init_thread before "
                  "creating transport::mpi");
    }
    if (comm == MPI_COMM_NULL) {
      throw error(errc::invalid_argument, {},
                  "transport::mpi needs a communicator, not MPI_COMM_NULL");
    }
    if (opt_.max_message_bytes == 0 || opt_.max_message_bytes > static_cast<std::size_t>(INT_MAX)) {
      throw error(errc::invalid_argument, {},
                  "mpi_options::max_message_bytes must be in [1, INT_MAX], got " +
                      std::to_string(opt_.max_message_bytes));
    }
  }

  // places: where the ranks run when the caller knows (split), else empty: find out.
  void adopt(std::vector<detail::rank_place> places = {}) {
    try {
      detail::check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN),
                        "MPI_Comm_set_errhandler", {});
      int r = 0, n = 0;
      detail::check_mpi(MPI_Comm_rank(comm_, &r), "MPI_Comm_rank", {});
      detail::check_mpi(MPI_Comm_size(comm_, &n), "MPI_Comm_size", {});
      rank_ = static_cast<std::size_t>(r);
      size_ = static_cast<std::size_t>(n);
      find_hosts(std::move(places));
      stall_.setup(size_);
      stage_ = std::make_shared<detail::mpi_stage_pool>(
          opt_.stage_limit_bytes, opt_.stage_limit_bytes > 0 && detail::thp_available());
    } catch (...) {
      MPI_Comm_free(&comm_);
      throw;
    }
    log(log_level::debug, rank_,
        "transport::mpi: rank %zu of %zu%s, max message %zu bytes, sends of %zu..%zu bytes "
        "staged through huge pages: %s",
        rank_, size_, network_ ? " across hosts" : " on one host", opt_.max_message_bytes,
        opt_.stage_min_bytes, detail::mpi_stage_pool::page,
        stage_->enabled() ? "yes" : "no (stage_limit_bytes 0 or transparent huge pages off)");
  }

  // Collective: which ranks share memory (mpi/node.hpp): host_[r] is the lowest rank of
  // r's host; then network_ per mpi_options::network; and every rank's rank in
  // MPI_COMM_WORLD and host name, for error messages. `all`: known already, or empty.
  void find_hosts(std::vector<detail::rank_place> all) {
    if (all.empty()) all = detail::place_ranks(comm_, deadline::after(default_timeout()));
    if (all.size() != size_) {
      throw error(errc::transport, site(error_site::npos),
                  "MPI_Comm_split made a group of " + std::to_string(size_) + " ranks, expected " +
                      std::to_string(all.size()));
    }
    int world_size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    sub_group_ = static_cast<std::size_t>(world_size) != size_;
    host_.resize(size_);
    world_.resize(size_);
    names_.resize(size_);
    for (std::size_t r = 0; r < size_; ++r) {
      host_[r] = static_cast<std::uint32_t>(all[r].leader);
      world_[r] = static_cast<std::size_t>(all[r].world);
      names_[r] = all[r].host;
      sub_group_ = sub_group_ || world_[r] != r;
    }
    const bool spans =
        std::any_of(host_.begin(), host_.end(), [&](std::uint32_t h) { return h != host_[0]; });
    network_ = opt_.network == network_hint::yes || (opt_.network == network_hint::detect && spans);
  }

  void release() noexcept {
    if (comm_ == MPI_COMM_NULL) return;
    if (detail::mpi_usable()) {
      for (MPI_Request& q : abandoned_) {
        int done = 0;
        MPI_Test(&q, &done, MPI_STATUS_IGNORE);  // if the late ranks joined, it is done
      }
      ops_.release();
      const bool keep = !clean_ || stall_.had_traffic();
      stall_.release(comm_);
      // After a failed wait or stall-board traffic a peer may still send here. Freed, the
      // communicator's context id is reused by the next one created, and that late message
      // lands in it and breaks MPI's per-peer message order there (a hang in the next
      // MPI_Comm_split). So such a communicator is left allocated, on purpose.
      if (!keep) MPI_Comm_free(&comm_);  // pending operations still complete; MPI frees it after
    }
    comm_ = MPI_COMM_NULL;
  }

  void swap(mpi& o) noexcept {
    std::swap(comm_, o.comm_);
    std::swap(rank_, o.rank_);
    std::swap(size_, o.size_);
    std::swap(opt_, o.opt_);
    std::swap(seq_, o.seq_);
    std::swap(abort_, o.abort_);
    std::swap(stall_, o.stall_);
    std::swap(scratch_, o.scratch_);
    std::swap(stage_, o.stage_);
    std::swap(ops_, o.ops_);
    std::swap(abandoned_, o.abandoned_);
    std::swap(native_stuck_, o.native_stuck_);
    std::swap(clean_, o.clean_);
    std::swap(network_, o.network_);
    std::swap(host_, o.host_);
    std::swap(world_, o.world_);
    std::swap(names_, o.names_);
    std::swap(sub_group_, o.sub_group_);
  }

  // Names the job's ranks (MPI_COMM_WORLD) and their hosts, and this group's ranks
  // when it is a sub-group (a split, two_level's inter-node level).
  error_site site(std::size_t peer) const {
    if (world_.size() != size_) return {rank_, peer, seq_ - 1};
    error_site s{world_[rank_], peer < size_ ? world_[peer] : peer, seq_ - 1};
    s.host = names_[rank_];
    if (peer < size_) s.peer_host = names_[peer];
    if (sub_group_) {
      s.group_rank = rank_;
      s.group_peer = peer < size_ ? peer : error_site::npos;
      s.group_size = size_;
    }
    return s;
  }

  [[noreturn]] void aborted(request& r, const char* when) {
    const std::size_t peer = r.peer_, bytes = r.bytes_;
    const bool send = r.is_send_;
    give_up(r);
    abort_switch::throw_aborted(site(peer), when + std::string(send ? "send " : "receive ") +
                                                std::to_string(bytes) + " bytes " +
                                                (send ? "to" : "from") + " the peer");
  }

  [[noreturn]] void fail(request& r, int rc) {
    const std::size_t peer = r.peer_, bytes = r.bytes_;
    const bool send = r.is_send_;
    give_up(r);
    if (detail::mpi_error_class(rc) == MPI_ERR_TRUNCATE) {
      throw error(errc::mismatch, site(peer),
                  "message size differs: this rank expected " + std::to_string(bytes) +
                      " bytes and the peer sent more (" + detail::mpi_error_text(rc) + ")");
    }
    throw error(errc::transport, site(peer),
                std::string(send ? "MPI_Isend" : "MPI_Irecv") + " of " + std::to_string(bytes) +
                    " bytes failed: " + detail::mpi_error_text(rc));
  }

  request post(bool is_send, std::size_t peer, void* buf, std::size_t bytes, std::uint32_t tag) {
    if (peer >= size_) {
      throw error(errc::invalid_argument, site(peer),
                  "peer rank out of range (group of " + std::to_string(size_) + ")");
    }
    request r;
    r.peer_ = peer;
    r.tag_ = tag;
    r.is_send_ = is_send;
    r.bytes_ = bytes;
    r.piece_ = opt_.max_message_bytes;
    const std::size_t parts = bytes == 0 ? 1 : (bytes + r.piece_ - 1) / r.piece_;
    if (parts > 1) r.more_.assign(parts - 1, MPI_REQUEST_NULL);
    // Only a receiver on this host reads the send with process_vm_readv (see above).
    if (is_send && stage_ && bytes >= opt_.stage_min_bytes && host_[peer] == host_[rank_]) {
      if (auto b = stage_->acquire(bytes); b.ptr) {
        std::memcpy(b.ptr, buf, bytes);
        buf = b.ptr;
        r.pool_ = stage_;
        r.stage_ = b;
      }
    }
    auto* p = static_cast<std::byte*>(buf);
    for (std::size_t i = 0; i < parts; ++i) {
      const int len = static_cast<int>(r.piece_bytes(i));
      const int rc = is_send ? MPI_Isend(p + i * r.piece_, len, MPI_BYTE, static_cast<int>(peer),
                                         static_cast<int>(tag), comm_, &r.part(i))
                             : MPI_Irecv(p + i * r.piece_, len, MPI_BYTE, static_cast<int>(peer),
                                         static_cast<int>(tag), comm_, &r.part(i));
      r.parts_ = i + 1;  // the destructor cancels what was posted if a later piece fails
      if (rc != MPI_SUCCESS) fail(r, rc);
    }
    return r;
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::size_t rank_ = 0, size_ = 0;
  mpi_options opt_{};
  std::uint64_t seq_ = 0;
  workspace scratch_;
  std::shared_ptr<detail::mpi_stage_pool> stage_;  // huge-page copies of large sends
  detail::mpi_op_cache ops_;
  std::vector<MPI_Request> abandoned_;  // timed-out nonblocking collectives (see above)
  bool native_stuck_ = false;
  bool clean_ = true;        // no wait has failed: no peer can have a message still on its way
  detail::mpi_stall stall_;  // the stall inspector's board (mpi/stall.hpp)
  abort_switch abort_;       // abort()
  bool network_ = false;     // the ranks span hosts (crosses_network)
  std::vector<std::uint32_t> host_;  // per rank: the lowest rank on its host
  std::vector<std::size_t> world_;   // per rank: its rank in MPI_COMM_WORLD
  std::vector<std::string> names_;   // per rank: its host's name
  bool sub_group_ = false;           // ranks here are not MPI_COMM_WORLD's
};

static_assert(gradsync::transport_policy<mpi>);

}  // namespace gradsync::transport
