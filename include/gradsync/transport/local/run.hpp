// SPDX-License-Identifier: Apache-2.0
// Runs a function on N threads, each holding rank i of one in-process group, and
// rethrows the first failure after every thread has finished.
#pragma once

#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "gradsync/transport/local.hpp"

namespace gradsync::transport {

/// Calls f(local&) on `ranks` threads. When a rank throws, peers waiting on it get
/// errc::peer_lost instead of hanging; the first exception (by time) is rethrown.
template <class F>
void run_local(std::size_t ranks, F&& f) {
  auto group = std::make_shared<detail::local_group>(ranks);
  std::mutex m;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  threads.reserve(ranks);
  for (std::size_t r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        local t(group, r);
        f(t);
      } catch (...) {
        std::lock_guard lk(m);
        if (!first) first = std::current_exception();
      }
      group->leave(r);
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace gradsync::transport
