// SPDX-License-Identifier: Apache-2.0
// Ranks as forked processes of one host (the trainers' --transport shm): this process is
// rank 0, ranks 1..n-1 are forked after the data is loaded (they share it copy-on-write).
// Each rank's body returns its final line, or an error as "error <what>" / "usage
// <what>"; a child sends it back through a pipe. Every child is reaped, so no process
// outlives the run, and the first real failure is reported (not the peer_lost it causes
// elsewhere).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "config.hpp"

namespace mini_trainer {

namespace detail {

inline void write_all(int fd, const std::string& s) {
  std::size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

inline std::string read_all(int fd) {
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

inline bool is_failure(const std::string& out) {
  return out.rfind("error ", 0) == 0 || out.rfind("usage ", 0) == 0;
}

}  // namespace detail

/// Runs `body(rank)` on n processes (this one is rank 0) and returns their final lines;
/// throws usage_error or std::runtime_error with the first failure, naming its rank.
inline std::vector<std::string> fork_ranks(std::size_t n,
                                           const std::function<std::string(std::size_t)>& body) {
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
      const std::string out = body(r);
      detail::write_all(p[1], out);
      std::fflush(stdout);
      ::_exit(out.rfind("final ", 0) == 0 ? 0 : 1);
    }
    ::close(p[1]);
    pids[r] = pid;
    fds[r] = p[0];
  }
  std::vector<std::string> finals(n);
  finals[0] = body(0);
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
  if (detail::is_failure(finals[0])) note_error(0, finals[0]);
  for (std::size_t r = 1; r < n; ++r) {
    finals[r] = detail::read_all(fds[r]);
    ::close(fds[r]);
    int status = 0;
    while (::waitpid(pids[r], &status, 0) < 0 && errno == EINTR) {
    }
    if (detail::is_failure(finals[r])) {
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
