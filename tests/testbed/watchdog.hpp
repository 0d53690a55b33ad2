// SPDX-License-Identifier: Apache-2.0
// A watchdog for collective tests: if the test has not finished within `seconds`, it
// prints what it was doing and exits the process with status 1, so a hang fails CI
// instead of stalling it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <unistd.h>

namespace gradsync::testbed {

class watchdog {
 public:
  watchdog(double seconds, std::string what) : what_(std::move(what)) {
    thread_ = std::thread([this, seconds] {
      std::unique_lock lk(m_);
      if (!cv_.wait_for(lk, std::chrono::duration<double>(seconds), [this] { return done_; })) {
        std::fprintf(stderr, "WATCHDOG: '%s' still running after %.0f s; failing the test\n",
                     what_.c_str(), seconds);
        std::fflush(stderr);
        ::_exit(1);
      }
    });
  }
  watchdog(const watchdog&) = delete;
  watchdog& operator=(const watchdog&) = delete;
  ~watchdog() {
    {
      std::lock_guard lk(m_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::string what_;
  std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace gradsync::testbed
