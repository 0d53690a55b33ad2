// SPDX-License-Identifier: Apache-2.0
// transport::shm — the processes of one host share ONE POSIX shared-memory segment.
//
// Construction (no MPI needed; see transport/shm/from_mpi.hpp to bootstrap from an MPI
// communicator instead):
//
//   // 1. from the environment, so any launcher works:
//   //    GRADSYNC_SHM_RANK  this process's rank, 0 .. size-1
//   //    GRADSYNC_SHM_SIZE  number of processes in the group
//   //    GRADSYNC_SHM_JOB   an id unique to this job, the same in every process
//   //                       (e.g. "$SLURM_JOB_ID" or the launcher's pid)
//   //    or, where those are unset, what mpirun (Open MPI, MPICH) or srun set
//   //    (transport/shm/launch.hpp; a job spanning several hosts is refused)
//   auto t = gradsync::transport::shm::from_env();
//
//   // 2. or explicitly (shm_options also sets buffer sizes and the bootstrap timeout):
//   gradsync::transport::shm t(rank, size, "myjob-42");
//
//   gs::allreduce<gs::algo::direct_two_shot>(t, std::span<float>(grad), gs::op::avg);
//
// Rank 0 creates /dev/shm/gradsync-<uid>-<job> with O_EXCL and mode 0600; the others
// attach; the last rank to attach unlinks the name before any constructor returns, so
// the segment's memory never outlives its processes. The constructor waits (up to
// shm_options::bootstrap_timeout) until every rank has attached. Each rank first claims
// its place in the job id's roster, gradsync-<uid>-<job>+ranks (one page, linked while
// the group runs; shm/roster.hpp): a second job started with the same id is refused, and
// a group that may hold ranks of both stops before any data moves. A job killed whole
// leaves only its roster, which the next shm group's rank 0 (of any id) removes.
//
// What is in the segment: per rank, a control block (a futex word, pid, state, flags)
// and two small slots (call header + inline payload); one byte ring per ordered pair of
// ranks (isend/irecv, so algo::ring/tree/halving_doubling run unchanged); and one
// staging buffer per rank that every peer can read (algo::direct_one_shot/two_shot).
//
// Waiting spins briefly, then sleeps on a futex; every wait has a deadline and raises
// errc::timeout, or errc::peer_lost when the awaited peer's process died (checked with
// kill(pid, 0) and /proc every 20 ms of sleep), closed its transport, or failed. After
// a timeout or peer_lost the transport is unusable: destroy it (peers then see
// peer_lost instead of waiting for their own deadline).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "gradsync/config.hpp"
#include "gradsync/core/abort.hpp"
#include "gradsync/core/call.hpp"
#include "gradsync/core/stall.hpp"
#include "gradsync/core/deadline.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/core/log.hpp"
#include "gradsync/core/workspace.hpp"
#include "gradsync/kernels/host.hpp"
#include "gradsync/transport/bruck_exchange.hpp"
#include "gradsync/transport/concept.hpp"
#include "gradsync/transport/shm/heap.hpp"
#include "gradsync/transport/shm/launch.hpp"
#include "gradsync/transport/shm/p2p.hpp"
#include "gradsync/transport/shm/roster.hpp"
#include "gradsync/transport/shm/segment.hpp"
#include "gradsync/transport/shm/wait.hpp"
#include "gradsync/transport/split.hpp"

namespace gradsync::transport {

/// How to build an shm transport. Every rank must pass the same sizes.
struct shm_options {
  std::size_t rank = 0;                   ///< this process's rank, 0 .. size-1
  std::size_t size = 1;                   ///< processes in the group (all on this host)
  std::string job;                        ///< id shared by the group's processes, unique per job
  std::size_t slot_bytes = 32 << 10;      ///< inline payload per rank (one-shot without staging)
  std::size_t ring_bytes = 512 << 10;     ///< byte ring per ordered pair (isend/irecv)
  std::size_t exchange_bytes = 16 << 20;  ///< staging buffer per rank (two halves)
  std::size_t heap_bytes = 0;             ///< registered buffers per rank (shm::allocate)
  seconds_d bootstrap_timeout{-1.0};      ///< < 0: default_timeout() (GRADSYNC_TIMEOUT)
  /// Testing: the sequence number of the first call (the same on every rank), so that a
  /// test reaches what happens after 2^32 calls (the direct algorithms' stage flag).
  std::uint64_t first_seq = 0;
  /// For error messages: the job's rank of each rank of this group (empty: the group's
  /// ranks are the job's) and this host's name. shm_options_from_mpi fills both.
  std::vector<std::size_t> job_ranks;
  std::string host;

