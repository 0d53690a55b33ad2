// SPDX-License-Identifier: Apache-2.0
// The functions roster.hpp declares: inline in a header-only build, compiled once by
// <gradsync/src.hpp> under GRADSYNC_SEPARATE_COMPILATION (config.hpp).
#pragma once

#include "gradsync/transport/shm/roster.hpp"

namespace gradsync::transport::detail {

GRADSYNC_DECL std::string roster_name(std::string_view job) {
  return segment_name(job) + "+ranks";  // '+' never appears in a sanitised job id
}

GRADSYNC_DECL shm_roster::shm_roster(std::size_t rank, std::size_t ranks, std::string_view job,
                                     deadline until)
    : name_(roster_name(job)), job_(job), rank_(rank), ranks_(ranks) {
  try {
    for (;;) {
      if (rank_ == 0 && create()) break;
      if (open_existing(until)) {
        if (claim_rank()) break;
        unmap();  // a group that used the id is leaving it: wait for the next roster
      }
      if (until.expired()) {
        fail(errc::timeout, rank_ == 0 ? "another process kept replacing it until the deadline"
                                       : "rank 0 did not create it before the bootstrap deadline "
                                         "(is rank 0 running with the same GRADSYNC_SHM_JOB?)");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  } catch (...) {
    unmap();
    throw;
  }
}

GRADSYNC_DECL shm_roster::~shm_roster() {
  if (!base_) return;
  if (holds_ && !told_.load(std::memory_order_relaxed)) {
    // A second job's process came after this group's last call: too late to stop it, but
    // not to say that its results may hold both jobs' data.
    if (const std::string p = poison(); !p.empty()) {
      log(log_level::warn, rank_,
          "shm job id roster %s: after this group's last call: %s (the calls it ran may have "
          "mixed both jobs' data)",
          name_.c_str(), p.c_str());
    }
  }
  if (holds_) {
    // seq_cst: of two holders leaving at once, at least one sees the other's release.
    shared_word(claim(rank_).released).store(1u, std::memory_order_seq_cst);
    // The last holder to leave removes the name; a holder that crashed counts as gone.
    bool others = false;
    const std::size_t n = std::min<std::size_t>(ranks_, header().ranks);
    for (std::size_t r = 0; r < n && !others; ++r) {
      if (r == rank_) continue;
      roster_claim& c = claim(r);
      const int pid = shared_word(c.pid).load(std::memory_order_acquire);
      others = pid != 0 && shared_word(c.released).load(std::memory_order_seq_cst) == 0 &&
               process_alive(pid, c.start_time);
    }
    if (!others) retire();
  }
  unmap();
}

GRADSYNC_DECL void shm_roster::fail(errc code, const std::string& what) const {
  throw error(code, {rank_, error_site::npos, ~std::uint64_t{0}},
              "shm job id roster " + name_ + ": " + what);
}

GRADSYNC_DECL void shm_roster::fail_errno(const char* call) const {
  fail(errc::transport, std::string(call) + " failed: " + std::strerror(errno));
}

GRADSYNC_DECL bool shm_roster::create() {
  const int fd = ::shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    if (errno == EEXIST) return false;
    fail_errno("shm_open(O_CREAT|O_EXCL)");
  }
  const std::size_t bytes = bytes_for(ranks_);
  void* p = MAP_FAILED;
  if (::fchmod(fd, 0600) == 0 && ::ftruncate(fd, static_cast<off_t>(bytes)) == 0) {
    p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (p == MAP_FAILED) {
    const int e = errno;
    ::close(fd);
    ::shm_unlink(name_.c_str());
    errno = e;
    fail_errno("creating it (ftruncate or mmap)");
  }
  ::close(fd);
  base_ = static_cast<std::byte*>(p);
  mapped_ = bytes;
  roster_header& h = header();
  h.ranks = ranks_;
  h.pid_ns = pid_namespace();
  std::uint64_t start = 0;
  char st = '?';
  read_proc_stat(::getpid(), start, st);
  claim(0).start_time = start;
  claim(0).pid = static_cast<std::int32_t>(::getpid());
  holds_ = true;
  shared_word(h.opened).fetch_add(1, std::memory_order_acq_rel);
  shared_word(h.settled).fetch_add(1, std::memory_order_acq_rel);
  shared_word(h.magic).store(roster_header::magic_value, std::memory_order_release);
  sweep_stale();
  return true;
}

GRADSYNC_DECL void shm_roster::sweep_stale() const {
  DIR* dir = ::opendir("/dev/shm");
  if (!dir) return;
  const std::string prefix = "gradsync-" + std::to_string(::geteuid()) + "-";
  const std::string suffix = "+ranks";
  while (const dirent* e = ::readdir(dir)) {
    const std::string n = e->d_name;
    if (n.size() <= prefix.size() + suffix.size() || n.compare(0, prefix.size(), prefix) != 0 ||
        n.compare(n.size() - suffix.size(), suffix.size(), suffix) != 0 || "/" + n == name_) {
      continue;
    }
    const int fd = ::shm_open(("/" + n).c_str(), O_RDWR, 0);
    if (fd < 0) continue;
    struct stat st {};
    void* p = MAP_FAILED;
    if (::fstat(fd, &st) == 0 && st.st_uid == ::geteuid() &&
        static_cast<std::size_t>(st.st_size) >= sizeof(roster_header)) {
      p = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED,
                 fd, 0);
    }
    ::close(fd);
    if (p == MAP_FAILED) continue;
    const shm_roster other("/" + n, static_cast<std::byte*>(p),
                           static_cast<std::size_t>(st.st_size));
    roster_header& h = other.header();
    const bool whole =
        shared_word(h.magic).load(std::memory_order_acquire) == roster_header::magic_value &&
        h.ranks > 0 && h.ranks <= (other.mapped_ - sizeof(roster_header)) / sizeof(roster_claim);
    if (whole && other.same_pid_namespace() && other.stale()) other.retire();
  }  // `other` unmaps its view (it holds no claim)
  ::closedir(dir);
}

GRADSYNC_DECL bool shm_roster::open_existing(deadline until) {
  const int fd = ::shm_open(name_.c_str(), O_RDWR, 0);
  if (fd < 0) {
    if (errno == ENOENT) return false;
    fail_errno("shm_open");
  }
  // Its creator sizes it right after creating it; until then mapping it would fault.
  struct stat st {};
  for (;;) {
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
    if (static_cast<std::size_t>(st.st_size) >= sizeof(roster_header)) break;
    if (until.expired()) {
      ::close(fd);
      fail(errc::timeout,
           "exists but was never sized (its creator died at once?); remove /dev/shm" + name_);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  const auto bytes = static_cast<std::size_t>(st.st_size);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int e = errno;
  ::close(fd);
  if (p == MAP_FAILED) {
    errno = e;
    fail_errno("mmap");
  }
  base_ = static_cast<std::byte*>(p);
  mapped_ = bytes;
  shared_word(header().opened).fetch_add(1, std::memory_order_acq_rel);
  while (shared_word(header().magic).load(std::memory_order_acquire) !=
         roster_header::magic_value) {
    if (until.expired()) {
      fail(errc::timeout,
           "its creator never finished writing it (it died at once?); remove /dev/shm" + name_);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  const std::uint64_t n = header().ranks;
  if (n == 0 || n > (mapped_ - sizeof(roster_header)) / sizeof(roster_claim)) {
    fail(errc::transport, "holds " + std::to_string(n) + " ranks, which its " +
                              std::to_string(mapped_) + " bytes cannot: it is corrupt");
  }
  const bool retired = shared_word(header().retired).load(std::memory_order_acquire) != 0;
  if (!retired && !same_pid_namespace()) {
    // Counted as settled first: that group's bootstrap waits for every opener to settle.
    shared_word(header().settled).fetch_add(1, std::memory_order_acq_rel);
    fail(errc::transport,
         "was created by a process in another PID namespace (pid:[" +
             std::to_string(header().pid_ns) + "]; this process is in pid:[" +
             std::to_string(pid_namespace()) +
             "]), whose process ids mean nothing here: either a job in another container "
             "that shares /dev/shm uses the same job id (GRADSYNC_SHM_JOB '" +
             job_ +
             "'), or this group's ranks run in different containers. An shm group's ranks "
             "must share a PID namespace (one container; docker --pid=container:NAME; "
             "Kubernetes shareProcessNamespace), and jobs that share /dev/shm need their own "
             "ids; if that container is gone, remove /dev/shm" +
             name_);
  }
  if (!retired && !stale()) return true;
  // A crashed group's roster (every claimant exited), or one being removed: rank 0
  // removes it and creates its own; the other ranks wait for that one.
  shared_word(header().settled).fetch_add(1, std::memory_order_acq_rel);
  if (rank_ == 0) retire();
  unmap();
  return false;
}

GRADSYNC_DECL bool shm_roster::stale() const {
  const std::size_t n = header().ranks;
  for (std::size_t r = 0; r < n; ++r) {
    roster_claim& c = claim(r);
    const int pid = shared_word(c.pid).load(std::memory_order_acquire);
    if (pid != 0 && shared_word(c.released).load(std::memory_order_acquire) == 0 &&
        process_alive(pid, c.start_time)) {
      return false;
    }
  }
  return true;
}

GRADSYNC_DECL std::string shm_roster::claimant(std::size_t r, int pid) {
  return "rank " + std::to_string(r) + " (pid " + std::to_string(pid) +
         ") claimed its place in the job id's roster ";
}

GRADSYNC_DECL std::string shm_roster::gone(std::size_t r) const {
  if (!base_ || r >= header().ranks) return {};
  roster_claim& c = claim(r);
  const int pid = shared_word(c.pid).load(std::memory_order_acquire);
  if (pid == 0) return {};
  if (shared_word(c.released).load(std::memory_order_acquire) != 0) {
    return claimant(r, pid) + "and closed its transport";
  }
  return process_alive(pid, c.start_time) ? std::string() : claimant(r, pid) + "and exited";
}

GRADSYNC_DECL std::string shm_roster::seen(std::size_t r) const {
  if (!base_ || r >= header().ranks) return {};
  const int pid = shared_word(claim(r).pid).load(std::memory_order_acquire);
  if (pid == 0) {
    return "rank " + std::to_string(r) +
           " never claimed its place in the job id's roster (not started, or started with "
           "another GRADSYNC_SHM_JOB)";
  }
  return claimant(r, pid) + "but did not attach";
}

GRADSYNC_DECL bool shm_roster::same_pid_namespace() const {
  const std::uint32_t theirs = header().pid_ns;
  return theirs == 0 || theirs == pid_namespace();
}

GRADSYNC_DECL bool shm_roster::retire() const {
  if (!base_) return false;
  std::uint32_t no = 0;
  if (!shared_word(header().retired).compare_exchange_strong(no, 1u, std::memory_order_acq_rel))
    return false;
  ::shm_unlink(name_.c_str());
  return true;
}

GRADSYNC_DECL void shm_roster::unmap() {
  if (base_) ::munmap(base_, mapped_);
  base_ = nullptr;
  mapped_ = 0;
}

GRADSYNC_DECL void shm_roster::post_poison(const std::string& why) const {
  roster_header& h = header();
  std::uint32_t none = 0;
  if (!shared_word(h.poisoned).compare_exchange_strong(none, 1u, std::memory_order_acq_rel)) return;
  const std::size_t n = std::min(why.size(), sizeof h.poison - 1);
  std::memcpy(h.poison, why.data(), n);
  h.poison[n] = '\0';
  shared_word(h.poison_ready).store(1u, std::memory_order_release);
}

GRADSYNC_DECL bool shm_roster::claim_rank() {
  roster_header& h = header();
  const std::string pid_s = std::to_string(::getpid());
  // Counted as settled whatever happens below, so that the group's settle() ends.
  struct settle_on_exit {
    roster_header& h;
    ~settle_on_exit() { shared_word(h.settled).fetch_add(1, std::memory_order_acq_rel); }
  } settle{h};
  if (rank_ >= h.ranks) {
    const std::string why = "rank " + std::to_string(rank_) + " (pid " + pid_s +
                            ") came for a group of " + std::to_string(h.ranks) +
                            " ranks: two jobs of different sizes use the same job id "
                            "(GRADSYNC_SHM_JOB) at once, or the ranks disagree on the size";
    post_poison(why);
    fail(errc::mismatch, why);
  }
  roster_claim& c = claim(rank_);
  std::uint64_t start = 0;
  char st = '?';
  read_proc_stat(::getpid(), start, st);
  std::int32_t holder = 0;
  if (shared_word(c.pid).compare_exchange_strong(holder, static_cast<std::int32_t>(::getpid()),
                                                 std::memory_order_acq_rel)) {
    c.start_time = start;
    holds_ = true;
    return true;
  }
  // Its holder closed its transport or exited: the group that used the id is ending (a
  // process may start its next group with the same id while a peer still leaves the last).
  if (shared_word(c.released).load(std::memory_order_acquire) != 0 ||
      !process_alive(holder, c.start_time)) {
    return false;
  }
  // A second rank 0 poisons too: the group's other places may already be held by the
  // second job's ranks (its rank 1 first to claim), whose own late rank would find the
  // roster gone and say nothing (issue 54's trials: both jobs finished, mixed, in 1 of 20).
  const std::string rank_s = std::to_string(rank_);
  const std::string why = "rank " + rank_s + "'s place is already taken by pid " +
                          std::to_string(holder) + " when pid " + pid_s + " came to claim it: " +
                          "two jobs use the same job id (GRADSYNC_SHM_JOB '" + job_ +
                          "') at once, so this group may hold ranks of both and stops; give "
                          "each job its own id";
  post_poison(why);
  fail(errc::transport, why);
}

GRADSYNC_DECL void shm_roster::settle(deadline until) const {
  roster_header& h = header();
  for (;;) {
    const std::string p = take_poison();
    if (!p.empty()) fail(errc::transport, p);
    const std::uint32_t opened = shared_word(h.opened).load(std::memory_order_acquire);
    const std::uint32_t settled = shared_word(h.settled).load(std::memory_order_acquire);
    if (settled >= opened) {
      const std::string last = take_poison();  // posted before its poster settled
      if (!last.empty()) fail(errc::transport, last);
      return;
    }
    if (until.expired()) {
      fail(errc::timeout, std::to_string(opened - settled) +
                              " process(es) opened it but never finished claiming a rank "
                              "before the bootstrap deadline");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

}  // namespace gradsync::transport::detail
