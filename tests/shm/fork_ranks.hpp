// SPDX-License-Identifier: Apache-2.0
// A launcher for shm tests: forks N processes that bootstrap transport::shm from the
// environment (GRADSYNC_SHM_RANK / _SIZE / _JOB), runs a body in each, and brings back
// what each rank reported (labelled results, the error it ended with, its exit status)
// through an anonymous shared mapping. Children die with the parent (PR_SET_PDEATHSIG)
// and are killed when the run exceeds its time limit, so a hang fails instead of stalling.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gradsync/core/error.hpp>
#include <gradsync/transport/shm.hpp>

namespace gradsync::testbed {

/// One labelled result a rank reports (compared across ranks by the parent).
struct rank_record {
  char label[64];
  std::uint64_t wrong;  // elements differing from the exact expected result
  std::uint64_t hash;   // fnv1a64 of the result bytes (bitwise identity across ranks)
};

/// What a rank ended with.
struct rank_outcome {
  int status = 0;      // exit code, or -signal when killed
  int error_code = 0;  // gradsync::errc of the exception that ended the body, 0 if none
  double seconds = 0;  // time from start of the body to its end (or the error)
  std::string what;    // the exception's message
  std::vector<rank_record> records;
};

namespace detail {
struct shared_rank {
  int error_code;
  double seconds;
  char what[2048];
  std::uint64_t progress;  // bumped by the body (the parent can watch it)
  std::size_t nrecords;
};
}  // namespace detail

/// Handed to the body in each child.
class rank_env {
 public:
  rank_env(detail::shared_rank* s, rank_record* recs, std::size_t cap)
      : s_(s), recs_(recs), cap_(cap) {}
  void report(const std::string& label, std::uint64_t wrong, std::uint64_t hash) {
    if (s_->nrecords >= cap_) return;
    rank_record& r = recs_[s_->nrecords];
    std::snprintf(r.label, sizeof r.label, "%s", label.c_str());
    r.wrong = wrong;
    r.hash = hash;
    __atomic_store_n(&s_->nrecords, s_->nrecords + 1, __ATOMIC_RELEASE);
  }
  void bump() { __atomic_add_fetch(&s_->progress, 1, __ATOMIC_RELEASE); }
  /// Runs `call`, which must throw a gradsync::error of `code` whose message contains
  /// `part`; reports `label` with wrong = 0 when it did, 1 otherwise.
  template <class Call>
  void report_error(const std::string& label, errc code, const std::string& part, Call&& call) {
    bool ok = false;
    try {
      call();
    } catch (const error& e) {
      ok = e.code() == code && std::string(e.what()).find(part) != std::string::npos;
    }
    report(label, ok ? 0 : 1, 0);
  }

