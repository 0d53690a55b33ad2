// SPDX-License-Identifier: Apache-2.0
// The POSIX shared-memory segment behind transport::shm: its layout, its creation
// (rank 0, O_CREAT|O_EXCL, mode 0600), attachment by the other ranks, and its removal
// from /dev/shm as soon as every rank has mapped it, so a crash leaves nothing behind.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>

#include "gradsync/config.hpp"
#include "gradsync/core/deadline.hpp"
#include "gradsync/core/error.hpp"

namespace gradsync::transport::detail {

inline constexpr std::size_t cache_line = 64;
inline constexpr std::size_t page_bytes = 4096;

inline constexpr std::size_t round_up(std::size_t v, std::size_t a) {
  return (v + a - 1) / a * a;
}

/// Atomic view of a word that lives in shared memory.
template <class T>
std::atomic_ref<T> shared_word(T& w) {
  static_assert(std::atomic_ref<T>::is_always_lock_free,
                "gradsync: shm needs lock-free atomics on this word size");
  return std::atomic_ref<T>(w);
}

/// Lifecycle of a rank as seen by its peers (rank_ident::state).
enum rank_state : std::uint32_t { rs_absent = 0, rs_attached = 1, rs_left = 2, rs_failed = 3 };

/// The sizes every rank must agree on; they fix the segment layout.
struct shm_geometry {
  std::uint64_t ranks = 0;
  std::uint64_t slot_bytes = 0;      // per rank and parity: call header + inline payload
  std::uint64_t ring_bytes = 0;      // per ordered pair of ranks (point-to-point stream)
  std::uint64_t exchange_bytes = 0;  // per rank: the direct algorithms' staging buffer
  std::uint64_t heap_bytes = 0;      // per rank: registered buffers peers read in place
};

/// First page of the segment.
struct seg_header {
  static constexpr std::uint64_t magic_value = 0x33534d4853475247ull;  // "GRGSHMS3"
  std::uint64_t magic;  // written last by the creator (release): the layout is ready
  shm_geometry geo;
  std::uint64_t total_bytes;
  std::uint32_t attached;  // ranks that have mapped the segment (n + 1: name unlinked)
  std::uint32_t creator_pid;
  // The creator's /proc start time: a segment whose creator is gone is a crashed group's,
  // which this group's rank 0 is about to replace; a rank waits instead of attaching.
  std::uint64_t creator_start;
  // The first rank whose sizes differ from geo claims refused_by (rank + 1), writes its
  // sizes, then sets refused_ready: the ranks waiting for the others to attach fail at
  // once with the mismatch instead of at the bootstrap deadline.
  std::uint32_t refused_by;
  std::uint32_t refused_ready;
  shm_geometry refused_geo;
};

/// Per-rank control block; each group of words is on its own cache line so that a
/// spinning reader never shares a line with an unrelated writer.
/// Room for a failed rank's cause (rank_ctl::cause), terminator included.
inline constexpr std::size_t rank_cause_bytes = 512;

struct rank_ctl {
  // Wake line: peers bump `bell` and FUTEX_WAKE it when `sleeping` is set.
  alignas(cache_line) std::uint32_t bell;
  std::uint32_t sleeping;
  // Identity line: who this rank is (for dead-peer detection) and whether it left.
  alignas(cache_line) std::int32_t pid;
  std::uint32_t state;       // rank_state
  std::uint64_t start_time;  // /proc/<pid>/stat field 22; tells a reused pid apart
  std::uint64_t entered;     // calls this rank has entered (the stall inspector's board)
  // Flag lines 2 and 3 (flags 0 and 1 share the first line of their slot).
  alignas(cache_line) std::uint64_t stage;
  alignas(cache_line) std::uint64_t done;
  // Why this rank failed, NUL-terminated, written before `state` turns rs_failed: a
  // peer's error quotes it, so a failure keeps naming its first cause rank after rank.
  alignas(cache_line) char cause[rank_cause_bytes];
};

/// The head of a small slot: its flag and the call header share one cache line with
/// the first 8 payload bytes, so an 8-byte allreduce moves one line per rank.
struct slot_head {
  std::uint64_t stamp;
  std::byte header[48];
};
static_assert(sizeof(slot_head) == 56);

/// A single-producer single-consumer byte stream from one rank to another.
struct ring_ctl {
  alignas(cache_line) std::uint64_t head;  // bytes consumed (written by the receiver)
  alignas(cache_line) std::uint64_t tail;  // bytes produced (written by the sender)
};

/// Where everything is, computed identically by every rank from the geometry.
struct shm_layout {
  shm_geometry geo;
  std::size_t ctl_stride = 0, ctl_off = 0;
  std::size_t slot_stride = 0;  // bytes per slot (head + payload), line-aligned
  std::size_t ring_stride = 0, ring_off = 0;
  std::size_t exch_off = 0;
  std::size_t heap_off = 0;  // everything before it is touched at mapping time
  std::size_t total = 0;

