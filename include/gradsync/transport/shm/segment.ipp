// SPDX-License-Identifier: Apache-2.0
// The functions segment.hpp declares: inline in a header-only build, compiled once by
// <gradsync/src.hpp> under GRADSYNC_SEPARATE_COMPILATION (config.hpp).
#pragma once

#include "gradsync/transport/shm/segment.hpp"

namespace gradsync::transport::detail {

GRADSYNC_DECL bool read_proc_stat(int pid, std::uint64_t& start, char& state) {
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

GRADSYNC_DECL bool process_alive(int pid, std::uint64_t start) {
  if (pid <= 0) return true;  // not attached yet: nothing to judge
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::uint64_t now_start = 0;
  char st = '?';
  if (!read_proc_stat(pid, now_start, st)) return true;  // no /proc: trust kill()
  if (st == 'Z' || st == 'X') return false;
  return start == 0 || now_start == start;
}

GRADSYNC_DECL std::uint32_t pid_namespace() {
  struct stat st {};
  if (::stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<std::uint32_t>(st.st_ino);  // the kernel's ns inode numbers are 32-bit
}

GRADSYNC_DECL std::string segment_name(std::string_view job) {
  std::string name = "/gradsync-" + std::to_string(::geteuid()) + "-";
  for (char c : job.substr(0, 200)) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    name += ok ? c : '_';
  }
  return name;
}

GRADSYNC_DECL shm_segment::shm_segment(std::size_t rank, const shm_geometry& geo,
                                       std::string_view job, deadline until,
                                       const rank_whereabouts* roster)
    : layout_(geo), name_(segment_name(job)), rank_(rank) {
  try {
    if (rank == 0) {
      create();
    } else {
      attach(until, roster);
    }
    announce(until, roster);
  } catch (...) {
    if (base_) ::munmap(base_, layout_.total);
    // A failed bootstrap must not leave its name behind, but only the rank that created
    // it may remove it: after EEXIST, or from a segment a rank attached to, the name is
    // another job's (same job id) and unlinking it would strand that job's ranks.
    if (created_) ::shm_unlink(name_.c_str());
    throw;
  }
}

GRADSYNC_DECL shm_segment::~shm_segment() {
  if (base_) ::munmap(base_, layout_.total);
}

GRADSYNC_DECL std::string shm_segment::describe(const shm_geometry& g) {
  return std::to_string(g.ranks) + " ranks (slot " + std::to_string(g.slot_bytes) + ", ring " +
         std::to_string(g.ring_bytes) + ", exchange " + std::to_string(g.exchange_bytes) +
         ", heap " + std::to_string(g.heap_bytes) + " bytes)";
}

GRADSYNC_DECL void shm_segment::fail(errc code, const std::string& what) const {
  throw error(code, {rank_, error_site::npos, ~std::uint64_t{0}},
              "shm segment " + name_ + ": " + what);
}

GRADSYNC_DECL void shm_segment::fail_errno(const char* call) const {
  fail(errc::transport, std::string(call) + " failed: " + std::strerror(errno));
}

GRADSYNC_DECL void shm_segment::map(int fd, std::size_t bytes) {
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

GRADSYNC_DECL void shm_segment::create() {
  int fd = ::shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0 && errno == EEXIST) {
    // Rank 0 holds the job id's roster (shm_roster), so a segment of that name is left
    // by a group of this id that crashed before all its ranks attached: replace it.
    ::shm_unlink(name_.c_str());
    fd = ::shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  }
  if (fd < 0) {
    if (errno == EEXIST) {
      fail(errc::transport,
           "already exists again after removing a crashed group's: a process that does not "
           "take the job id's roster (an older gradsync?) uses the same job id "
           "(GRADSYNC_SHM_JOB); give each job its own id");
    }
    fail_errno("shm_open(O_CREAT|O_EXCL)");
  }
  created_ = true;
  if (::fchmod(fd, 0600) != 0 || ::ftruncate(fd, static_cast<off_t>(layout_.total)) != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    fail_errno("ftruncate");
  }
  // tmpfs allocates pages on first touch: a segment larger than the free space maps
  // fine and then dies of SIGBUS, and so does one whose space another process takes
  // later. Reserve every page now and refuse it here, by name (Docker's default
  // /dev/shm is 64 MiB).
  if (const int e = ::posix_fallocate(fd, 0, static_cast<off_t>(layout_.total));
      e != 0 && e != EOPNOTSUPP && e != EINVAL) {
    struct statvfs vs {};
    const std::string free_bytes =
        ::fstatvfs(fd, &vs) == 0 ? std::to_string(static_cast<unsigned long long>(vs.f_bavail) *
                                                  static_cast<unsigned long long>(vs.f_frsize)) +
                                       " bytes free"
                                 : std::string("free space unknown");
    ::close(fd);
    fail(errc::transport, "needs " + std::to_string(layout_.total) + " bytes for " +
                              describe(layout_.geo) +
                              " but cannot reserve them on the shared-memory filesystem "
                              "/dev/shm (" +
                              free_bytes + "): " + std::strerror(e) +
                              "; enlarge /dev/shm (e.g. docker --shm-size) or lower "
                              "shm_options::exchange_bytes / heap_bytes");
  }
  map(fd, layout_.total);
  ::close(fd);
  seg_header& h = header();
  h.geo = layout_.geo;
  h.total_bytes = layout_.total;
  h.creator_pid = static_cast<std::uint32_t>(::getpid());
  char state = '?';
  read_proc_stat(::getpid(), h.creator_start, state);
  shared_word(h.magic).store(seg_header::magic_value, std::memory_order_release);
}

GRADSYNC_DECL void shm_segment::attach(deadline until, const rank_whereabouts* roster) {
  auto next_look = clock::now();
  for (;;) {  // rank 0 may not have created (or sized, or initialized) it yet
    // Opened anew on every try: the name may still be a crashed group's segment, which
    // this group's rank 0 unlinks and creates again.
    const int fd = ::shm_open(name_.c_str(), O_RDWR, 0);
    if (fd < 0 && errno != ENOENT) fail_errno("shm_open");
    if (fd >= 0) {
      struct stat st {};
      if (::fstat(fd, &st) != 0) {
        const int e = errno;
        ::close(fd);
        errno = e;
        fail_errno("fstat");
      }
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
      ::close(fd);
    }
    if (roster && clock::now() >= next_look) {  // /proc reads: every 20 ms
      if (const std::string g = roster->gone(0); !g.empty()) {
        fail(errc::peer_lost, g + " before creating the segment: the group cannot form");
      }
      next_look = clock::now() + std::chrono::milliseconds(20);
    }
    if (until.expired()) {
      fail(errc::timeout,
           "rank 0 did not create the segment before the bootstrap deadline "
           "(is rank 0 running with the same GRADSYNC_SHM_JOB and size?)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  check_geometry(header().geo);
}

GRADSYNC_DECL bool shm_segment::header_ready(int fd) {
  void* p = ::mmap(nullptr, page_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return false;
  auto* h = static_cast<seg_header*>(p);
  // A crashed group's segment (its creator is gone) is not this group's, whatever it holds.
  const bool ready =
      shared_word(h->magic).load(std::memory_order_acquire) == seg_header::magic_value &&
      process_alive(static_cast<int>(h->creator_pid), h->creator_start);
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

GRADSYNC_DECL bool shm_segment::same_geometry(const shm_geometry& g) const {
  return g.ranks == layout_.geo.ranks && g.slot_bytes == layout_.geo.slot_bytes &&
         g.ring_bytes == layout_.geo.ring_bytes && g.exchange_bytes == layout_.geo.exchange_bytes &&
         g.heap_bytes == layout_.geo.heap_bytes;
}

GRADSYNC_DECL void shm_segment::refuse(seg_header& h) const noexcept {
  std::uint32_t none = 0;
  if (shared_word(h.refused_by)
          .compare_exchange_strong(none, static_cast<std::uint32_t>(rank_ + 1),
                                   std::memory_order_acq_rel)) {
    h.refused_geo = layout_.geo;
    shared_word(h.refused_ready).store(1u, std::memory_order_release);
  }
}

GRADSYNC_DECL void shm_segment::check_geometry(const shm_geometry& g) const {
  if (!same_geometry(g)) {
    fail(errc::mismatch, "rank 0 created it for " + describe(g) + " but this rank expects " +
                             describe(layout_.geo) +
                             " (every rank must pass the same shm_options sizes)");
  }
}

GRADSYNC_DECL void shm_segment::announce(deadline until, const rank_whereabouts* roster) {
  rank_ctl& c = ctl(rank_);
  std::uint64_t start = 0;
  char st = '?';
  read_proc_stat(::getpid(), start, st);
  // Claim this rank's place: a process of another job started with the same job id (and
  // this rank number) may have attached first. Taking its place would put two processes
  // in one rank (and count one rank twice), so refuse, touching nothing of that job.
  std::int32_t holder = 0;
  if (!shared_word(c.pid).compare_exchange_strong(holder, static_cast<std::int32_t>(::getpid()),
                                                  std::memory_order_acq_rel)) {
    fail(errc::transport, "rank " + std::to_string(rank_) + "'s place is already taken by pid " +
                              std::to_string(holder) +
                              ": two jobs use the same job id (GRADSYNC_SHM_JOB) at once; give "
                              "each job its own id");
  }
  c.start_time = start;
  shared_word(c.state).store(rs_attached, std::memory_order_release);
  const std::uint32_t n = static_cast<std::uint32_t>(layout_.geo.ranks);
  auto attached = shared_word(header().attached);
  if (attached.fetch_add(1, std::memory_order_acq_rel) + 1 == n) {
    ::shm_unlink(name_.c_str());
    attached.fetch_add(1, std::memory_order_acq_rel);  // n + 1: attached and unlinked
  }
  auto next_look = clock::now();
  while (attached.load(std::memory_order_acquire) <= n) {
    seg_header& h = header();
    if (shared_word(h.refused_ready).load(std::memory_order_acquire) != 0) {
      fail(errc::mismatch, "rank " + std::to_string(h.refused_by - 1) + " expects " +
                               describe(h.refused_geo) + " but rank 0 created it for " +
                               describe(h.geo) +
                               " (every rank must pass the same shm_options sizes)");
    }
    if (roster && clock::now() >= next_look) {  // a rank that claimed its place and died
      for (std::size_t r = 0; r < n; ++r) {
        if (shared_word(ctl(r).state).load(std::memory_order_acquire) != rs_absent) continue;
        // A rank that refused the sizes posted that before it closed its transport: the
        // mismatch is the better message, on the next turn.
        if (const std::string g = roster->gone(r);
            !g.empty() && shared_word(h.refused_ready).load(std::memory_order_acquire) == 0) {
          fail(errc::peer_lost, g + " before attaching the segment: the group cannot form");
        }
      }
      next_look = clock::now() + std::chrono::milliseconds(20);
    }
    if (until.expired()) {
      const std::uint32_t seen = std::min(attached.load(), n);
      std::string missing, where;  // the ranks that never attached, named
      std::size_t absent = 0;
      for (std::size_t r = 0; r < n; ++r) {
        if (shared_word(ctl(r).state).load(std::memory_order_acquire) == rs_absent) {
          missing += (missing.empty() ? "" : ", ") + std::to_string(r);
          ++absent;
          if (roster) where += "; " + roster->seen(r);
        }
      }
      fail(errc::timeout, "only " + std::to_string(seen) + " of " + std::to_string(n) +
                              " ranks attached before the bootstrap deadline (missing: " +
                              (absent == 1 ? "rank " : "ranks ") + missing + ")" + where);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

}  // namespace gradsync::transport::detail
