// SPDX-License-Identifier: Apache-2.0
// transport::nccl — device memory moved by NCCL, everything stream-ordered.
//
// Point-to-point: isend/irecv only queue the operation; wait() on any queued request
// flushes the queue as ONE ncclGroupStart/End, which enqueues all of it on stream().
// wait() therefore means "ordered before whatever is enqueued on stream() next" (the
// reductions of executor() run there), never "the bytes have arrived on the host".
//
// Why the generic ring/tree/halving_doubling are NOT run on it (docs/cuda.md): a group
// completes only when all its sends are matched, and groups on one stream run one after
// another. The generic ring posts every segment of a chunk to its right neighbour but
// only K receives before its first wait; the neighbour's matching receives sit in later
// groups of ITS stream, which cannot start before its first group completes: a cycle
// around the ring, so a deadlock once a chunk has more than K segments (NCCL's eager
// buffers hide it only for small messages). Their scratch is also host memory. So the
// device entry point accepts algo::native (ncclAllReduce) and algo::nccl_ring
// (nccl_ring.hpp), whose every group is matched: {send to right, receive from left}.
//
// Errors: every NCCL failure becomes gradsync::error(errc::transport) with NCCL's own
// message; communicators are non-blocking (config.blocking = 0) so that a deadline can
// end a stuck call with ncclCommAbort (errc::timeout), after which the transport refuses
// further work. Bootstrap: nccl_mpi.hpp (unique id broadcast over MPI) or
// nccl_group.hpp (several GPUs in one process). This header needs no MPI and no nvcc
// (algo::native works from host code; nccl_ring's reductions need nvcc).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "gradsync/core/call.hpp"
#include "gradsync/core/cuda_check.hpp"
#include "gradsync/core/abort.hpp"
#include "gradsync/core/deadline.hpp"
#include "gradsync/core/device_memory.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/core/workspace.hpp"
#include "gradsync/kernels/device_executor.hpp"
#include "gradsync/transport/concept.hpp"

namespace gradsync::transport {

namespace nccl_detail {
template <class T>
constexpr ncclDataType_t dtype() {
  if constexpr (std::is_same_v<T, float>)
    return ncclFloat32;
  else if constexpr (std::is_same_v<T, double>)
    return ncclFloat64;
  else if constexpr (std::is_same_v<T, half>)
    return ncclFloat16;
  else if constexpr (std::is_same_v<T, bfloat16>)
    return ncclBfloat16;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return ncclInt32;
  else if constexpr (std::is_same_v<T, std::int8_t>)
    return ncclInt8;
  else
    return ncclInt64;
}
template <class Op>
constexpr ncclRedOp_t op() {
  switch (Op::id) {
    case reduce_op::prod:
      return ncclProd;
    case reduce_op::min:
      return ncclMin;
    case reduce_op::max:
      return ncclMax;
    case reduce_op::avg:
      return ncclAvg;
    case reduce_op::sum:
      break;
  }
  return ncclSum;
}
/// Waits until non-blocking communicator `comm` (just created or split) is ready, or
/// aborts it and throws: errc::transport when NCCL reports a failure, errc::timeout at
/// `until` (`what` names the call and, in the hint, what the other ranks must do).
inline void wait_ready(ncclComm_t comm, deadline until, std::size_t rank, const std::string& what,
                       const std::string& hint) {
  const auto fail = [&](const std::string& why, errc code) {
    if (comm) ncclCommAbort(comm);
    throw error(code, {rank, error_site::npos, ~0ull}, why);
  };
  for (;;) {
    ncclResult_t st = ncclSuccess;
    if (ncclCommGetAsyncError(comm, &st) != ncclSuccess) st = ncclInternalError;
    if (st == ncclSuccess) return;
    if (st != ncclInProgress) {
      fail(what + " failed: " + ncclGetErrorString(st) + ": " + ncclGetLastError(comm),
           errc::transport);
    }
    if (until.expired())
      fail(what + " did not finish before the deadline (" + hint + ")", errc::timeout);
    std::this_thread::yield();
  }
}
}  // namespace nccl_detail

class nccl {
 public:
  static constexpr std::string_view name = "nccl";
  static constexpr memory_space memory = memory_space::device;
  static constexpr bool peer_access = false;
  static constexpr bool native_allreduce = true;
  static constexpr transport_traits traits{
      .aborts = true, .native_collectives = true, .splits = true};

