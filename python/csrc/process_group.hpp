// SPDX-License-Identifier: Apache-2.0
// ProcessGroupGradsync: the "gradsync" backend of torch.distributed (torch 1.13).
//
// Threading. A call (allreduce, broadcast, ...) checks its tensors on the caller's thread
// and queues a job; ONE worker thread per group runs the jobs in issue order, so every
// rank issues its collectives to gradsync in the same order. The worker touches raw
// memory and gradsync only: no Python, no GIL, no tensor reference counts (the Work keeps
// the tensors alive). When a job ends, a completion_pool thread marks the Work's future
// (its callbacks run there) and then the Work itself, as Gloo does: when wait() returns
// the future's callbacks have run. A callback may issue and wait on another collective:
// the worker is free, and the pool grows a thread if its only one is blocked.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "completion_pool.hpp"
#include "engine.hpp"

namespace gradsync_torch {

/// The class the backend derives from. torch 1.13: c10d::ProcessGroup. torch 2.x moved the
/// collectives into c10d::Backend (a ProcessGroup there dispatches to backends): make this
/// c10d::Backend and keep every override below (same names and signatures); a 2.x creator
/// registered with Backend.register_backend returns the Backend, and torch wraps it.
using backend_base = c10d::ProcessGroup;

/// One queued collective: asynchronous, with a future whose value is its tensor list.
class WorkGradsync final : public c10d::Work {
 public:
  /// `result`: the future's value (what DDP reads); `keep`: every other tensor the job
  /// reads or writes, held until the Work goes.
  WorkGradsync(int rank, c10d::OpType type, const char* title, std::vector<at::Tensor> result,
               std::vector<at::Tensor> keep);
  ~WorkGradsync() override;

  std::vector<at::Tensor> result() override { return result_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  /// Completes the future (running its callbacks on this thread), then the Work.
  void complete(std::exception_ptr error);

 private:
  std::vector<at::Tensor> result_;
  std::vector<at::Tensor> keep_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class ProcessGroupGradsync final : public backend_base {
 public:
  /// Opens the transport (launch.cpp: MPI under mpirun/srun, else shm on one host through
  /// `store`); collective. `timeout` becomes every call's gradsync deadline.
  ProcessGroupGradsync(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout);
  ~ProcessGroupGradsync() override;

  /// Makes a group and lists it for shutdown_all().
  static c10::intrusive_ptr<ProcessGroupGradsync> create(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
      std::chrono::milliseconds timeout);

  const std::string getBackendName() const override { return "gradsync"; }

  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts = c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;
  /// reduce, gather and scatter run over allreduce, allgather and broadcast: every rank
  /// moves what the root moves (docs/torch.md gives the cost).
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::GatherOptions& opts = c10d::GatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ScatterOptions& opts = c10d::ScatterOptions()) override;

  // Not implemented: refused with what to use instead (torch's own message names no way
  // out).
  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& output, at::Tensor& input, std::vector<std::int64_t>& output_splits,
      std::vector<std::int64_t>& input_splits,
      const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

  /// The DDP comm hooks' call: averages `bucket` through error_feedback<int8<>> or
  /// error_feedback<topk<10>> (float32; other types uncompressed), with residuals kept per
  /// DDP bucket `index`, or through exact<> (float32 only) with blocks that start at each
  /// of `tensors` (the element counts of the bucket's parameters; empty: one tensor). The
  /// future's value is [bucket].
  c10::intrusive_ptr<c10d::Work> compressed_average(at::Tensor& bucket, codec c, std::size_t index,
                                                    std::vector<std::size_t> tensors = {});

  /// "shm", "mpi" or "two_level".
  std::string transport() const;
  /// The transport, algorithm and shape, e.g. "two_level (2 nodes x 2 ranks, hierarchical)".
  std::string describe() const;

  /// Runs what is queued, stops the threads and closes the transport; later calls raise.
  /// Idempotent. Releases the GIL while it waits (completions may need it).
  void shutdown();
  /// shutdown() of every live group: Python's atexit, before MPI ends.
  static void shutdown_all();

 private:
  struct job {
    c10::intrusive_ptr<WorkGradsync> work;
    std::function<void(engine&)> run;
  };

  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, const char* title,
                                         std::vector<at::Tensor> result,
                                         std::vector<at::Tensor> keep,
                                         std::function<void(engine&)> run);
  void loop();
  /// The call options of a call whose own timeout is `t` (unset: the group's).
  gradsync::call_options options(std::chrono::milliseconds t) const;

  gradsync::call_options call_;     // the deadline of every call: the group's timeout
  std::unique_ptr<engine> engine_;  // used by the worker only, until shutdown
  std::vector<std::byte> scratch_;  // the worker's packing buffer (list-form calls)
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<job> queue_;
  bool stopping_ = false;
  bool failed_ = false;  // a call failed: the transport is unusable, queued calls fail fast
  completion_pool completions_;
  std::thread worker_;
};

}  // namespace gradsync_torch
