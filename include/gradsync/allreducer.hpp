// The façade: allreducer<Transport, Algorithm, Fusion, Compression> composes the four
// policies into one object that keeps per-call state (scratch, sequence, statistics).
#pragma once

#include <cstddef>
#include <span>

#include "gradsync/algorithm/concept.hpp"
#include "gradsync/allreduce.hpp"
#include "gradsync/compression/none.hpp"
#include "gradsync/core/deadline.hpp"
#include "gradsync/fusion/none.hpp"
#include "gradsync/transport/concept.hpp"

namespace gradsync {

template <class Transport,                      ///< who moves the bytes (transport concept)
          class Algorithm,                      ///< how ranks combine (algorithm_for<., Transport>)
          class Fusion = fusion::none,          ///< how tensors are packed into messages
          class Compression = compress::none>  ///< what goes on the wire
class allreducer {
  static_assert(transport_policy<Transport>,
                "gradsync::allreducer: the first parameter must satisfy gradsync::transport; "
                "use transport::local, shm, mpi, nccl or cuda_ipc");
  static_assert(algorithm_for<Algorithm, Transport>,
                "gradsync::allreducer: the second parameter must be an algorithm for this "
                "transport (algo::ring, tree, halving_doubling, auto_select, ...)");

 public:
  using transport_type = Transport;
  using algorithm_type = Algorithm;
  using fusion_type = Fusion;
  using compression_type = Compression;

  /// Borrows `t`; the transport must outlive the allreducer.
  explicit allreducer(Transport& t, call_options opt = {}) : t_(t), opt_(opt) {}

  /// In-place allreduce of one tensor.
  template <class T, class Op>
  void allreduce(std::span<T> data, Op op) {
    gradsync::allreduce<Algorithm>(t_, data, op, opt_);
  }

  Transport& transport() { return t_; }
  const call_options& options() const { return opt_; }

 private:
  Transport& t_;
  call_options opt_;
};

}  // namespace gradsync
