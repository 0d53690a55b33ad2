// SPDX-License-Identifier: Apache-2.0
// transport::mpi_device — device buffers through MPI, over an existing transport::mpi:
// allreduce (algo::native), broadcast, allgather and reduce_scatter.
//
//   gradsync::transport::mpi host{MPI_COMM_WORLD};
//   gradsync::transport::mpi_device t{host, /*gpu=*/local_rank};
//   gradsync::allreduce<gradsync::algo::native>(t, gradsync::device_span<float>(d, n), op::avg);
//   ... later work on t.stream() ...;  t.synchronize(deadline);
//
// Two paths, chosen at construction (GRADSYNC_MPI_CUDA_AWARE=0/1 overrides detection):
//  - CUDA-aware MPI (Open MPI's MPIX_Query_cuda_support(), MPICH's): MPI gets the device
//    pointer. MPI is not stream-aware, so the stream is synchronized first (the host
//    blocks for that call); op::avg sums in MPI and divides with a kernel (nvcc).
//  - Otherwise staging through a pinned host buffer, stream-ordered, the calling thread
//    never blocks: on stream(): copy device -> pinned; a host function hands the buffer
//    to this transport's worker thread; a second host function waits until the worker's
//    MPI call is done; copy pinned -> device. The worker runs
//    transport::mpi's native call (MPI_Iallreduce, MPI_Ibcast, MPI_Iallgather,
//    MPI_Ireduce_scatter_block) under the call's deadline; an error
//    there is rethrown by synchronize(). Needs MPI_THREAD_MULTIPLE (the worker calls MPI
//    while the user's thread may too), and the mpi transport must not be used by the
//    caller while calls are in flight. The waiting host function holds CUDA's callback
//    thread; it never calls CUDA (host functions must not).
#pragma once

#include <cuda_runtime_api.h>
#include <mpi.h>
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>
#endif

#include <condition_variable>
#include <cstddef>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "gradsync/core/abort.hpp"
#include "gradsync/core/cuda_check.hpp"
#include "gradsync/core/device_memory.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/kernels/device_executor.hpp"
#include "gradsync/transport/mpi.hpp"