  explicit shm_layout(const shm_geometry& g) : geo(g) {
    slot_stride = round_up(sizeof(slot_head) + g.slot_bytes, cache_line);
    ctl_stride = round_up(sizeof(rank_ctl) + 2 * slot_stride, page_bytes);
    ctl_off = page_bytes;
    ring_stride = round_up(sizeof(ring_ctl) + g.ring_bytes, page_bytes);
    ring_off = ctl_off + g.ranks * ctl_stride;
    exch_off = ring_off + g.ranks * g.ranks * ring_stride;  // the diagonal stays unused
    heap_off = exch_off + g.ranks * round_up(g.exchange_bytes, page_bytes);
    total = heap_off + g.ranks * round_up(g.heap_bytes, page_bytes);
  }
};

/// Reads field 22 (start time in clock ticks) of /proc/<pid>/stat and its state letter.
GRADSYNC_DECL bool read_proc_stat(int pid, std::uint64_t& start, char& state);

/// False when process `pid` (started at `start`) is gone: exited, killed (even while it
/// is an unreaped zombie), or its pid now belongs to another process.
GRADSYNC_DECL bool process_alive(int pid, std::uint64_t start);

/// The inode of this process's PID namespace (/proc/self/ns/pid), 0 when unknown: pids
/// and start times mean the same only between processes of one namespace.
GRADSYNC_DECL std::uint32_t pid_namespace();

/// The segment name for a job: "/gradsync-<uid>-<job>", with the job id restricted to
/// [A-Za-z0-9._-] so any launcher-provided id maps to a valid name.
GRADSYNC_DECL std::string segment_name(std::string_view job);

/// What the job id's roster (shm_roster) knows of a rank the bootstrap still waits for.
class rank_whereabouts {
 public:
  /// Why rank r will never attach ("" while it may): it claimed its place and exited.
  virtual std::string gone(std::size_t r) const = 0;
  /// Rank r at the bootstrap deadline: it never claimed its place, or which pid holds it.
  virtual std::string seen(std::size_t r) const = 0;

 protected:
  ~rank_whereabouts() = default;
};

/// A mapped segment. Rank 0 creates it; the others attach; the last one to attach
/// unlinks the name. Unmapped on destruction.
class shm_segment {
 public:
  /// `roster` (optional): a rank it says is gone stops the bootstrap at once
  /// (errc::peer_lost) instead of at `until`, and the deadline's error says where the
  /// missing ranks are.
  GRADSYNC_DECL shm_segment(std::size_t rank, const shm_geometry& geo, std::string_view job,
                            deadline until, const rank_whereabouts* roster = nullptr);
  shm_segment(const shm_segment&) = delete;
  shm_segment& operator=(const shm_segment&) = delete;
  GRADSYNC_DECL ~shm_segment();

  const shm_layout& layout() const { return layout_; }
  const std::string& name() const { return name_; }
  std::byte* base() const { return base_; }

  rank_ctl& ctl(std::size_t r) const {
    return *reinterpret_cast<rank_ctl*>(base_ + layout_.ctl_off + r * layout_.ctl_stride);
  }
  slot_head& slot(std::size_t r, std::size_t parity) const {
    return *reinterpret_cast<slot_head*>(base_ + layout_.ctl_off + r * layout_.ctl_stride +
                                         sizeof(rank_ctl) + parity * layout_.slot_stride);
  }
  ring_ctl& ring(std::size_t src, std::size_t dst) const {
    return *reinterpret_cast<ring_ctl*>(base_ + layout_.ring_off +
                                        (src * layout_.geo.ranks + dst) * layout_.ring_stride);
  }
  std::byte* ring_data(std::size_t src, std::size_t dst) const {
    return reinterpret_cast<std::byte*>(&ring(src, dst)) + sizeof(ring_ctl);
  }
  std::byte* exchange(std::size_t r) const {
    return base_ + layout_.exch_off + r * round_up(layout_.geo.exchange_bytes, page_bytes);
  }
  std::byte* heap(std::size_t r) const {
    return base_ + layout_.heap_off + r * round_up(layout_.geo.heap_bytes, page_bytes);
  }

 private:
  seg_header& header() const { return *reinterpret_cast<seg_header*>(base_); }

  GRADSYNC_DECL static std::string describe(const shm_geometry& g);

  [[noreturn]] GRADSYNC_DECL void fail(errc code, const std::string& what) const;
  [[noreturn]] GRADSYNC_DECL void fail_errno(const char* call) const;

  // Maps the whole segment; pre-faults everything but the heaps, whose pages are only
  // allocated when their owner first writes them.
  GRADSYNC_DECL void map(int fd, std::size_t bytes);

  GRADSYNC_DECL void create();

  GRADSYNC_DECL void attach(deadline until, const rank_whereabouts* roster);

  // True once a live rank 0 has published the header (a dead creator's is a crashed
  // group's); throws errc::mismatch (closing fd) when its geometry differs from this rank's.
  GRADSYNC_DECL bool header_ready(int fd);

  GRADSYNC_DECL bool same_geometry(const shm_geometry& g) const;

  // Posts this rank's sizes as the refusal that the waiting ranks report (the first
  // refusing rank's only).
  GRADSYNC_DECL void refuse(seg_header& h) const noexcept;

  GRADSYNC_DECL void check_geometry(const shm_geometry& g) const;

  // Publishes this rank's identity, unlinks the name when this is the last rank to
  // attach, and waits until every rank has attached and the name is gone: the last rank
  // counts itself only after its shm_unlink (n - 1 -> n + 1, skipping n), so no rank
  // returns while the name still exists.
  GRADSYNC_DECL void announce(deadline until, const rank_whereabouts* roster);

  shm_layout layout_;
  std::string name_;
  std::size_t rank_;
  std::byte* base_ = nullptr;
  bool created_ = false;  // this rank created the name (and may unlink it on failure)
};

}  // namespace gradsync::transport::detail

#if GRADSYNC_HEADER_ONLY
#include "gradsync/transport/shm/segment.ipp"
#endif