  /// Rank, size and job from GRADSYNC_SHM_RANK / _SIZE / _JOB or, where those are unset,
  /// from the launcher (Open MPI, MPICH Hydra, Slurm; transport/shm/launch.hpp), and
  /// GRADSYNC_SHM_HEAP (optional heap_bytes; K, M or G suffix).
  GRADSYNC_DECL static shm_options from_env();

 private:
  GRADSYNC_DECL static std::size_t env_bytes(const char* var, const char* s);
};

namespace detail {

/// Everything a shm rank owns; kept behind a pointer so that the transport can move
/// while requests point at it.
class shm_state {
 public:
  GRADSYNC_DECL explicit shm_state(const shm_options& o);
  GRADSYNC_DECL shm_state(const shm_options& o, deadline until);

  GRADSYNC_DECL ~shm_state();

  /// Largest segment (and largest single buffer) an shm group may ask for: 64 PiB.
  static constexpr std::size_t total_limit = std::size_t{1} << 56;

  GRADSYNC_DECL static shm_geometry geometry(const shm_options& o);

  shm_roster roster_;  // this rank's claim on the job id, held for the group's life
  shm_segment seg_;
  std::size_t rank_, size_;
  shm_p2p p2p_;
  shm_heap heap_;
  spin_policy spin_;  // how long waits spin (learns when the host is oversubscribed)
  std::uint64_t seq_ = 0;
  bool broken_ = false;
  workspace scratch_;
  abort_switch abort_;  // shm::abort()
  stall_watch stall_;   // the stall inspector (core/stall.hpp)
  clock::time_point next_health_{};
  // Run by waits every 20 ms with the awaited peer's job rank (transport::two_level's
  // other level: it answers that level's stall queries); a non-empty result is a peer's
  // failure notice, which ends the wait with peer_lost.
  std::function<std::string(std::size_t)> wait_hook_;
  static constexpr std::chrono::milliseconds relay_grace{900};  // idle_check
  std::vector<std::size_t> job_ranks_;  // per group rank: its rank in the job (or empty)
  shm_options opts_;  // what this group was built from (its host; split() builds alike)

  // Rank q's rank in the job.
  std::size_t job_rank(std::size_t q) const { return job_ranks_.empty() ? q : job_ranks_[q]; }

  // Rank q as messages name it: its job rank and host when the options gave them.
  GRADSYNC_DECL std::string describe(std::size_t q) const;

  void enter_call(std::uint64_t seq, const call_note& note) {
    check_roster();
    stall_.enter(seq, note);
    shared_word(seg_.ctl(rank_).entered).store(stall_.entered(), std::memory_order_relaxed);
  }

  // The stall warning: where every other rank is, from the segment's board.
  GRADSYNC_DECL void report_stall() const;

  // Names the job's ranks and the host when the options gave them (ranks of a larger
  // job, e.g. two_level's node level), the group's ranks otherwise.
  GRADSYNC_DECL error_site site(std::size_t peer) const;

  // o.job_ranks when this group is a proper part of the job; else empty (the group's
  // ranks are the job's, and errors say nothing of a sub-group).
  GRADSYNC_DECL static std::vector<std::size_t> sub_group_ranks(const shm_options& o);

  void wake_all() {
    std::atomic_thread_fence(std::memory_order_seq_cst);  // one fence for all peers
    for (std::size_t j = 0; j < size_; ++j) {
      if (j != rank_) wake_if_sleeping(seg_.ctl(j));
    }
  }

  /// Throws (after marking this rank failed, so that its peers stop waiting for it).
  [[noreturn]] GRADSYNC_DECL void fail(errc code, std::size_t peer, const std::string& what);

  /// Publishes `cause`, then the failed state (peers read the cause after it), and wakes
  /// every peer; this transport is unusable afterwards.
  GRADSYNC_DECL void mark_failed(const char* cause) noexcept;

  GRADSYNC_DECL std::string failure_notice() const;

  /// "; it reported: <cause>" for a failed peer that left one, else "".
  static std::string peer_cause(const rank_ctl& c) {
    const std::size_t n = ::strnlen(c.cause, rank_cause_bytes);
    return n ? "; it reported: " + std::string(c.cause, n) : std::string();
  }

  GRADSYNC_DECL void check_usable();

  // A process of a second job with this job id found its rank taken after the bootstrap
  // (shm_roster): this group may hold ranks of both jobs, so it stops.
  void check_roster() {
    if (std::string p = roster_.take_poison(); !p.empty()) {
      fail(errc::transport, error_site::npos, p);
    }
  }