namespace gradsync::transport {

/// Whether the MPI library can take device pointers (GRADSYNC_MPI_CUDA_AWARE overrides).
inline bool mpi_is_cuda_aware() {
  if (const char* e = std::getenv("GRADSYNC_MPI_CUDA_AWARE"); e && *e) {
    if (std::string_view(e) == "1") return true;
    if (std::string_view(e) == "0") return false;
    throw error(errc::invalid_argument, {},
                std::string("GRADSYNC_MPI_CUDA_AWARE must be 0 or 1, got '") + e + "'");
  }
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#elif defined(MPICH_NUMVERSION) && MPICH_NUMVERSION >= 40000000
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

class mpi_device {
 public:
  static constexpr std::string_view name = "mpi_device";
  static constexpr memory_space memory = memory_space::device;
  static constexpr bool peer_access = false;
  static constexpr bool native_allreduce = true;
  static constexpr transport_traits traits{.aborts = true, .native_collectives = true};

  mpi_device(mpi& host, int device, bool cuda_aware = mpi_is_cuda_aware())
      : host_(host), device_(device), cuda_aware_(cuda_aware) {
    GRADSYNC_CUDA_CHECK(cudaSetDevice(device_));
    stream_ = cuda::create_transport_stream(__FILE__, __LINE__);
    if (!cuda_aware_) {
      mpi::require_thread_level(MPI_THREAD_MULTIPLE);
      worker_ = std::thread([this] { work(); });
    }
  }
  mpi_device(const mpi_device&) = delete;
  mpi_device& operator=(const mpi_device&) = delete;
  ~mpi_device() {
    cudaSetDevice(device_);
    {
      std::lock_guard<std::mutex> lk(m_);
      stop_ = true;
    }
    cv_.notify_all();
    cudaStreamSynchronize(stream_);  // host functions still queued finish first
    if (worker_.joinable()) worker_.join();
    if (pinned_) cudaFreeHost(pinned_);
    cudaStreamDestroy(stream_);
  }

  std::size_t rank() const { return host_.rank(); }
  std::size_t size() const { return host_.size(); }
  bool cuda_aware() const { return cuda_aware_; }
  cudaStream_t stream() const { return stream_; }
  std::uint64_t next_seq() { return seq_++; }
  kernels::device_executor executor() const { return {stream_}; }

  /// algo::native's entry (see the header comment for the two paths).
  template <class T, class Op>
  void allreduce_native(T* data, std::size_t count, Op op, const call_context& ctx) {
    const std::size_t bytes = count * sizeof(T);
    reducing(op, data, count, [&](auto mop) {
      through_mpi(data, bytes, data, bytes,
                  [this, count, mop, ctx](const std::byte*, std::byte* h) {
                    host_.allreduce_native(reinterpret_cast<T*>(h), count, mop, ctx);
                  });
    });
  }

  /// gradsync::broadcast's entry: MPI_Ibcast of the device buffer (or its staged copy).
  void broadcast_native(std::byte* data, std::size_t bytes, std::size_t root,
                        const call_context& ctx) {
    through_mpi(data, bytes, data, bytes, [this, bytes, root, ctx](const std::byte*, std::byte* h) {
      host_.broadcast_native(h, bytes, root, ctx);
    });
  }

  /// gradsync::allgather's entry: MPI_Iallgather of `bytes` per rank.
  void allgather_native(const std::byte* in, std::byte* out, std::size_t bytes,
                        const call_context& ctx) {
    through_mpi(in, bytes, out, bytes * host_.size(),
                [this, bytes, ctx](const std::byte* hi, std::byte* ho) {
                  host_.allgather_native(hi, ho, bytes, ctx);
                });
  }

  /// gradsync::reduce_scatter's entry: MPI_Ireduce_scatter_block of `count` elements per
  /// rank.
  template <class T, class Op>
  void reduce_scatter_native(const T* in, T* out, std::size_t count, Op op,
                             const call_context& ctx) {
    const std::size_t bytes = count * sizeof(T);
    reducing(op, out, count, [&](auto mop) {
      through_mpi(in, bytes * host_.size(), out, bytes,
                  [this, count, mop, ctx](const std::byte* hi, std::byte* ho) {
                    host_.reduce_scatter_native(reinterpret_cast<const T*>(hi),
                                                reinterpret_cast<T*>(ho), count, mop, ctx);
                  });
    });
  }

  /// Makes this rank's wait in flight and every later one fail with errc::aborted: the
  /// staged MPI call (host transport's abort()) and synchronize(). Thread-safe and
  /// async-signal-safe (core/abort.hpp).
  void abort() noexcept {
    abort_.raise();
    host_.abort();
  }

  /// Waits for the enqueued work by `until`; rethrows an error of the staged MPI call.
  void synchronize(deadline until) {
    GRADSYNC_CUDA_CHECK(cudaSetDevice(device_));
    for (;;) {
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady) cuda::check(e, "cudaStreamQuery", __FILE__, __LINE__, {rank()});
      if (abort_.raised()) {
        abort_switch::throw_aborted({rank(), error_site::npos, seq_ - 1},
                                    "while this rank waited for its staged MPI call");
      }
      if (until.expired()) {
        throw error(errc::timeout, {rank(), error_site::npos, seq_ - 1},
                    "mpi_device: the staged MPI call did not finish before the deadline");
      }
      std::this_thread::yield();
    }
    std::lock_guard<std::mutex> lk(m_);
    if (failure_) {
      std::exception_ptr f = failure_;
      failure_ = nullptr;
      std::rethrow_exception(f);
    }
  }

 private:
  // CUDA host functions: no CUDA calls in here.
  static void hand_over(void* self) {
    auto* t = static_cast<mpi_device*>(self);
    std::lock_guard<std::mutex> lk(t->m_);
    ++t->released_;
    t->cv_.notify_all();
  }
  static void wait_done(void* self) {
    auto* t = static_cast<mpi_device*>(self);
    std::unique_lock<std::mutex> lk(t->m_);
    t->cv_.wait(lk, [t] { return t->finished_ >= t->released_ || t->stop_; });
  }

  /// Runs `call(mpi_op)` for a reduction into `out`: with CUDA-aware MPI and an op that
  /// divides (op::avg), MPI sums device memory and a kernel divides; otherwise MPI applies
  /// `op` itself (on the staged copy, in host memory).
  template <class T, class Op, class Call>
  void reducing(Op op, T* out, std::size_t count, Call call) {
    if constexpr (kernels::needs_finalize_v<Op>) {
      if (cuda_aware_) {
        call(op::sum);
        executor().finalize(out, count, host_.size(), op);
        return;
      }
    }
    call(op);
  }

  /// Runs `job(in, out)` on the call's buffers: with CUDA-aware MPI on the device
  /// pointers once the stream is idle; otherwise on pinned host copies, stream-ordered:
  /// in_bytes copied down, the job handed to the worker, out_bytes copied back up (one
  /// region when in == out).
  template <class Job>
  void through_mpi(const void* in, std::size_t in_bytes, void* out, std::size_t out_bytes,
                   Job job) {
    GRADSYNC_CUDA_CHECK(cudaSetDevice(device_));
    if (cuda_aware_) {
      GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(stream_));
      job(static_cast<const std::byte*>(in), static_cast<std::byte*>(out));
      return;
    }
    const bool in_place = in == out;
    const std::size_t need = in_place ? in_bytes : in_bytes + out_bytes;
    if (need > pinned_bytes_) {
      GRADSYNC_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the old buffer may be in use
      if (pinned_) GRADSYNC_CUDA_CHECK(cudaFreeHost(pinned_));
      pinned_ = nullptr;
      GRADSYNC_CUDA_CHECK(cudaMallocHost(&pinned_, need));
      pinned_bytes_ = need;
    }
    std::byte* const h_in = static_cast<std::byte*>(pinned_);
    std::byte* const h_out = in_place ? h_in : h_in + in_bytes;
    if (in_bytes) {
      GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(h_in, in, in_bytes, cudaMemcpyDeviceToHost, stream_));
    }
    {
      std::lock_guard<std::mutex> lk(m_);
      pending_.push_back([job, h_in, h_out] { job(h_in, h_out); });
    }
    GRADSYNC_CUDA_CHECK(cudaLaunchHostFunc(stream_, &mpi_device::hand_over, this));
    GRADSYNC_CUDA_CHECK(cudaLaunchHostFunc(stream_, &mpi_device::wait_done, this));
    if (out_bytes) {
      GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(out, h_out, out_bytes, cudaMemcpyHostToDevice, stream_));
    }
  }

  void work() {
    std::unique_lock<std::mutex> lk(m_);
    for (;;) {
      cv_.wait(lk, [this] { return stop_ || released_ > finished_; });
      if (released_ == finished_ && stop_) return;
      std::function<void()> job = std::move(pending_.front());
      pending_.pop_front();
      lk.unlock();
      std::exception_ptr f;
      try {
        job();
      } catch (...) {
        f = std::current_exception();
      }
      lk.lock();
      if (f && !failure_) failure_ = f;
      ++finished_;
      cv_.notify_all();
    }
  }

  mpi& host_;
  int device_;
  bool cuda_aware_;
  cudaStream_t stream_ = nullptr;
  void* pinned_ = nullptr;
  std::size_t pinned_bytes_ = 0;
  std::uint64_t seq_ = 0;
  abort_switch abort_;  // abort()
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> pending_;
  std::uint64_t released_ = 0, finished_ = 0;
  bool stop_ = false;
  std::exception_ptr failure_;
  std::thread worker_;
};

static_assert(device_transport<mpi_device>, "transport::mpi_device must model device_transport");

}  // namespace gradsync::transport
