// SPDX-License-Identifier: Apache-2.0
// The shm segment is reserved when it is created (issue 54, item 15). tmpfs allocates a
// page when it is first touched: a segment mapped while /dev/shm had room died of
// SIGBUS once another process filled /dev/shm, and one larger than the free space mapped
// fine and died the same way. Each case runs in a child process with a small tmpfs of
// its own on /dev/shm (a private mount namespace: root only; skipped otherwise).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <gradsync/transport/shm.hpp>

namespace gs = gradsync;
using gs::transport::shm;
using gs::transport::shm_options;

namespace {

constexpr int cannot_mount = 77;

// Runs `body` in a child whose /dev/shm is a tmpfs of `mib` MiB; returns its exit status,
// 128 + the signal when a signal ended it, or cannot_mount.
template <class Body>
int with_small_dev_shm(std::size_t mib, Body&& body) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const std::string size = "size=" + std::to_string(mib) + "m";
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", "/dev/shm", "tmpfs", 0, size.c_str()) != 0) {
      ::_exit(cannot_mount);
    }
    ::_exit(body());
  }
  int st = 0;
  REQUIRE(::waitpid(pid, &st, 0) == pid);
  return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
}

shm_options options(const char* job, std::size_t heap) {
  shm_options o;
  o.job = job;
  o.exchange_bytes = 1 << 20;
  o.heap_bytes = heap;
  o.bootstrap_timeout = gs::seconds_d{5};
  return o;
}

// Another process's file that takes every byte /dev/shm has left.
void fill_dev_shm() {
  const int fd = ::open("/dev/shm/filler", O_CREAT | O_WRONLY, 0600);
  if (fd < 0) return;
  std::vector<char> chunk(1 << 16, 'f');
  while (::write(fd, chunk.data(), chunk.size()) > 0) {
  }
  ::close(fd);
}

}  // namespace

TEST_CASE("shm: a segment made while /dev/shm has room survives /dev/shm filling up") {
  const int rc = with_small_dev_shm(48, [] {
    shm t(options("reserve-fill", 24 << 20));
    fill_dev_shm();
    // The heap's pages, first touched after the filesystem is full: SIGBUS unless
    // they were reserved at creation.
    auto buf = t.allocate<char>(16 << 20);
    std::memset(buf.data(), 1, buf.size());
    return buf.data()[buf.size() - 1] == 1 ? 0 : 1;
  });
  if (rc == cannot_mount) {
    MESSAGE("skipped: no private tmpfs on /dev/shm (needs root)");
    return;
  }
  CHECK_MESSAGE(rc == 0, "the child ended with " << rc << " (135: SIGBUS)");
}

TEST_CASE("shm: a segment /dev/shm cannot hold is errc::transport at creation, named") {
  const int rc = with_small_dev_shm(8, [] {
    try {
      shm t(options("reserve-big", 16 << 20));
      std::fprintf(stderr, "created a segment larger than /dev/shm\n");
      return 2;
    } catch (const gs::error& e) {
      const std::string what = e.what();
      const bool named = e.code() == gs::errc::transport &&
                         what.find(
                             "cannot reserve them on the shared-memory filesystem "
                             "/dev/shm") != std::string::npos &&
                         what.find("No space left on device") != std::string::npos;
      if (!named) std::fprintf(stderr, "unexpected error: %s\n", e.what());
      // Its name is gone: the next job with that id can start.
      const int fd = ::open(
          ("/dev/shm" + gs::transport::detail::segment_name("reserve-big")).c_str(), O_RDONLY);
      if (fd >= 0) {
        std::fprintf(stderr, "the failed segment's name was left behind\n");
        return 4;
      }
      return named ? 0 : 3;
    }
  });
  if (rc == cannot_mount) {
    MESSAGE("skipped: no private tmpfs on /dev/shm (needs root)");
    return;
  }
  CHECK_MESSAGE(rc == 0, "the child ended with " << rc);
}