  static std::string abort_message(const std::string& when) {
    return "the transport was aborted (abort() was called on this rank) " + when;
  }

  /// Called between sleeps while waiting for `peer`: raises peer_lost or timeout. A peer
  /// may publish its last data and leave (or die) between our last look and this check,
  /// so before blaming it we look once more (`ready`) now that its state is acquired.
  template <class Ready>
  bool idle_check(std::size_t peer, clock::time_point now, clock::time_point until,
                  const char* waiting_for, Ready&& ready) {
    if (peer < size_) {
      rank_ctl& c = seg_.ctl(peer);
      // A peer that failed or closed says so before its process ends: judged by its state.
      auto check_state = [&] {
        const std::uint32_t st = shared_word(c.state).load(std::memory_order_acquire);
        if ((st == rs_left || st == rs_failed) && ready()) return true;
        if (st == rs_left)
          fail(errc::peer_lost, peer,
               std::string("the peer closed its transport while this rank waited ") + waiting_for);
        if (st == rs_failed)
          fail(errc::peer_lost, peer,
               std::string(
                   "the peer failed (timeout or lost peer of its own) while this rank waited ") +
                   waiting_for + peer_cause(c));
        return false;
      };
      if (check_state()) return true;
      if (now >= next_health_) {
        next_health_ = now + std::chrono::milliseconds(20);
        check_roster();
        if (wait_hook_) {
          const std::string notice = wait_hook_(site(peer).peer);
          if (!notice.empty()) fail(errc::peer_lost, peer, notice);
        }
        const int pid = shared_word(c.pid).load(std::memory_order_relaxed);
        if (!process_alive(pid, c.start_time)) {
          // It may have failed (quoting the rank it lost) and exited since the look above.
          if (check_state() || ready()) return true;
          fail(errc::peer_lost, peer,
               "the peer's process (pid " + std::to_string(pid) + ") died while this rank waited " +
                   waiting_for);
        }
      }
    }
    if (abort_.raised()) {
      fail(errc::aborted, peer,
           abort_message(std::string("while this rank waited ") + waiting_for));
    }
    if (stall_.due(now)) report_stall();
    if (now >= until) {
      // As a node of a two_level, a live peer that has entered this call may wait across
      // nodes for a lost rank: it times out about now and fails with a cause naming that
      // rank (quoted above, and more useful than its name); give it until 0.9 s past the
      // deadline to do so. A peer that never entered the call is the one to name.
      if (wait_hook_ && peer < size_ && now < until + relay_grace &&
          shared_word(seg_.ctl(peer).entered).load(std::memory_order_relaxed) >= stall_.entered()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        return false;
      }
      fail(errc::timeout, peer,
           std::string("deadline passed while waiting ") + waiting_for +
               " (set GRADSYNC_TIMEOUT or call_options::timeout to wait longer)");
    }
    return false;
  }
};

}  // namespace detail

class shm {
 public:
  static constexpr std::string_view name = "shm";
  static constexpr memory_space memory = memory_space::host;
  static constexpr bool peer_access = true;
  static constexpr bool native_allreduce = false;
  static constexpr transport_traits traits{.takes_wait_hook = true,
                                           .watches_stalls = true,
                                           .aborts = true,
                                           .relays_failures = true,
                                           .splits = true};

  /// Flag indices of peer_memory_transport: the stamps of slots 0 and 1, the chunk
  /// stage of the direct algorithms, and the last completed direct call.
  static constexpr unsigned flag_slot0 = 0, flag_slot1 = 1, flag_stage = 2, flag_done = 3;

  /// A posted send or receive; destroying an unfinished one withdraws it.
  class request {
   public:
    request() = default;
    request(request&& o) noexcept : op_(std::move(o.op_)), st_(o.st_) {}
    request& operator=(request&& o) noexcept {
      if (this != &o) {
        cancel();
        op_ = std::move(o.op_);
        st_ = o.st_;
      }
      return *this;
    }
    ~request() { cancel(); }
    bool active() const { return op_ && !op_->done; }

   private:
    friend class shm;
    void cancel() {
      if (op_ && !op_->done && !st_->p2p_.cancel(op_)) st_->broken_ = true;
      op_.reset();
    }
    std::shared_ptr<detail::p2p_op> op_;
    detail::shm_state* st_ = nullptr;
  };

