// SPDX-License-Identifier: Apache-2.0
// The frame of a pipelined two_level collective (algo::hierarchical's allreduce, the
// two-level reduce_scatter and allgather): a helper thread (core/piece_worker.hpp) runs the
// cross-node part of each piece while the calling thread works inside the node. While it
// lives the helper alone calls Inter (MPI_THREAD_SERIALIZED suffices), so the node's
// waits stop serving the other nodes' stall queries and the idle helper answers them.
#pragma once

#include <cstddef>
#include <functional>
#include <utility>

#include "gradsync/core/piece_worker.hpp"
#include "gradsync/transport/two_level.hpp"

namespace gradsync::algo::detail {

template <class Intra, class Inter>
class level_pipeline {
  using levels = transport::two_level<Intra, Inter>;

 public:
  /// `across(i)` runs piece i's cross-node part on the helper, once ready(i) was called.
  level_pipeline(levels& t, std::function<void(std::size_t)> across)
      : paused_(t), worker_(std::move(across), [&t] {
          if constexpr (levels::can_serve) {
            (void)t.inter().serve_peers(t.node_wait());
          } else {
            (void)t;  // nothing to serve for these levels
          }
        }) {}

  /// Pieces 0..i may cross now.
  void ready(std::size_t i) { worker_.ready(i); }
  /// Blocks until piece i has crossed; rethrows the helper's error.
  void wait(std::size_t i) { worker_.wait(i); }

 private:
  struct paused {  // first member: serving pauses before the helper starts, resumes after
    levels& t;
    explicit paused(levels& tl) : t(tl) { t.pause_serving(true); }
    paused(const paused&) = delete;
    paused& operator=(const paused&) = delete;
    ~paused() { t.pause_serving(false); }
  } paused_;
  gradsync::detail::piece_worker worker_;  // joined before serving resumes
};

}  // namespace gradsync::algo::detail