  /// A queued point-to-point operation: the number of the group that carries it.
  struct request {
    std::uint64_t group = 0;
  };

  /// Adopts `comm` (a non-blocking communicator from a bootstrap) on `device`. With no
  /// stream given, the transport creates its own (cuda::create_transport_stream).
  nccl(ncclComm_t comm, int device, cudaStream_t stream = nullptr) : comm_(comm), device_(device) {
    int r = 0, n = 0;
    check(ncclCommUserRank(comm_, &r), "ncclCommUserRank");
    check(ncclCommCount(comm_, &n), "ncclCommCount");
    rank_ = static_cast<std::size_t>(r);
    size_ = static_cast<std::size_t>(n);
    select_device();
    if (stream) {
      stream_ = stream;
    } else {
      stream_ = cuda::create_transport_stream(__FILE__, __LINE__);
      own_stream_ = true;
    }
  }
  nccl(const nccl&) = delete;
  nccl& operator=(const nccl&) = delete;
  ~nccl() {
    if (!comm_) return;
    cudaSetDevice(device_);
    if (!aborted_) {
      // Finalize flushes outstanding work; a failure or a stuck finalize ends in abort.
      ncclResult_t st =
          cudaStreamSynchronize(stream_) == cudaSuccess ? ncclCommFinalize(comm_) : ncclSystemError;
      const deadline d = deadline::after(seconds_d{30.0});
      while (st == ncclInProgress && !d.expired()) {
        if (ncclCommGetAsyncError(comm_, &st) != ncclSuccess) st = ncclSystemError;
        std::this_thread::yield();
      }
      if (st == ncclSuccess)
        ncclCommDestroy(comm_);
      else
        ncclCommAbort(comm_);
    }  // after ncclCommAbort nothing is left to free (abort frees the communicator)
    if (scratch_dev_) cudaFree(scratch_dev_);
    if (own_stream_) cudaStreamDestroy(stream_);
  }

  std::size_t rank() const { return rank_; }
  std::size_t size() const { return size_; }
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  ncclComm_t comm() const { return comm_; }
  std::uint64_t next_seq() { return seq_++; }
  workspace& scratch() { return host_scratch_; }  // host scratch (the concept's); unused here
  kernels::device_executor executor() const { return {stream_}; }

  /// Queues a send of `bytes` at device pointer p to `peer` (NCCL matches in order).
  request isend(std::size_t peer, const void* p, std::size_t bytes, std::uint32_t) {
    queue_.push_back({true, peer, const_cast<void*>(p), bytes});
    return {group_};
  }
  /// Queues a receive of `bytes` from `peer` into device pointer p.
  request irecv(std::size_t peer, void* p, std::size_t bytes, std::uint32_t) {
    queue_.push_back({false, peer, p, bytes});
    return {group_};
  }
  /// Enqueues the request's group on stream() (if still queued); by `until` or timeout.
  void wait(request& r, deadline until) {
    if (r.group == group_ && !queue_.empty()) flush(until);
  }

  /// Device scratch that persists across calls (grown, never shrunk).
  void* device_scratch(std::size_t bytes) {
    if (bytes > scratch_bytes_) {
      select_device();
      GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the old buffer may be in use
      if (scratch_dev_) GRADSYNC_CUDA_CHECK(cudaFree(scratch_dev_));
      scratch_dev_ = nullptr;
      GRADSYNC_CUDA_CHECK(cudaMalloc(&scratch_dev_, bytes));
      scratch_bytes_ = bytes;
    }
    return scratch_dev_;
  }

  /// ncclAllReduce in place on stream() (op::avg: ncclAvg, one division, same bits on
  /// every rank since each element is finalized once and then broadcast).
  template <class T, class Op>
  void allreduce_native(T* data, std::size_t count, Op, const call_context& ctx) {
    enqueue("ncclAllReduce", ctx, [&] {
      return ncclAllReduce(data, data, count, nccl_detail::dtype<T>(), nccl_detail::op<Op>(), comm_,
                           stream_);
    });
  }

