// How the trainer's gradients reach gradsync: one class per fusion policy, each taking
// the gradient tensors (spans into one flat arena) and averaging them across ranks.
//   fusion none   -> one allreduce<Algo>(op::avg) per tensor after the backward pass.
// Every rank calls the same allreduces in the same order, so every rank ends with the
// same bits (gradsync reduces each element once, by one owner, then copies it).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include <gradsync/gradsync.hpp>

namespace mini_trainer {

/// Primary template: specialised per fusion policy below.
template <class Transport,  ///< a gradsync::transport_policy
          class Algorithm,  ///< a gradsync::algorithm_for<., Transport>
          class Fusion>     ///< gradsync::fusion::none or a bucket plan
class grad_sync;

/// fusion::none: one blocking allreduce per tensor, issued after the whole backward pass.
template <class Transport, class Algorithm>
class grad_sync<Transport, Algorithm, gradsync::fusion::none> {
 public:
  grad_sync(Transport& t, std::vector<std::span<float>> tensors, double /*bucket_mb*/)
      : t_(t), tensors_(std::move(tensors)) {}

  /// Layer `l`'s gradients are final (backward runs last layer first).
  void layer_ready(std::size_t /*l*/) {}

  /// Averages every tensor across ranks; returns when all are synchronized.
  void finish() {
    for (auto s : tensors_) gradsync::allreduce<Algorithm>(t_, s, gradsync::op::avg);
  }

 private:
  Transport& t_;
  std::vector<std::span<float>> tensors_;
};

}  // namespace mini_trainer
