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
// ring and halving_doubling keep every receive of a step in flight, messages to other
// hosts are cut smaller on a slow link under MPICH (measured at construction;
// mpi_options::network_message_bytes), and errors name the
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
#include "gradsync/transport/bruck_exchange.hpp"
#include "gradsync/transport/concept.hpp"
#include "gradsync/transport/mpi/link.hpp"
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
  /// network_message_bytes: let the transport choose at construction (mpi/link.hpp).
  static constexpr std::size_t network_auto = static_cast<std::size_t>(-1);
  /// Largest MPI message to a rank on another host (to every rank with network_hint::yes);
  /// longer ones are split into messages of this size, all posted at once (0: only
  /// max_message_bytes splits). Under MPICH over UCX on a slow link, 16 KiB (UCX's eager
  /// size over TCP) makes a pipeline's pieces stream in order where rendezvous transfers
  /// interleave and all arrive at the end; at 10 Gbit/s the small messages cost up to
  /// 1.7x the time. network_auto (the default) measures the link when the ranks span
  /// hosts (unless network_hint::no) and cuts to 16 KiB only under MPICH below 4 Gbit/s
  /// (docs/cluster.md, cause 5); options() then holds the choice.
  std::size_t network_message_bytes = network_auto;
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
  /// - pipeline segment of ring and halving_doubling 1 MiB: every MPI message above the
  ///   eager limit pays a rendezvous handshake and a completion message, and on one host
  ///   the MPI copies it in the receiver's MPI_Test (Open MPI's and MPICH's CMA path), so
  ///   a smaller segment buys no overlap;
  /// - the ring completes each send one segment after the matching receive instead of at
  ///   the end of the step, so a staged send's huge-page block is reused while hot
  ///   (both: docs/perf/tuning.md, "transport::mpi constants");
  /// - pieces of a pipelined two-level allgather sent to a peer at once: see
  ///   detail::mpi_pieces_in_flight;
  /// - crosses_network(), serve_peers(), the thread levels, the stall watch, abort(),
  ///   the failure relay and describe_rank(): below.
  static constexpr transport_traits traits{.pipeline_segment_bytes = std::size_t{1} << 20,
                                           .ring_send_lag = 1,
                                           .pieces_in_flight = detail::mpi_pieces_in_flight,
                                           .may_cross_network = true,
                                           .serves_peers = true,
                                           .thread_levels = true,
                                           .watches_stalls = true,
                                           .aborts = true,
                                           .relays_failures = true,
                                           .describes_ranks = true,
                                           .native_collectives = true,
                                           .splits = true};

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
    GRADSYNC_DECL void cancel() noexcept;
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
    GRADSYNC_DECL bool cancel_one(MPI_Request& q) const noexcept;

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
  GRADSYNC_DECL explicit mpi(MPI_Comm comm, mpi_options opt = {});

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
  /// The link rate between hosts measured at construction for network_auto (Gbit/s, the
  /// slowest host's); 0 when nothing was measured.
  double link_gbps() const { return link_gbps_; }
  /// True when `peer` shares memory with this rank (MPI_COMM_TYPE_SHARED).
  bool same_host(std::size_t peer) const { return peer < size_ && host_[peer] == host_[rank_]; }
  /// Rank q as messages name it: its rank in MPI_COMM_WORLD and its host ("rank 5 on
  /// node-b"), also in a sub-group.
  GRADSYNC_DECL std::string describe_rank(std::size_t q) const;

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
  [[noreturn]] GRADSYNC_DECL void peer_failed() const;
  // Ends a failed wait: the peer may still send its part later (see release).
  void give_up(request& r) noexcept {
    clean_ = false;
    r.cancel();
  }
  // At a timeout, the peers that do not answer the stall inspector's query within half
  // a second: the rank waited on may be alive and itself waiting for a lost one (when it
  // says so, its relayed notice is awaited until 0.9 s after the query: callers prefer it).
  GRADSYNC_DECL std::string silent_peers();
  // A native collective's error site; refuses the call once one is stuck inside MPI.
  GRADSYNC_DECL error_site native_site(const call_context& ctx) const;
  // A count for one MPI call, or invalid_argument when it exceeds int.
  GRADSYNC_DECL static int one_call_count(std::size_t count, const char* call,
                                          const error_site& where);
  // Polls one native collective (`call` of `what`) until `until`. MPI forbids cancelling
  // or freeing a nonblocking collective: a timed-out one is kept until it completes (if
  // the late ranks ever join) and further native calls are refused.
  GRADSYNC_DECL void native_wait(MPI_Request& req, std::size_t bytes, const char* call,
                                 const std::string& what, const error_site& where, deadline until);

 public:
  /// Completes every piece of `r` or throws: errc::timeout past `d`, errc::mismatch when
  /// the peer sent a different number of bytes, errc::transport for any other MPI error.
  GRADSYNC_DECL void wait(request& r, deadline d);

  /// Tells every peer that this rank failed, and why (transport::two_level relays a
  /// failure of its other level this way): their waits on this transport end at once
  /// with errc::peer_lost quoting `cause`. Nonblocking; once per transport.
  void announce_failure(const char* cause) noexcept { stall_.announce(comm_, rank_, cause); }
  /// Called from this rank's waits on another level of a two_level, for job rank
  /// `blocked_on - 1` (0: none): answers the peers' stall queries, saying so, and returns
  /// a peer's failure notice if one has arrived (as failure_notice()), else "".
  GRADSYNC_DECL std::string serve_peers(std::uint64_t blocked_on);
  /// A peer's failure notice that has arrived ("rank 2 on node-b failed and told this rank
  /// why: ..."), or "" (two_level prefers it to a timeout of its other level).
  GRADSYNC_DECL std::string failure_notice();

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
  GRADSYNC_DECL mpi split(int color, int key, deadline d = deadline::after(default_timeout()));

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
  GRADSYNC_DECL void broadcast_native(std::byte* data, std::size_t bytes, std::size_t root,
                                      const call_context& ctx);
  /// gradsync::allgather's native path: MPI_Iallgather of `bytes` per rank (one call:
  /// gradsync::allgather sends only small ones here, see detail/native_collectives.hpp),
  /// polled under ctx.until.
  GRADSYNC_DECL void allgather_native(const std::byte* in, std::byte* out, std::size_t bytes,
                                      const call_context& ctx);
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
  GRADSYNC_DECL static void require_thread_level(int needed = MPI_THREAD_SERIALIZED);
  /// True when MPI lets a thread other than the creator's call this transport while the
  /// creator does not (MPI_THREAD_SERIALIZED or MULTIPLE): algo::hierarchical's pipeline.
  GRADSYNC_DECL static bool allows_helper_thread();
  /// The check behind require_thread_level, for a given `provided` level.
  GRADSYNC_DECL static void check_thread_level(int provided, int needed);

 private:
  struct adopt_tag {};
  // Takes ownership of an already private communicator (from split).
  GRADSYNC_DECL mpi(MPI_Comm owned, mpi_options opt, std::vector<detail::rank_place> places,
                    adopt_tag);

  GRADSYNC_DECL void check_usable_and_options(MPI_Comm comm) const;

  // places: where the ranks run when the caller knows (split), else empty: find out.
  GRADSYNC_DECL void adopt(std::vector<detail::rank_place> places = {});

  // Collective: which ranks share memory (mpi/node.hpp): host_[r] is the lowest rank of
  // r's host; then network_ per mpi_options::network; and every rank's rank in
  // MPI_COMM_WORLD and host name, for error messages. `all`: known already, or empty.
  GRADSYNC_DECL void find_hosts(std::vector<detail::rank_place> all);

  // Collective: resolves mpi_options::network_auto (mpi/link.hpp), probing the link
  // between hosts when the ranks span them under an MPI where the cut can pay.
  GRADSYNC_DECL void choose_network_cut();

  GRADSYNC_DECL void release() noexcept;

  GRADSYNC_DECL void swap(mpi& o) noexcept;

  // Names the job's ranks (MPI_COMM_WORLD) and their hosts, and this group's ranks
  // when it is a sub-group (a split, two_level's inter-node level).
  GRADSYNC_DECL error_site site(std::size_t peer) const;

  [[noreturn]] GRADSYNC_DECL void aborted(request& r, const char* when);

  [[noreturn]] GRADSYNC_DECL void fail(request& r, int rc);

  GRADSYNC_DECL request post(bool is_send, std::size_t peer, void* buf, std::size_t bytes,
                             std::uint32_t tag);

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
  double link_gbps_ = 0;     // measured by choose_network_cut (link_gbps)
  std::vector<std::uint32_t> host_;  // per rank: the lowest rank on its host
  std::vector<std::size_t> world_;   // per rank: its rank in MPI_COMM_WORLD
  std::vector<std::string> names_;   // per rank: its host's name
  bool sub_group_ = false;           // ranks here are not MPI_COMM_WORLD's
};

static_assert(gradsync::transport_policy<mpi>);

}  // namespace gradsync::transport

#if GRADSYNC_HEADER_ONLY
#include "gradsync/transport/mpi.ipp"
#endif