  /// gradsync::broadcast's device path: ncclBroadcast in place on stream().
  void broadcast_native(std::byte* data, std::size_t bytes, std::size_t root,
                        const call_context& ctx) {
    enqueue("ncclBroadcast", ctx, [&] {
      return ncclBroadcast(data, data, bytes, ncclUint8, static_cast<int>(root), comm_, stream_);
    });
  }
  /// gradsync::allgather's device path: ncclAllGather of `bytes` per rank on stream().
  void allgather_native(const std::byte* in, std::byte* out, std::size_t bytes,
                        const call_context& ctx) {
    enqueue("ncclAllGather", ctx,
            [&] { return ncclAllGather(in, out, bytes, ncclUint8, comm_, stream_); });
  }
  /// gradsync::reduce_scatter's device path: ncclReduceScatter of `count` elements per
  /// rank on stream() (op::avg: ncclAvg).
  template <class T, class Op>
  void reduce_scatter_native(const T* in, T* out, std::size_t count, Op, const call_context& ctx) {
    enqueue("ncclReduceScatter", ctx, [&] {
      return ncclReduceScatter(in, out, count, nccl_detail::dtype<T>(), nccl_detail::op<Op>(),
                               comm_, stream_);
    });
  }

  /// The ranks that pass the same `color` (>= 0) form a new transport::nccl on this
  /// device, over a non-blocking communicator from ncclCommSplit (ordered by key, then
  /// rank; collective over this transport, within `d`), with a stream of its own. This
  /// transport stays usable alongside it, unless the split misses `d` (a rank not calling
  /// it): then NCCL leaves this communicator mid-split, so it is aborted (errc::timeout).
  nccl split(int color, int key, deadline d = deadline::after(default_timeout())) {
    if (color < 0) {
      throw error(errc::invalid_argument, {rank_, error_site::npos, ~0ull},
                  "split color must be >= 0 (every rank joins exactly one group)");
    }
    usable(~0ull);
    select_device();
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t c = nullptr;
    check(ncclCommSplit(comm_, color, key, &c, &cfg), "ncclCommSplit");
    // The split is an operation of the parent: on a non-blocking parent the new handle
    // stays null until the parent leaves ncclInProgress (polling the null handle crashed
    // on an H200, 2026-12-04).
    const std::string hint = "are all " + std::to_string(size_) + " ranks calling split?";
    progress(d, ("ncclCommSplit (" + hint + ")").c_str(), ~0ull);
    if (c == nullptr) {
      throw error(errc::transport, {rank_, error_site::npos, ~0ull},
                  "ncclCommSplit completed without a new communicator");
    }
    nccl_detail::wait_ready(c, d, rank_, "ncclCommSplit", hint);
    return nccl(c, device_);
  }

  /// Waits until everything enqueued on stream() has finished, or aborts the
  /// communicator at `until` and throws errc::timeout. Remote failures NCCL reports
  /// asynchronously become errc::transport.
  void synchronize(deadline until) {
    usable(~std::uint64_t{0});
    select_device();
    for (;;) {
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) cuda::check(e, "cudaStreamQuery", __FILE__, __LINE__, {rank_});
      ncclResult_t st = ncclSuccess;
      check(ncclCommGetAsyncError(comm_, &st), "ncclCommGetAsyncError");
      if (st != ncclSuccess && st != ncclInProgress) check(st, "NCCL (asynchronous error)");
      if (abort_.raised()) abort_and_throw("while this rank waited for its stream", ~0ull);
      if (until.expired()) abort_and_throw("the stream's NCCL work did not finish", ~0ull);
      std::this_thread::yield();
    }
  }

  /// Makes this rank's wait in flight and every later one fail with errc::aborted: the
  /// waiting thread sees it within a poll, aborts the communicator (ncclCommAbort, which
  /// also ends kernels stuck on a lost peer) and throws. Thread-safe and
  /// async-signal-safe (core/abort.hpp).
  void abort() noexcept { abort_.raise(); }

  /// Turns a failed NCCL call into errc::transport naming the call and NCCL's message.
  void check(ncclResult_t r, const char* what, std::uint64_t seq = ~std::uint64_t{0}) const {
    if (r == ncclSuccess || r == ncclInProgress) return;
    std::string msg = std::string(what) + " failed: " + ncclGetErrorString(r);
    if (const char* last = ncclGetLastError(comm_); last && *last) msg += ": " + std::string(last);
    throw error(errc::transport, {rank_, error_site::npos, seq}, msg);
  }

 private:
  struct op_entry {
    bool send;
    std::size_t peer;
    void* ptr;
    std::size_t bytes;
  };

  void select_device() const { GRADSYNC_CUDA_CHECK(cudaSetDevice(device_)); }

