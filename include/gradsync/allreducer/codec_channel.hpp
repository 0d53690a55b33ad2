// SPDX-License-Identifier: Apache-2.0
// What a codec moves one allreducer bucket through (compress/concept.hpp: channel): the
// bucket's wire (allreducer/bucket_wire.hpp) for its allreduce, the allgather, staging
// memory from the allreducer's pool and the timeline. The runner hands one to the codec,
// and the codec's calls go down from here, not back into the runner.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "gradsync/algo/tuning.hpp"
#include "gradsync/allgather.hpp"
#include "gradsync/allreducer/bucket_wire.hpp"
#include "gradsync/allreducer/staging_pool.hpp"
#include "gradsync/compress/concept.hpp"
#include "gradsync/fusion/arena.hpp"
#include "gradsync/observe/stats.hpp"
#include "gradsync/observe/timeline.hpp"
#include "gradsync/transport/levels.hpp"

namespace gradsync::detail {

/// A codec's channel for one bucket of an allreducer over Transport with Algorithm.
template <class Transport,  ///< the allreducer's transport (or levels of them)
          class Algorithm>  ///< its algorithm
class codec_channel {
  using steady = std::chrono::steady_clock;

 public:
  /// For the bucket of tensors `parts`, on timeline track `tr`, its statistics in `acc`;
  /// staging memory from `pool`, returned when the channel goes.
  codec_channel(const bucket_wire<Transport, Algorithm>& wire, staging_pool& pool,
                std::span<const compress::tensor_part> parts, observe::track tr,
                observe::call_stats& acc)
      : wire_(wire),
        pool_(pool),
        parts_(parts),
        tr_(tr),
        acc_(acc),
        owner_(std::this_thread::get_id()) {}
  codec_channel(const codec_channel&) = delete;
  codec_channel& operator=(const codec_channel&) = delete;
  ~codec_channel() {
    for (auto& a : held_) pool_.release(std::move(a));
  }
  std::size_t ranks() const { return wire_.transport().size(); }
  std::size_t rank() const { return wire_.transport().rank(); }
  /// Across a network, where a helper thread may call the group: on one host the
  /// codec's passes and the transfers compete for the same cores (measured:
  /// docs/reproducibility.md).
  bool overlaps_wire() const {
    return algo::tuning::crosses_network(wire_.transport()) &&
           transport::helper_thread_ok<Transport>();
  }
  /// The bucket's tensors (shapes only for registered ones).
  std::span<const compress::tensor_part> tensors() const { return parts_; }
  /// From the codec's helper thread (compress/pieces.hpp) the messages go on a track of
  /// their own: on the bucket's, they would overlap the codec's passes.
  template <class W, class WOp>
  void allreduce(std::span<W> s, WOp) {
    const bool helper = std::this_thread::get_id() != owner_;
    wire_.template run<W, WOp>(s.data(), s.size(), helper ? observe::track::codec_wire : tr_, acc_);
  }
  void allgather(std::span<const std::byte> mine, std::span<std::byte> all) {
    const auto t0 = steady::now();
    acc_.bytes_encoded += mine.size();
    acc_.bytes_wire += gradsync::allgather(
        wire_.transport(),
        std::span<const std::int8_t>(reinterpret_cast<const std::int8_t*>(mine.data()),
                                     mine.size()),
        std::span<std::int8_t>(reinterpret_cast<std::int8_t*>(all.data()), all.size()),
        wire_.options());
    wire_.timeline().complete_with("allgather", tr_, t0, steady::now(),
                                   [&] { return "\"bytes\":" + std::to_string(mine.size()); });
  }
  std::span<std::byte> scratch(std::size_t bytes) {
    held_.push_back(pool_.acquire(bytes));
    return {held_.back()->data(), bytes};
  }
  template <class F>
  void timed(std::string_view name, F&& f) {
    const auto t0 = steady::now();
    f();
    const auto t1 = steady::now();
    wire_.timeline().complete_with(name, tr_, t0, t1, [] { return std::string(); });
    acc_.compress_seconds += std::chrono::duration<double>(t1 - t0).count();
  }

 private:
  const bucket_wire<Transport, Algorithm>& wire_;
  staging_pool& pool_;
  std::span<const compress::tensor_part> parts_;
  observe::track tr_;
  observe::call_stats& acc_;
  std::thread::id owner_;  // the thread that runs the codec
  std::vector<std::shared_ptr<fusion::arena>> held_;
};

}  // namespace gradsync::detail
