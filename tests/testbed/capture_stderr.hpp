// SPDX-License-Identifier: Apache-2.0
// Sends this process's stderr to a file while alive (log lines, warnings); text() stops
// the capture and returns what was written.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

namespace gradsync::testbed {

class capture_stderr {
 public:
  explicit capture_stderr(std::string path) : path_(std::move(path)) {
    std::fflush(stderr);
    saved_ = ::dup(2);
    const int fd = ::open(path_.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
    ::dup2(fd, 2);
    ::close(fd);
  }
  capture_stderr(const capture_stderr&) = delete;
  capture_stderr& operator=(const capture_stderr&) = delete;
  ~capture_stderr() { restore(); }
  std::string text() {
    restore();
    std::ifstream f(path_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
  }
  std::string path_;
  int saved_ = -1;
};

}  // namespace gradsync::testbed