  void usable(std::uint64_t seq) {
    if (abort_.raised()) abort_and_throw("before this call", seq);
    if (aborted_) {
      throw error(errc::transport, {rank_, error_site::npos, seq},
                  "the NCCL communicator was aborted after an earlier failure or timeout; "
                  "create a new transport");
    }
  }

  // One collective on stream(): refused after an abort, posted on this device by
  // `post` (which returns NCCL's result), and its non-blocking enqueue driven to the end
  // by ctx.until.
  template <class Post>
  void enqueue(const char* what, const call_context& ctx, Post&& post) {
    usable(ctx.seq);
    select_device();
    check(post(), what, ctx.seq);
    progress(ctx.until, what, ctx.seq);
  }

  // Non-blocking communicators return ncclInProgress; poll until done or the deadline.
  void progress(deadline until, const char* what, std::uint64_t seq) {
    for (;;) {
      ncclResult_t st = ncclSuccess;
      check(ncclCommGetAsyncError(comm_, &st), "ncclCommGetAsyncError", seq);
      if (st == ncclSuccess) return;
      if (st != ncclInProgress) check(st, what, seq);
      if (abort_.raised()) abort_and_throw(std::string("while this rank waited in ") + what, seq);
      if (until.expired()) abort_and_throw(std::string(what) + " did not complete", seq);
      std::this_thread::yield();
    }
  }

  // Ends every NCCL operation of this communicator now (on a timeout or abort()).
  void abort_comm() {
    if (!aborted_) {
      ncclCommAbort(comm_);
      aborted_ = true;
    }
  }

  [[noreturn]] void abort_and_throw(const std::string& what, std::uint64_t seq) {
    const bool by_user = abort_.raised();
    abort_comm();
    if (by_user) {
      abort_switch::throw_aborted({rank_, error_site::npos, seq},
                                  what + "; the communicator was aborted (ncclCommAbort)");
    }
    throw error(errc::timeout, {rank_, error_site::npos, seq},
                what + " before the deadline; the communicator was aborted (ncclCommAbort)");
  }

  void flush(deadline until) {
    usable(~0ull);
    select_device();
    check(ncclGroupStart(), "ncclGroupStart");
    for (const op_entry& o : queue_) {
      const int peer = static_cast<int>(o.peer);
      if (o.send) {
        check(ncclSend(o.ptr, o.bytes, ncclUint8, peer, comm_, stream_), "ncclSend");
      } else {
        check(ncclRecv(o.ptr, o.bytes, ncclUint8, peer, comm_, stream_), "ncclRecv");
      }
    }
    const ncclResult_t r = ncclGroupEnd();
    queue_.clear();
    ++group_;
    check(r, "ncclGroupEnd (send/recv group)");
    progress(until, "ncclGroupEnd (send/recv group)", ~0ull);
  }

  ncclComm_t comm_ = nullptr;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  bool own_stream_ = false;
  bool aborted_ = false;
  abort_switch abort_;  // abort()
  std::size_t rank_ = 0, size_ = 1;
  std::uint64_t seq_ = 0;
  std::uint64_t group_ = 0;
  std::vector<op_entry> queue_;
  workspace host_scratch_;
  void* scratch_dev_ = nullptr;
  std::size_t scratch_bytes_ = 0;
};

static_assert(transport_policy<nccl>, "transport::nccl must model transport_policy");
static_assert(device_transport<nccl>, "transport::nccl must model device_transport");

/// Creates a non-blocking NCCL communicator (so deadlines can abort it) for rank `rank`
/// of `size`, on the current device, and waits for it by `until`.
inline ncclComm_t nccl_init_rank(const ncclUniqueId& id, int size, int rank, deadline until) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &cfg);
  const auto fail = [&](const std::string& why, errc code) {
    if (comm) ncclCommAbort(comm);
    throw error(code, {static_cast<std::size_t>(rank), error_site::npos, ~0ull}, why);
  };
  if (r != ncclSuccess && r != ncclInProgress) {
    fail(std::string("ncclCommInitRankConfig failed: ") + ncclGetErrorString(r) + ": " +
             ncclGetLastError(nullptr),
         errc::transport);
  }
  nccl_detail::wait_ready(comm, until, static_cast<std::size_t>(rank), "NCCL communicator creation",
                          "are all " + std::to_string(size) + " ranks calling it?");
  return comm;
}

}  // namespace gradsync::transport
