// SPDX-License-Identifier: Apache-2.0
// The roster of an shm job id: one page in /dev/shm, linked for as long as a group uses
// the id, in which each process claims its rank. The segment's name is removed once every
// rank has mapped it, so only the roster lets a process of a second job started with the
// same id see that the id is taken, whenever it comes. A second live claimant of any rank
// poisons the roster (the group may hold ranks of both jobs) and every member stops with
// its message, at the end of its bootstrap or at its next call.
#pragma once

#include <dirent.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "gradsync/config.hpp"
#include "gradsync/core/deadline.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/core/log.hpp"
#include "gradsync/transport/shm/segment.hpp"

namespace gradsync::transport::detail {

/// One rank's claim: the process holding it (0: free) and its start time.
struct roster_claim {
  std::int32_t pid;
  std::uint32_t released;  // 1 once its holder closed its transport
  std::uint64_t start_time;
};

/// First bytes of the roster; the claims follow it.
struct roster_header {
  static constexpr std::uint64_t magic_value = 0x31524f5453475247ull;  // "GRGSTOR1"
  std::uint64_t magic;  // written last by the creator (release): ranks and claim 0 are set
  std::uint64_t ranks;
  std::uint32_t opened;        // processes that mapped it ...
  std::uint32_t settled;       // ... and of those, the ones done claiming (or refused)
  std::uint32_t retired;       // set by the one process that removes the name
  std::uint32_t poisoned;      // set by the first process that found its rank taken ...
  std::uint32_t poison_ready;  // ... once it has written `poison`
  std::uint32_t pid_ns;        // the creator's PID namespace (pid_namespace(); 0: unknown)
  char poison[480];            // why the group must stop, NUL-terminated
};

/// The roster's name: the segment's, with a suffix no job id can produce.
GRADSYNC_DECL std::string roster_name(std::string_view job);

/// This process's claim on rank `rank` of a job id's roster, held until destruction.
class shm_roster final : public rank_whereabouts {
 public:
  /// Rank 0 creates the roster (replacing one whose claimants have all exited); the
  /// others wait for it until `until`. Throws errc::transport naming the collision when
  /// the rank is held by another live process, after poisoning the roster.
  GRADSYNC_DECL shm_roster(std::size_t rank, std::size_t ranks, std::string_view job,
                           deadline until);
  shm_roster(const shm_roster&) = delete;
  shm_roster& operator=(const shm_roster&) = delete;
  /// Releases the claim; the last live holder removes the name. A poison this holder never
  /// threw (it came after the group's last call) is logged as a warning.
  GRADSYNC_DECL ~shm_roster();

  /// Waits until every process that has mapped the roster is done claiming (so a second
  /// job's process that came during the bootstrap has had its say), then throws the
  /// poison if any. Called once every rank has attached the segment.
  GRADSYNC_DECL void settle(deadline until) const;

  /// The collision that stops this group, or empty: one load while nothing is wrong.
  std::string poison() const;
  /// poison(), for a caller about to throw it: the destructor then says nothing more.
  std::string take_poison() const {
    std::string p = poison();
    if (!p.empty()) told_.store(true, std::memory_order_relaxed);
    return p;
  }

  /// For the bootstrap's waits (shm_segment): rank r claimed its place and then exited
  /// or closed its transport ("" otherwise) ...
  GRADSYNC_DECL std::string gone(std::size_t r) const override;
  /// ... and, at the deadline, whether it ever claimed its place.
  GRADSYNC_DECL std::string seen(std::size_t r) const override;

  const std::string& name() const { return name_; }

  /// Removes the name once, whoever asks first (the retired flag); false if already done.
  /// The destructor calls it when this is the last live holder; a rank of a group that
  /// failed calls it at once (its claims are moot).
  GRADSYNC_DECL bool retire() const;

 private:
  // A view of another id's roster mapped at `base` (sweep_stale): holds no claim.
  shm_roster(std::string name, std::byte* base, std::size_t mapped)
      : name_(std::move(name)), rank_(0), ranks_(0), base_(base), mapped_(mapped) {}
  // Rank 0, once it holds its own roster: removes the rosters of any id whose claimants
  // all exited without their destructors (MPI_Abort, exit(), a kill). Under unique ids
  // (the MPI bootstrap's) no later group of that id would ever replace them.
  GRADSYNC_DECL void sweep_stale() const;

  roster_header& header() const { return *reinterpret_cast<roster_header*>(base_); }
  roster_claim& claim(std::size_t r) const {
    return reinterpret_cast<roster_claim*>(base_ + sizeof(roster_header))[r];
  }
  static std::size_t bytes_for(std::size_t ranks);

  [[noreturn]] GRADSYNC_DECL void fail(errc code, const std::string& what) const;
  [[noreturn]] GRADSYNC_DECL void fail_errno(const char* call) const;

  // Rank 0: creates the name (O_EXCL), sizes it, claims rank 0 and publishes the magic.
  // False when the name exists (another job's roster, or a stale one).
  GRADSYNC_DECL bool create();
  // Opens the existing name, maps it once it is sized and counts this process as an
  // opener. False when it vanished meanwhile.
  GRADSYNC_DECL bool open_existing(deadline until);
  // "rank r (pid P) claimed its place in the job id's roster " (gone() and seen()).
  GRADSYNC_DECL static std::string claimant(std::size_t r, int pid);
  // True when no claimant of the mapped roster is alive: it is a crashed group's.
  GRADSYNC_DECL bool stale() const;
  // False when the roster's creator is in another PID namespace (a container sharing
  // /dev/shm): its claims' pids mean nothing here, so it is neither judged nor joined.
  GRADSYNC_DECL bool same_pid_namespace() const;
  GRADSYNC_DECL void unmap();
  // Writes the first poison; later ones are dropped (the first names the collision).
  GRADSYNC_DECL void post_poison(const std::string& why) const;
  // Claims rank_ (compare-and-swap of this pid); false when its holder has left (the
  // roster is ending); refuses when another live process holds it.
  GRADSYNC_DECL bool claim_rank();

  std::string name_;
  std::string job_;
  std::size_t rank_;
  std::size_t ranks_;
  std::byte* base_ = nullptr;
  std::size_t mapped_ = 0;
  bool holds_ = false;                     // this process holds claim(rank_)
  mutable std::atomic<bool> told_{false};  // the poison was thrown here (take_poison)
};

inline std::size_t shm_roster::bytes_for(std::size_t ranks) {
  return round_up(sizeof(roster_header) + ranks * sizeof(roster_claim), page_bytes);
}

inline std::string shm_roster::poison() const {
  if (shared_word(header().poison_ready).load(std::memory_order_acquire) == 0) return {};
  const roster_header& h = header();
  std::size_t n = 0;
  while (n < sizeof h.poison && h.poison[n] != '\0') ++n;
  return std::string(h.poison, n);
}

}  // namespace gradsync::transport::detail

#if GRADSYNC_HEADER_ONLY
#include "gradsync/transport/shm/roster.ipp"
#endif