 private:
  detail::shared_rank* s_;
  rank_record* recs_;
  std::size_t cap_;
};

struct fork_options {
  double time_limit = 120;  // seconds; children still running then are killed
  std::size_t max_records = 8192;
  /// Adjusts the options each child builds from the environment (buffer sizes).
  std::function<void(transport::shm_options&)> configure;
  /// Called in the parent once all children are forked, with their pids and a function
  /// returning rank i's progress counter (e.g. to kill one mid-collective).
  std::function<void(const std::vector<pid_t>&, const std::function<std::uint64_t(std::size_t)>&)>
      while_running;
};

/// A job id unique to this test process and call.
inline std::string unique_job(const char* what) {
  static int counter = 0;
  return std::string("t-") + what + "-" + std::to_string(::getpid()) + "-" +
         std::to_string(counter++);
}

/// Forks n ranks running body(transport::shm&, rank_env&) and returns each one's outcome.
template <class Body>
std::vector<rank_outcome> fork_ranks(std::size_t n, const std::string& job, Body&& body,
                                     const fork_options& opt = {}) {
  const std::size_t per_rank = sizeof(detail::shared_rank) + opt.max_records * sizeof(rank_record);
  void* mem =
      ::mmap(nullptr, n * per_rank, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) throw std::runtime_error("fork_ranks: mmap failed");
  auto shared = [&](std::size_t r) {
    return reinterpret_cast<detail::shared_rank*>(static_cast<char*>(mem) + r * per_rank);
  };
  auto records = [&](std::size_t r) { return reinterpret_cast<rank_record*>(shared(r) + 1); };
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t parent = ::getpid();
  std::vector<pid_t> pids(n, -1);
  for (std::size_t r = 0; r < n; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork_ranks: fork failed");
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(9);
      ::setenv("GRADSYNC_SHM_RANK", std::to_string(r).c_str(), 1);
      ::setenv("GRADSYNC_SHM_SIZE", std::to_string(n).c_str(), 1);
      ::setenv("GRADSYNC_SHM_JOB", job.c_str(), 1);
      detail::shared_rank* s = shared(r);
      rank_env env(s, records(r), opt.max_records);
      const auto t0 = std::chrono::steady_clock::now();
      int code = 0;
      try {
        auto o = transport::shm_options::from_env();
        if (opt.configure) opt.configure(o);
        transport::shm t(o);
        body(t, env);
      } catch (const gradsync::error& e) {
        s->error_code = static_cast<int>(e.code());
        std::snprintf(s->what, sizeof s->what, "%s", e.what());
        code = 3;
      } catch (const std::exception& e) {
        s->error_code = -1;
        std::snprintf(s->what, sizeof s->what, "%s", e.what());
        code = 4;
      }
      s->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fflush(stdout);
      std::fflush(stderr);
      ::_exit(code);
    }
    pids[r] = pid;
  }
  if (opt.while_running) {
    opt.while_running(pids, [&](std::size_t r) {
      return __atomic_load_n(&shared(r)->progress, __ATOMIC_ACQUIRE);
    });
  }
  std::vector<rank_outcome> out(n);
  std::vector<bool> done(n, false);
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(opt.time_limit);
  std::size_t left = n;
  while (left > 0) {
    for (std::size_t r = 0; r < n; ++r) {
      if (done[r]) continue;
      int st = 0;
      if (::waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        done[r] = true;
        --left;
        out[r].status = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
      }
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > until) {
      std::fprintf(stderr, "fork_ranks: %zu rank(s) still running after %.0f s; killing them\n",
                   left, opt.time_limit);
      for (std::size_t r = 0; r < n; ++r) {
        if (!done[r]) ::kill(pids[r], SIGKILL);
      }
      for (std::size_t r = 0; r < n; ++r) {
        if (done[r]) continue;
        int st = 0;
        ::waitpid(pids[r], &st, 0);
        out[r].status = -SIGKILL;
        out[r].what = "killed by fork_ranks after the time limit";
        done[r] = true;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (std::size_t r = 0; r < n; ++r) {
    const detail::shared_rank* s = shared(r);
    if (out[r].what.empty()) out[r].what = s->what;
    out[r].error_code = s->error_code;
    out[r].seconds = s->seconds;
    out[r].records.assign(records(r), records(r) + s->nrecords);
  }
  ::munmap(mem, n * per_rank);
  return out;
}

/// True when /dev/shm holds the shm object `name` ("/gradsync-...": a segment or roster).
inline bool shm_name_exists(const std::string& name) {
  return ::access(("/dev/shm" + name).c_str(), F_OK) == 0;
}

/// f(the first `bytes` of the shm object `name`, mapped read-only: f only loads), or
/// `absent` when the object does not exist or is smaller (a segment's or roster's header,
/// read from outside).
template <class R, class F>
R read_shm(const std::string& name, std::size_t bytes, R absent, F&& f) {
  const int fd = ::shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) return absent;
  R r = absent;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && static_cast<std::size_t>(st.st_size) >= bytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) {
      r = f(static_cast<std::byte*>(p));
      ::munmap(p, bytes);
    }
  }
  ::close(fd);
  return r;
}

/// True when /dev/shm still holds the segment of `job`.
inline bool segment_exists(const std::string& job) {
  return shm_name_exists(transport::detail::segment_name(job));
}

}  // namespace gradsync::testbed
