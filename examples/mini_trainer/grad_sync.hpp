// SPDX-License-Identifier: Apache-2.0
// How the trainer's gradients reach gradsync: one class per fusion policy, each taking
// the gradient tensors (spans into one flat arena) and averaging them across ranks.
//   --fusion none   -> gradsync::allreduce<Algo>(t, tensor, op::avg) per tensor, after
//                      the backward pass (the stateless free function);
//   --fusion bucket -> gradsync::allreducer<Tr, Algo, fusion::bucket<Bytes>>: the tensors
//                      are registered once, bucketed by a static plan, and each bucket is
//                      launched on gradsync's progress thread as soon as backward marks
//                      its last tensor ready -- communication overlaps the rest of the
//                      backward pass.
//   --compress C    -> the same with compression policy C (compress::fp16, int8<>,
//                      error_feedback<topk<10>>, ...; see dispatch.hpp).
//   --reproducible  -> either of the first two over the int64 codes of
//                      compress::exact_accumulator, summed (op::sum), after the step's
//                      micro-batches are all added.
// The training loop sees only the small virtual interface `gradient_sync`, so it is
// compiled once per transport, not once per (algorithm, fusion) pair.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <gradsync/gradsync.hpp>

namespace mini_trainer {

/// What the training loop needs from a gradient synchronizer.
class gradient_sync {
 public:
  virtual ~gradient_sync() = default;
  /// Layer l's weight and bias gradients are final (backward runs last layer first).
  virtual void layer_ready(std::size_t l) = 0;
  /// Returns once every gradient holds the average over all ranks.
  virtual void finish() = 0;
  /// Bytes this rank put on the wire in the last step, as gradsync counted them; < 0 when
  /// not counted (the free function keeps no statistics).
  virtual double wire_bytes() const { return -1; }
};

/// fusion none: one blocking allreduce per tensor, after the whole backward pass.
template <class Transport,                 ///< a gradsync::transport_policy, or a two_level
          class Algorithm,                 ///< an algorithm for Transport
          class T = float,                 ///< the tensors' type (int64_t: --reproducible)
          class Op = gradsync::op::avg_t>  ///< avg of gradients, sum of codes
class per_tensor_sync final : public gradient_sync {
 public:
  per_tensor_sync(Transport& t, std::vector<std::span<T>> tensors)
      : t_(t), tensors_(std::move(tensors)) {}
  void layer_ready(std::size_t) override {}
  void finish() override {
    for (auto s : tensors_) gradsync::allreduce<Algorithm>(t_, s, Op{});
  }

 private:
  Transport& t_;
  std::vector<std::span<T>> tensors_;
};

/// fusion bucket: the allreducer façade with a static bucket plan and overlap.
template <class Transport,  ///< a gradsync::transport_policy, or a two_level
          class Algorithm,  ///< an algorithm for Transport (hierarchical on a two_level)
          class Fusion,     ///< gradsync::fusion::bucket<Bytes>
          class Compression = gradsync::compress::none,  ///< what goes on the wire
          class T = float,                 ///< the tensors' type (int64_t: --reproducible)
          class Op = gradsync::op::avg_t>  ///< avg of gradients, sum of codes
class bucket_sync final : public gradient_sync {
 public:
  /// `tensors` are W1, b1, W2, b2, ...: layer l owns tensors 2l and 2l+1; `shapes` their
  /// matrix shapes (W: out x in; biases none), for compress::powersgd; `bucket_bytes` the
  /// bucket cap (0: Fusion's).
  bucket_sync(Transport& t, std::vector<std::span<T>> tensors,
              std::vector<gradsync::matrix_shape> shapes = {}, std::size_t bucket_bytes = 0)
      : sync_(t, options(bucket_bytes)) {
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      std::string name(1, i % 2 ? 'b' : 'W');  // (not "W" + to_string: g++ 12 -O3 -Wrestrict)
      name += std::to_string(i / 2 + 1);
      sync_.add(tensors[i], std::move(name),
                i < shapes.size() ? shapes[i] : gradsync::matrix_shape{});
    }
    // Collective: every rank registered the same list. One type only: the trainer's build
    // instantiates a step per (algorithm, compression), for this one type.
    sync_.commit(Op{}, gradsync::element_types<T>{});
  }
  void layer_ready(std::size_t l) override {
    sync_.ready(2 * l);
    sync_.ready(2 * l + 1);
  }
  void finish() override { sync_.wait(); }
  double wire_bytes() const override { return static_cast<double>(sync_.last_stats().bytes_wire); }

 private:
  static gradsync::allreducer_options options(std::size_t bucket_bytes) {
    gradsync::allreducer_options o;
    o.bucket_bytes = bucket_bytes;  // --bucket-mb at run time: one build for every size
    return o;
  }

  gradsync::allreducer<Transport, Algorithm, Fusion, Compression> sync_;
};

}  // namespace mini_trainer