  /// A registered buffer of T in this rank's heap (see allocate); move-only, released
  /// on destruction. It must not outlive its transport (the heap is unmapped with it).
  template <class T>
  class buffer {
   public:
    buffer() = default;
    buffer(buffer&& o) noexcept : st_(o.st_), data_(o.data_), count_(o.count_) {
      o.st_ = nullptr;
      o.data_ = nullptr;
      o.count_ = 0;
    }
    buffer& operator=(buffer&& o) noexcept {
      if (this != &o) {
        reset();
        std::swap(st_, o.st_);
        std::swap(data_, o.data_);
        std::swap(count_, o.count_);
      }
      return *this;
    }
    ~buffer() { reset(); }
    T* data() const { return data_; }
    std::size_t size() const { return count_; }
    std::span<T> span() const { return {data_, count_}; }
    operator std::span<T>() const { return span(); }
    T& operator[](std::size_t i) const { return data_[i]; }
    /// Gives the memory back to the heap now.
    void reset() {
      if (st_ && data_) {
        st_->heap_.release(static_cast<std::size_t>(reinterpret_cast<std::byte*>(data_) -
                                                    st_->seg_.heap(st_->rank_)));
      }
      st_ = nullptr;
      data_ = nullptr;
      count_ = 0;
    }

   private:
    friend class shm;
    detail::shm_state* st_ = nullptr;
    T* data_ = nullptr;
    std::size_t count_ = 0;
  };

  /// `count` elements of T in this rank's heap (shm_options::heap_bytes; fresh pages
  /// read as zero, reused ones keep what they held). Peers map the heap: when every rank passes a
  /// registered buffer to algo::direct_two_shot (or auto_select above one-shot sizes), ranks read
  /// each other's buffers in place instead of staging them. Not collective.
  template <class T>
  buffer<T> allocate(std::size_t count) {
    static_assert(std::is_trivially_copyable_v<T>,
                  "gradsync: shm::allocate holds trivially copyable element types only");
    buffer<T> b;
    if (count == 0) return b;
    if (count > st_->heap_.capacity() / sizeof(T)) {
      throw error(errc::invalid_argument, st_->site(error_site::npos),
                  "shm::allocate of " + std::to_string(count) + " elements of " +
                      std::to_string(sizeof(T)) + " bytes exceeds this rank's heap of " +
                      std::to_string(st_->heap_.capacity()) +
                      " bytes; raise shm_options::heap_bytes (GRADSYNC_SHM_HEAP)");
    }
    const std::size_t off = st_->heap_.allocate(count * sizeof(T));
    b.st_ = st_.get();
    b.data_ = reinterpret_cast<T*>(st_->seg_.heap(st_->rank_) + off);
    b.count_ = count;
    return b;
  }
  /// Bytes of each rank's heap.
  std::size_t heap_bytes() const { return st_->seg_.layout().geo.heap_bytes; }
  /// Where [p, p + bytes) lies in this rank's heap, or npos when it does not.
  std::size_t registered_offset(const void* p, std::size_t bytes) const {
    const auto* b = static_cast<const std::byte*>(p);
    const std::byte* h = st_->seg_.heap(st_->rank_);
    if (b < h || bytes > heap_bytes() || b - h > static_cast<std::ptrdiff_t>(heap_bytes() - bytes))
      return npos;
    return static_cast<std::size_t>(b - h);
  }
  /// Rank i's heap, mapped in this process.
  const std::byte* heap(std::size_t i) const { return st_->seg_.heap(i); }
  static constexpr std::size_t npos = ~std::size_t{0};

  /// Joins (rank 0: creates) the segment of `o.job`; returns once every rank attached.
  explicit shm(const shm_options& o) : st_(std::make_unique<detail::shm_state>(o)) {}
  /// Rank `rank` of `size` in job `job`, with the default buffer sizes.
  shm(std::size_t rank, std::size_t size, std::string job)
      : shm([&] {
          shm_options o;
          o.rank = rank;
          o.size = size;
          o.job = std::move(job);
          return o;
        }()) {}
  /// Same, with rank, size and job from the environment (shm_options::from_env).
  static shm from_env() { return shm(shm_options::from_env()); }

  shm(shm&&) noexcept = default;
  shm& operator=(shm&&) noexcept = default;
  shm(const shm&) = delete;
  shm& operator=(const shm&) = delete;

  std::size_t rank() const { return st_->rank_; }
  std::size_t size() const { return st_->size_; }
  /// The segment's name in /dev/shm (already unlinked once construction returned).
  const std::string& segment_name() const { return st_->seg_.name(); }

  request isend(std::size_t peer, const void* data, std::size_t bytes, std::uint32_t tag) {
    return post(true, peer, const_cast<void*>(data), bytes, tag);
  }
  request irecv(std::size_t peer, void* data, std::size_t bytes, std::uint32_t tag) {
    return post(false, peer, data, bytes, tag);
  }

