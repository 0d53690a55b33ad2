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
inline bool read_proc_stat(int pid, std::uint64_t& start, char& state) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (!f) return false;
  char buf[1024];
  const std::size_t got = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[got] = '\0';
  const char* p = std::strrchr(buf, ')');  // the command name may contain spaces
  if (!p) return false;
  p += 2;
  state = *p;
  for (int field = 3; field < 22 && *p; ++p) {
    if (*p == ' ') ++field;
  }
  start = std::strtoull(p, nullptr, 10);
  return true;
}

/// False when process `pid` (started at `start`) is gone: exited, killed (even while it
/// is an unreaped zombie), or its pid now belongs to another process.
inline bool process_alive(int pid, std::uint64_t start) {
  if (pid <= 0) return true;  // not attached yet: nothing to judge
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::uint64_t now_start = 0;
  char st = '?';
  if (!read_proc_stat(pid, now_start, st)) return true;  // no /proc: trust kill()
  if (st == 'Z' || st == 'X') return false;
  return start == 0 || now_start == start;
}

/// The segment name for a job: "/gradsync-<uid>-<job>", with the job id restricted to
/// [A-Za-z0-9._-] so any launcher-provided id maps to a valid name.
inline std::string segment_name(std::string_view job) {
  std::string name = "/gradsync-" + std::to_string(::geteuid()) + "-";
  for (char c : job.substr(0, 200)) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    name += ok ? c : '_';
  }
  return name;
}

/// A mapped segment. Rank 0 creates it; the others attach; the last one to attach
/// unlinks the name. Unmapped on destruction.
class shm_segment {
 public:
  shm_segment(std::size_t rank, const shm_geometry& geo, std::string_view job, deadline until)
      : layout_(geo), name_(segment_name(job)), rank_(rank) {
    try {
      if (rank == 0) {
        create();
      } else {
        attach(until);
      }
      announce(until);
    } catch (...) {
      if (base_) ::munmap(base_, layout_.total);
      ::shm_unlink(name_.c_str());  // a failed bootstrap must not leave the name behind
      throw;
    }
  }
  shm_segment(const shm_segment&) = delete;
  shm_segment& operator=(const shm_segment&) = delete;
  ~shm_segment() {
    if (base_) ::munmap(base_, layout_.total);
  }

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

  static std::string describe(const shm_geometry& g) {
    return std::to_string(g.ranks) + " ranks (slot " + std::to_string(g.slot_bytes) + ", ring " +
           std::to_string(g.ring_bytes) + ", exchange " + std::to_string(g.exchange_bytes) +
           ", heap " + std::to_string(g.heap_bytes) + " bytes)";
  }

  [[noreturn]] void fail(errc code, const std::string& what) const {
    throw error(code, {rank_, error_site::npos, ~std::uint64_t{0}},
                "shm segment " + name_ + ": " + what);
  }
  [[noreturn]] void fail_errno(const char* call) const {
    fail(errc::transport, std::string(call) + " failed: " + std::strerror(errno));
  }

