// SPDX-License-Identifier: Apache-2.0
// --transport shm: ranks are processes of this host sharing one POSIX segment. The
// trainer loads the data once, then forks ranks 1..N-1 (they share the loaded data
// copy-on-write); the parent is rank 0. Each child sends its final line -- or its
// error -- back through a pipe; the parent reaps every child, so no process outlives
// the run, and reports the first real failure (not the peer_lost it causes elsewhere).
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <gradsync/algo/direct.hpp>
#include <gradsync/transport/shm.hpp>

#include "config.hpp"
#include "dispatch.hpp"
#include "launch.hpp"
#include "train.hpp"

namespace mini_trainer {

namespace {

void write_all(int fd, const std::string& s) {
  std::size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

std::string read_all(int fd) {
  std::string s;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    s.append(buf, static_cast<std::size_t>(n));
  }
  return s;
}

/// One rank's whole run over shm; "final ..." or "error <what>".
std::string shm_rank(const run_context& ctx, std::size_t rank, const std::string& job) {
  try {
    gradsync::transport::shm_options o;
    o.rank = rank;
    o.size = ctx.cfg.ranks;
    o.job = job;
    // Room for the allreducer's arena (the MLP's gradients are under 1 MiB): fused
    // buckets placed there are read by the peers in place.
    o.heap_bytes = 16 << 20;
    gradsync::transport::shm t(o);
    return dispatch(t, ctx);
  } catch (const usage_error& e) {
    return std::string("usage ") + e.what();
  } catch (const std::exception& e) {
    return std::string("error ") + e.what();
  }
}

bool is_failure(const std::string& out) {
  return out.rfind("error ", 0) == 0 || out.rfind("usage ", 0) == 0;
}

}  // namespace

std::vector<std::string> launch_shm(const run_context& ctx) {
  const std::size_t n = ctx.cfg.ranks;
  const std::string job = "mini_trainer-" + std::to_string(::getpid());
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids(n, 0);
  std::vector<int> fds(n, -1);
  for (std::size_t r = 1; r < n; ++r) {
    int p[2];
    if (::pipe(p) != 0) throw usage_error(std::string("pipe: ") + std::strerror(errno));
    const pid_t pid = ::fork();
    if (pid < 0) throw usage_error(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      ::close(p[0]);
      for (std::size_t q = 1; q < r; ++q) ::close(fds[q]);
      const std::string out = shm_rank(ctx, r, job);
      write_all(p[1], out);
      std::fflush(stdout);
      ::_exit(out.rfind("final ", 0) == 0 ? 0 : 1);
    }
    ::close(p[1]);
    pids[r] = pid;
    fds[r] = p[0];
  }
  std::vector<std::string> finals(n);
  finals[0] = shm_rank(ctx, 0, job);
  std::string first_error, lost_error;
  bool usage = false;
  auto note_error = [&](std::size_t r, const std::string& out) {
    if (out.rfind("usage ", 0) == 0 && first_error.empty()) {
      first_error = out.substr(6);  // the same on every rank: no rank prefix
      usage = true;
      return;
    }
    const std::string msg = "rank " + std::to_string(r) + ": " + out.substr(6);
    std::string& slot = out.find("peer_lost") != std::string::npos ? lost_error : first_error;
    if (slot.empty()) slot = msg;
  };
  if (is_failure(finals[0])) note_error(0, finals[0]);
  for (std::size_t r = 1; r < n; ++r) {
    finals[r] = read_all(fds[r]);
    ::close(fds[r]);
    int status = 0;
    while (::waitpid(pids[r], &status, 0) < 0 && errno == EINTR) {
    }
    if (is_failure(finals[r])) {
      note_error(r, finals[r]);
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      const std::string why = WIFSIGNALED(status)
                                  ? "was killed by signal " + std::to_string(WTERMSIG(status))
                                  : "exited with status " + std::to_string(WEXITSTATUS(status));
      if (first_error.empty())
        first_error = "rank " + std::to_string(r) + " (pid " + std::to_string(pids[r]) + ") " + why;
    }
  }
  if (usage) throw usage_error(first_error);
  if (!first_error.empty()) throw std::runtime_error(first_error);
  if (!lost_error.empty()) throw std::runtime_error(lost_error);
  return finals;
}

}  // namespace mini_trainer