  GRADSYNC_DECL void wait(request& r, deadline d);

  /// This rank enters call `seq` (the entry points call it; core/stall.hpp).
  void enter_call(std::uint64_t seq, const call_note& note) { st_->enter_call(seq, note); }

  /// Makes this rank's wait in flight and every later one fail with errc::aborted within
  /// ~20 ms (core/abort.hpp); the rank is then marked failed, so peers waiting for it get
  /// peer_lost at once. Thread-safe and async-signal-safe.
  void abort() noexcept { st_->abort_.raise(); }
  /// Marks this rank failed with `cause` (transport::two_level relays a failure of its
  /// other level this way): every peer's wait for this rank ends at once with
  /// errc::peer_lost quoting it. The transport is unusable afterwards.
  void announce_failure(const char* cause) noexcept {
    if (st_) st_->mark_failed(cause);
  }
  /// While set, every wait of this rank runs `hook(job rank of the awaited peer)` every
  /// 20 ms; a non-empty result ends the wait with errc::peer_lost quoting it
  /// (transport::two_level serves its inter-node level this way). Same thread only.
  void set_wait_hook(std::function<std::string(std::size_t)> hook) {
    st_->wait_hook_ = std::move(hook);
  }
  /// The first peer that failed with a cause ("peer 3 failed: ..."), or "" (two_level
  /// prefers it to a timeout of its other level).
  std::string failure_notice() const { return st_ ? st_->failure_notice() : std::string(); }

  std::uint64_t next_seq() { return st_->seq_++; }
  std::uint64_t last_seq() const { return st_->seq_ - 1; }
  workspace& scratch() { return st_->scratch_; }

  /// The ranks that pass the same `color` (>= 0) form a new shm group on a segment of
  /// their own, ordered by `key` then by rank here (like MPI_Comm_split; collective over
  /// this group, within `d`). It has this group's buffer sizes; its errors name the job's
  /// ranks. This group stays usable alongside it.
  GRADSYNC_DECL shm split(int color, int key, deadline d = deadline::after(default_timeout()));
  kernels::host_executor executor() const { return {}; }

  // ---- peer_memory_transport: what algo::direct_one_shot / direct_two_shot use ----

  /// Bytes of a slot: a 48-byte call header followed by inline payload.
  std::size_t slot_bytes() const { return 48 + st_->seg_.layout().geo.slot_bytes; }
  /// Rank i's slot k (0 or 1); it starts in the cache line of flag k.
  std::byte* slot(std::size_t i, unsigned k) { return st_->seg_.slot(i, k).header; }
  /// Bytes of each rank's staging buffer.
  std::size_t exchange_bytes() const { return st_->seg_.layout().geo.exchange_bytes; }
  /// Rank i's staging buffer, mapped in this process.
  std::byte* exchange(std::size_t i) { return st_->seg_.exchange(i); }

  /// Current value of rank i's flag k.
  std::uint64_t flag(std::size_t i, unsigned k) const {
    return detail::shared_word(flag_word(i, k)).load(std::memory_order_acquire);
  }
  /// Sets this rank's flag k to v (flags only grow) and wakes sleeping peers; every
  /// write to this rank's slots and buffer made before is visible to a peer that sees v.
  void post_flag(unsigned k, std::uint64_t v) {
    detail::shared_word(flag_word(st_->rank_, k)).store(v, std::memory_order_release);
    st_->wake_all();
  }
  /// Waits until flag k of every rank is >= v; errc::timeout or peer_lost naming the
  /// first rank that has not reached it.
  GRADSYNC_DECL void wait_flags(unsigned k, std::uint64_t v, deadline d);

 private:
  GRADSYNC_DECL static std::string describe_flag(unsigned k, std::uint64_t v);

  std::uint64_t& flag_word(std::size_t i, unsigned k) const {
    auto& seg = st_->seg_;
    switch (k) {
      case flag_slot0:
        return seg.slot(i, 0).stamp;
      case flag_slot1:
        return seg.slot(i, 1).stamp;
      case flag_stage:
        return seg.ctl(i).stage;
      default:
        return seg.ctl(i).done;
    }
  }

  GRADSYNC_DECL request post(bool is_send, std::size_t peer, void* buf, std::size_t bytes,
                             std::uint32_t tag);

  std::unique_ptr<detail::shm_state> st_;
};

static_assert(gradsync::transport_policy<shm>);

}  // namespace gradsync::transport

#if GRADSYNC_HEADER_ONLY
#include "gradsync/transport/shm.ipp"
#endif