  // Maps the whole segment; pre-faults everything but the heaps, whose pages are only
  // allocated when their owner first writes them.
  void map(int fd, std::size_t bytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED && layout_.heap_off > 0) {
      void* q = ::mmap(p, layout_.heap_off, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_FIXED | MAP_POPULATE, fd, 0);
      if (q == MAP_FAILED) {
        const int e = errno;
        ::munmap(p, bytes);
        errno = e;
        p = MAP_FAILED;
      }
    }
    if (p == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      errno = e;
      fail_errno("mmap");
    }
    base_ = static_cast<std::byte*>(p);
  }

  void create() {
    const int fd = ::shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
      if (errno == EEXIST) {
        fail(errc::transport,
             "already exists: another job uses the same job id (GRADSYNC_SHM_JOB), or a job "
             "with that id crashed before all its ranks attached; pick a new id or remove "
             "/dev/shm" +
                 name_);
      }
      fail_errno("shm_open(O_CREAT|O_EXCL)");
    }
    // tmpfs allocates pages on first touch: a segment larger than the free space maps
    // fine and then dies of SIGBUS. Refuse it here, by name (Docker's default /dev/shm
    // is 64 MiB).
    struct statvfs vs {};
    if (::fstatvfs(fd, &vs) == 0 && vs.f_frsize > 0) {
      const unsigned long long free_bytes = static_cast<unsigned long long>(vs.f_bavail) *
                                            static_cast<unsigned long long>(vs.f_frsize);
      if (free_bytes < layout_.total) {
        ::close(fd);
        fail(errc::transport, "needs " + std::to_string(layout_.total) + " bytes for " +
                                  describe(layout_.geo) + " but the shared-memory filesystem has " +
                                  std::to_string(free_bytes) +
                                  " bytes free; enlarge /dev/shm (e.g. docker --shm-size) or lower "
                                  "shm_options::exchange_bytes / heap_bytes");
      }
    }
    if (::fchmod(fd, 0600) != 0 || ::ftruncate(fd, static_cast<off_t>(layout_.total)) != 0) {
      const int e = errno;
      ::close(fd);
      errno = e;
      fail_errno("ftruncate");
    }
    map(fd, layout_.total);
    ::close(fd);
    seg_header& h = header();
    h.geo = layout_.geo;
    h.total_bytes = layout_.total;
    h.creator_pid = static_cast<std::uint32_t>(::getpid());
    shared_word(h.magic).store(seg_header::magic_value, std::memory_order_release);
  }

  void attach(deadline until) {
    int fd = -1;
    for (;;) {  // rank 0 may not have created (or sized, or initialized) it yet
      if (fd < 0) fd = ::shm_open(name_.c_str(), O_RDWR, 0);
      if (fd < 0 && errno != ENOENT) fail_errno("shm_open");
      if (fd >= 0) {
        struct stat st {};
        if (::fstat(fd, &st) != 0) fail_errno("fstat");
        if (st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
          ::close(fd);
          fail(errc::transport, "is not private to this user (owner or mode differ from 0600)");
        }
        if (static_cast<std::size_t>(st.st_size) >= page_bytes && header_ready(fd)) {
          // Rank 0 finished its layout: compare its sizes before mapping them all.
          if (static_cast<std::size_t>(st.st_size) >= layout_.total) {
            map(fd, layout_.total);
            ::close(fd);
            break;
          }
          ::close(fd);
          fail(errc::mismatch, "rank 0 created it for a different layout (" +
                                   std::to_string(st.st_size) + " bytes, this rank expects " +
                                   std::to_string(layout_.total) + ")");
        }
      }
      if (until.expired()) {
        if (fd >= 0) ::close(fd);
        fail(errc::timeout,
             "rank 0 did not create the segment before the bootstrap deadline "
             "(is rank 0 running with the same GRADSYNC_SHM_JOB and size?)");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    check_geometry(header().geo);
  }

  // True once rank 0 has published the header; throws errc::mismatch (closing fd) when
  // its geometry differs from this rank's.
  bool header_ready(int fd) {
    void* p = ::mmap(nullptr, page_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return false;
    auto* h = static_cast<seg_header*>(p);
    const bool ready =
        shared_word(h->magic).load(std::memory_order_acquire) == seg_header::magic_value;
    const shm_geometry g = h->geo;
    const bool differs = ready && !same_geometry(g);
    if (differs) refuse(*h);
    ::munmap(p, page_bytes);
    if (differs) {
      ::close(fd);
      check_geometry(g);  // throws the mismatch
    }
    return ready;
  }

  bool same_geometry(const shm_geometry& g) const {
    return g.ranks == layout_.geo.ranks && g.slot_bytes == layout_.geo.slot_bytes &&
           g.ring_bytes == layout_.geo.ring_bytes &&
           g.exchange_bytes == layout_.geo.exchange_bytes && g.heap_bytes == layout_.geo.heap_bytes;
  }

  // Posts this rank's sizes as the refusal that the waiting ranks report (the first
  // refusing rank's only).
  void refuse(seg_header& h) const noexcept {
    std::uint32_t none = 0;
    if (shared_word(h.refused_by)
            .compare_exchange_strong(none, static_cast<std::uint32_t>(rank_ + 1),
                                     std::memory_order_acq_rel)) {
      h.refused_geo = layout_.geo;
      shared_word(h.refused_ready).store(1u, std::memory_order_release);
    }
  }

  void check_geometry(const shm_geometry& g) const {
    if (!same_geometry(g)) {
      fail(errc::mismatch, "rank 0 created it for " + describe(g) + " but this rank expects " +
                               describe(layout_.geo) +
                               " (every rank must pass the same shm_options sizes)");
    }
  }

  // Publishes this rank's identity, unlinks the name when this is the last rank to
  // attach, and waits until every rank has attached and the name is gone: the last rank
  // counts itself only after its shm_unlink (n - 1 -> n + 1, skipping n), so no rank
  // returns while the name still exists.
  void announce(deadline until) {
    rank_ctl& c = ctl(rank_);
    std::uint64_t start = 0;
    char st = '?';
    read_proc_stat(::getpid(), start, st);
    c.start_time = start;
    shared_word(c.pid).store(static_cast<std::int32_t>(::getpid()), std::memory_order_relaxed);
    shared_word(c.state).store(rs_attached, std::memory_order_release);
    const std::uint32_t n = static_cast<std::uint32_t>(layout_.geo.ranks);
    auto attached = shared_word(header().attached);
    if (attached.fetch_add(1, std::memory_order_acq_rel) + 1 == n) {
      ::shm_unlink(name_.c_str());
      attached.fetch_add(1, std::memory_order_acq_rel);  // n + 1: attached and unlinked
    }
    while (attached.load(std::memory_order_acquire) <= n) {
      seg_header& h = header();
      if (shared_word(h.refused_ready).load(std::memory_order_acquire) != 0) {
        fail(errc::mismatch, "rank " + std::to_string(h.refused_by - 1) + " expects " +
                                 describe(h.refused_geo) + " but rank 0 created it for " +
                                 describe(h.geo) +
                                 " (every rank must pass the same shm_options sizes)");
      }
      if (until.expired()) {
        const std::uint32_t seen = std::min(attached.load(), n);
        std::string missing;  // the ranks that never attached, named
        std::size_t absent = 0;
        for (std::size_t r = 0; r < n; ++r) {
          if (shared_word(ctl(r).state).load(std::memory_order_acquire) == rs_absent) {
            missing += (missing.empty() ? "" : ", ") + std::to_string(r);
            ++absent;
          }
        }
        fail(errc::timeout, "only " + std::to_string(seen) + " of " + std::to_string(n) +
                                " ranks attached before the bootstrap deadline (missing: " +
                                (absent == 1 ? "rank " : "ranks ") + missing + ")");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  shm_layout layout_;
  std::string name_;
  std::size_t rank_;
  std::byte* base_ = nullptr;
};

}  // namespace gradsync::transport::detail
