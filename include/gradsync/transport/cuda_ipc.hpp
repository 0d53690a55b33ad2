// SPDX-License-Identifier: Apache-2.0
// transport::cuda_ipc — processes of one host (one or several GPUs) share device buffers
// through cudaIpc memory handles; the allreduce is a kernel that reads the peers'
// staging buffers directly (one-shot for small inputs, two-shot otherwise) with a
// barrier of device-memory flags between the processes (memory model: kernels/ipc.cuh).
//
// Setup (collective): each rank allocates one region = flags + two staging halves,
// exports it with cudaIpcGetMemHandle, all-gathers the handles through a bootstrap
// (any object with rank(), size() and allgather(mine, all, bytes): cuda_ipc_fork.hpp's
// fork_group, or ipc_bootstrap_over<Tr> over transport::shm / mpi) and opens the peers'
// with cudaIpcOpenMemHandle. The peers' events are not needed: the flags order the work
// inside the kernels, so no host round trip is made per call (stream-ordered).
//
// A call copies the input into this rank's staging half (cudaMemcpyAsync on stream()),
// launches the kernel, and alternates halves from chunk to chunk: a half is written
// again only two chunks later, after every peer passed the next chunk's first barrier,
// which it can only do once its kernel for the older chunk has finished reading. The
// broadcast, allgather and reduce_scatter kernels follow the same rule (stage, barrier,
// read the peers' staging), so the free device collectives run here too.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
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
#include "gradsync/core/error.hpp"
#include "gradsync/kernels/device_executor.hpp"
#include "gradsync/transport/concept.hpp"
#include "gradsync/transport/cuda_ipc/agree.hpp"

#if defined(__CUDACC__)
#include "gradsync/kernels/ipc.cuh"
#endif

namespace gradsync::transport {

/// What cuda_ipc needs to exchange its handles once: rank, size and an allgather of
/// small blobs (all[r * bytes ...] receives rank r's `mine`).
template <class B>
concept ipc_bootstrap = requires(B& b, const B& cb, const void* mine, void* all, std::size_t n) {
  { cb.rank() } -> std::convertible_to<std::size_t>;
  { cb.size() } -> std::convertible_to<std::size_t>;
  b.allgather(mine, all, n);
};

class cuda_ipc {
 public:
  static constexpr std::string_view name = "cuda_ipc";
  static constexpr memory_space memory = memory_space::device;
  static constexpr bool peer_access = true;
  static constexpr bool native_allreduce = true;
  static constexpr transport_traits traits{.aborts = true, .native_collectives = true};
  static constexpr std::size_t max_ranks = 8;
  static constexpr std::size_t flag_region = max_ranks * 1024 * sizeof(unsigned);
  /// Inputs up to this size use one-shot (one barrier, n-fold reads); larger, two-shot.
  static constexpr std::size_t one_shot_max_bytes = 256 << 10;

  /// Collective: every rank of `boot` calls it with its own device. `staging_bytes` is
  /// the size of each of the two staging halves (inputs larger than it go in chunks), the
  /// same on every rank (errc::mismatch on every rank otherwise, naming the first that
  /// differs).
  template <ipc_bootstrap Boot>
  cuda_ipc(Boot& boot, int device, std::size_t staging_bytes = 64 << 20)
      : rank_(static_cast<std::size_t>(boot.rank())),
        size_(static_cast<std::size_t>(boot.size())),
        device_(device),
        half_(staging_bytes / 256 * 256) {
    if (size_ > max_ranks || half_ == 0) {
      throw error(errc::invalid_argument, {rank_, error_site::npos, ~0ull},
                  "cuda_ipc supports 1.." + std::to_string(max_ranks) +
                      " ranks and a staging buffer of at least 256 bytes");
    }
    GRADSYNC_CUDA_CHECK(cudaSetDevice(device_));
    stream_ = cuda::create_transport_stream(__FILE__, __LINE__);
    GRADSYNC_CUDA_CHECK(cudaMalloc(&region_, flag_region + 2 * half_));
    GRADSYNC_CUDA_CHECK(cudaMemset(region_, 0, flag_region));
    GRADSYNC_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&status_), sizeof(int)));
    GRADSYNC_CUDA_CHECK(cudaMemset(status_, 0, sizeof(int)));
    published mine{};
    GRADSYNC_CUDA_CHECK(cudaIpcGetMemHandle(&mine.handle, region_));
    mine.card.half_bytes = half_;
    mine.card.ranks = size_;
    std::vector<published> all(size_);
    boot.allgather(&mine, all.data(), sizeof mine);
    std::vector<detail::ipc_card> cards(size_);
    for (std::size_t r = 0; r < size_; ++r) cards[r] = all[r].card;
    try {
      detail::check_ipc_cards(rank_, cards);  // before any peer's region is addressed
    } catch (...) {
      cudaFree(status_);
      cudaFree(region_);
      cudaStreamDestroy(stream_);
      throw;
    }
    peers_.assign(size_, nullptr);
    for (std::size_t r = 0; r < size_; ++r) {
      if (r == rank_) {
        peers_[r] = static_cast<std::byte*>(region_);
      } else {
        void* p = nullptr;
        cuda::check(cudaIpcOpenMemHandle(&p, all[r].handle, cudaIpcMemLazyEnablePeerAccess),
                    "cudaIpcOpenMemHandle", __FILE__, __LINE__, {rank_, r, ~0ull});
        peers_[r] = static_cast<std::byte*>(p);
      }
    }
    GRADSYNC_CUDA_CHECK(cudaDeviceSynchronize());
    boot.allgather(&mine, all.data(), sizeof mine);  // everyone mapped before anyone signals
  }
  cuda_ipc(const cuda_ipc&) = delete;
  cuda_ipc& operator=(const cuda_ipc&) = delete;
  /// Not collective: peers may still read this rank's region, so call it only after a
  /// final synchronize() on every rank (tests and benches end with a bootstrap barrier).
  ~cuda_ipc() {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    for (std::size_t r = 0; r < peers_.size(); ++r) {
      if (r != rank_ && peers_[r]) cudaIpcCloseMemHandle(peers_[r]);
    }
    cudaFree(status_);
    cudaFree(region_);
    cudaStreamDestroy(stream_);
  }

  std::size_t rank() const { return rank_; }
  std::size_t size() const { return size_; }
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  std::uint64_t next_seq() { return seq_++; }
  kernels::device_executor executor() const { return {stream_}; }

  /// algo::native's entry: one-shot up to one_shot_max_bytes, two-shot above.
  template <class T, class Op>
  void allreduce_native(T* data, std::size_t count, Op op, const call_context& ctx) {
    if (count * sizeof(T) <= one_shot_max_bytes) {
      one_shot(data, count, op, ctx);
    } else {
      two_shot(data, count, op, ctx);
    }
  }
  template <class T, class Op>
  void one_shot(T* data, std::size_t count, Op op, const call_context& ctx) {
    run<T, Op, false>(data, count, op, ctx);
  }
  template <class T, class Op>
  void two_shot(T* data, std::size_t count, Op op, const call_context& ctx) {
    run<T, Op, true>(data, count, op, ctx);
  }

  /// gradsync::broadcast's device path, in chunks of a staging half: the root stages a
  /// chunk, a barrier, every other rank copies it from the root's staging.
  template <class Byte>
  void broadcast_native(Byte* data, std::size_t bytes, std::size_t root, const call_context& ctx) {
    static_assert(std::is_same_v<Byte, std::byte>, "cuda_ipc::broadcast_native takes bytes");
#if defined(__CUDACC__)
    begin(ctx);
    for (std::size_t off = 0; off < bytes; off += half_) {
      kernels::ipc::coll_args a = chunk_args(ctx);
      a.out = reinterpret_cast<unsigned char*>(data + off);
      a.len = std::min(half_, bytes - off);
      a.root = static_cast<unsigned>(root);
      if (rank_ == root) {
        GRADSYNC_CUDA_CHECK(
            cudaMemcpyAsync(a.data[rank_], data + off, a.len, cudaMemcpyDeviceToDevice, stream_));
      }
      launch(kernels::ipc::broadcast_kernel<>, a, a.len / 4, ctx);
    }
#else
    (void)data, (void)bytes, (void)root, (void)ctx;
    needs_nvcc<Byte>();
#endif
  }

  /// gradsync::allgather's device path, `bytes` per rank, in chunks of a staging half:
  /// each rank stages its chunk, a barrier, each copies every rank's to its block of `out`.
  template <class Byte>
  void allgather_native(const Byte* in, Byte* out, std::size_t bytes, const call_context& ctx) {
    static_assert(std::is_same_v<Byte, std::byte>, "cuda_ipc::allgather_native takes bytes");
#if defined(__CUDACC__)
    begin(ctx);
    for (std::size_t off = 0; off < bytes; off += half_) {
      kernels::ipc::coll_args a = chunk_args(ctx);
      a.out = reinterpret_cast<unsigned char*>(out);
      a.len = std::min(half_, bytes - off);
      a.block = bytes;
      a.offset = off;
      GRADSYNC_CUDA_CHECK(
          cudaMemcpyAsync(a.data[rank_], in + off, a.len, cudaMemcpyDeviceToDevice, stream_));
      launch(kernels::ipc::allgather_kernel<>, a, a.len * size_ / 4, ctx);
    }
#else
    (void)in, (void)out, (void)bytes, (void)ctx;
    needs_nvcc<Byte>();
#endif
  }

  /// gradsync::reduce_scatter's device path: `count` output elements per rank from
  /// size() * count of input. Per chunk each rank stages its size() pieces (16-byte
  /// aligned, one cudaMemcpy2DAsync), a barrier, and rank r reduces piece r of every
  /// rank's staging in rank order (op::avg divides once: the same bits everywhere).
  template <class T, class Op>
  void reduce_scatter_native(const T* in, T* out, std::size_t count, Op op,
                             const call_context& ctx) {
#if defined(__CUDACC__)
    (void)op;
    begin(ctx);
    const std::size_t chunk = kernels::body::scatter_chunk<T>(half_, size_);
    for (std::size_t off = 0; off < count; off += chunk) {
      kernels::ipc::coll_args a = chunk_args(ctx);
      a.out = reinterpret_cast<unsigned char*>(out + off);
      a.len = std::min(chunk, count - off);
      a.stride = kernels::body::scatter_stride<T>(a.len);
      GRADSYNC_CUDA_CHECK(cudaMemcpy2DAsync(a.data[rank_], a.stride * sizeof(T), in + off,
                                            count * sizeof(T), a.len * sizeof(T), size_,
                                            cudaMemcpyDeviceToDevice, stream_));
      launch(kernels::ipc::reduce_scatter_kernel<T, Op>, a, a.len, ctx);
    }
#else
    (void)in, (void)out, (void)count, (void)op, (void)ctx;
    needs_nvcc<T>();
#endif
  }

  /// Makes this rank's wait in flight and every later call fail with errc::aborted
  /// (core/abort.hpp); a kernel already waiting on a peer ends at its own deadline.
  /// Thread-safe and async-signal-safe.
  void abort() noexcept {
    abort_.raise();
  }

  /// Waits for the enqueued work by `until`; a peer that never reached a barrier makes
  /// the kernel give up and this throw errc::timeout naming it.
  void synchronize(deadline until) {
    GRADSYNC_CUDA_CHECK(cudaSetDevice(device_));
    for (;;) {
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady) cuda::check(e, "cudaStreamQuery", __FILE__, __LINE__, {rank_});
      if (abort_.raised()) {
        broken_ = true;  // the kernel may still wait on a peer's barrier
        abort_switch::throw_aborted({rank_, error_site::npos, seq_ - 1},
                                    "while this rank waited for its cuda_ipc work");
      }
      if (until.expired()) {
        throw error(errc::timeout, {rank_, error_site::npos, seq_ - 1},
                    "cuda_ipc work did not finish before the deadline (a peer process stalled)");
      }
      std::this_thread::yield();
    }
    int st = 0;
    GRADSYNC_CUDA_CHECK(cudaMemcpy(&st, status_, sizeof st, cudaMemcpyDeviceToHost));
    if (st != 0) {
      broken_ = true;
      throw error(errc::timeout, {rank_, error_site::npos, seq_ - 1},
                  "a cuda_ipc barrier timed out inside the kernel: some peer process did not "
                  "reach the same allreduce (died, or called something else)");
    }
  }

 private:
  // What each rank all-gathers when the transport is made.
  struct published {
    cudaIpcMemHandle_t handle;
    detail::ipc_card card;
  };

  template <class T, class Op, bool TwoShot>
  void run(T* data, std::size_t count, Op op, const call_context& ctx) {
#if defined(__CUDACC__)
    (void)op;
    begin(ctx);
    const std::size_t chunk = half_ / sizeof(T);
    void (*kernel)(kernels::ipc::args<T>) =
        TwoShot ? kernels::ipc::two_shot_kernel<T, Op> : kernels::ipc::one_shot_kernel<T, Op>;
    const double left = ctx.until.seconds_left();
    const auto timeout_ns = static_cast<unsigned long long>((left > 0.001 ? left : 0.001) * 1e9);
    for (std::size_t off = 0; off < count; off += chunk) {
      const std::size_t len = count - off < chunk ? count - off : chunk;
      kernels::ipc::args<T> a{};
      for (std::size_t r = 0; r < size_; ++r) {
        a.data[r] = reinterpret_cast<T*>(peers_[r] + flag_region + parity_ * half_);
        a.flags[r] = reinterpret_cast<unsigned*>(peers_[r]);
      }
      a.out = data + off;
      a.count = len;
      a.rank = static_cast<unsigned>(rank_);
      a.nranks = static_cast<unsigned>(size_);
      a.epoch = epoch_ + 1;
      epoch_ += TwoShot ? 2 : 1;
      a.timeout_ns = timeout_ns;
      a.status = status_;
      GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(a.data[rank_], data + off, len * sizeof(T),
                                          cudaMemcpyDeviceToDevice, stream_));
      const unsigned grid = grid_for(len, kernel);
      kernel<<<grid, 256, 0, stream_>>>(a);
      cuda::check(cudaGetLastError(), "cuda_ipc kernel launch", __FILE__, __LINE__,
                  {rank_, error_site::npos, ctx.seq});
      parity_ ^= 1u;
    }
#else
    (void)data, (void)count, (void)op, (void)ctx;
    needs_nvcc<T>();
#endif
  }

  template <class T>
  static void needs_nvcc() {
    static_assert(sizeof(T) == 0,
                  "gradsync: transport::cuda_ipc's collectives are CUDA kernels; compile this "
                  "translation unit with nvcc (a .cu file)");
  }

  // Before a call's launches: not aborted, no earlier barrier failed, on this device.
  void begin(const call_context& ctx) {
    abort_.throw_if_raised({rank_, error_site::npos, ctx.seq}, "before this call");
    if (broken_) {
      throw error(errc::transport, {rank_, error_site::npos, ctx.seq},
                  "an earlier cuda_ipc barrier timed out; the group is unusable");
    }
    GRADSYNC_CUDA_CHECK(cudaSetDevice(device_));
  }

#if defined(__CUDACC__)
  // One chunk's launch of a collective: every rank's staging half (this parity) and
  // flags, the barrier's epoch and the time left.
  kernels::ipc::coll_args chunk_args(const call_context& ctx) {
    kernels::ipc::coll_args a{};
    for (std::size_t r = 0; r < size_; ++r) {
      a.data[r] = reinterpret_cast<unsigned char*>(peers_[r] + flag_region + parity_ * half_);
      a.flags[r] = reinterpret_cast<unsigned*>(peers_[r]);
    }
    a.rank = static_cast<unsigned>(rank_);
    a.nranks = static_cast<unsigned>(size_);
    a.epoch = ++epoch_;
    const double left = ctx.until.seconds_left();
    a.timeout_ns = static_cast<unsigned long long>((left > 0.001 ? left : 0.001) * 1e9);
    a.status = status_;
    return a;
  }
  // Launches one chunk on stream() (the same grid on every rank: `units` is the same)
  // and moves on to the other staging half.
  template <class K>
  void launch(K kernel, const kernels::ipc::coll_args& a, std::size_t units,
              const call_context& ctx) {
    kernel<<<grid_for(units, kernel), 256, 0, stream_>>>(a);
    cuda::check(cudaGetLastError(), "cuda_ipc kernel launch", __FILE__, __LINE__,
                {rank_, error_site::npos, ctx.seq});
    parity_ ^= 1u;
  }
#endif

  // The same on every rank (same GPU model and binary). The barrier waits for every
  // block of every rank, so the whole grid must be resident at once: at most what the
  // occupancy calculator allows (and at most 4 blocks per multiprocessor).
  template <class K>
  unsigned grid_for(std::size_t count, K kernel) const {
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 256, 0) != cudaSuccess ||
        per_sm < 1) {
      (void)cudaGetLastError();
      per_sm = 1;
    }
    const std::size_t want = (count / 8 + 255) / 256 + 1;
    std::size_t cap = static_cast<std::size_t>(cuda::sm_count()) *
                      static_cast<std::size_t>(per_sm < 4 ? per_sm : 4);
    if (cap > 1024) cap = 1024;
    return static_cast<unsigned>(want < cap ? want : cap);
  }

  std::size_t rank_, size_;
  int device_;
  std::size_t half_;
  cudaStream_t stream_ = nullptr;
  void* region_ = nullptr;
  int* status_ = nullptr;
  std::vector<std::byte*> peers_;
  std::uint64_t seq_ = 0;
  // Read only by the device collectives, which exist under __CUDACC__ alone.
  [[maybe_unused]] unsigned epoch_ = 0;
  [[maybe_unused]] unsigned parity_ = 0;
  bool broken_ = false;
  abort_switch abort_;  // abort()
};

static_assert(device_transport<cuda_ipc>, "transport::cuda_ipc must model device_transport");

/// An ipc_bootstrap over any host transport (shm, mpi): allgather by point-to-point.
template <transport_policy Tr>
class ipc_bootstrap_over {
 public:
  explicit ipc_bootstrap_over(Tr& t) : t_(t) {}
  std::size_t rank() const { return t_.rank(); }
  std::size_t size() const { return t_.size(); }
  void allgather(const void* mine, void* all, std::size_t bytes) {
    const std::size_t n = t_.size(), r = t_.rank();
    auto* out = static_cast<std::byte*>(all);
    std::memcpy(out + r * bytes, mine, bytes);
    const deadline d = deadline::after(default_timeout());
    const std::uint32_t tag = 0x1bc0u;
    std::vector<typename Tr::request> reqs;
    for (std::size_t p = 0; p < n; ++p) {
      if (p == r) continue;
      reqs.push_back(t_.irecv(p, out + p * bytes, bytes, tag));
      reqs.push_back(t_.isend(p, mine, bytes, tag));
    }
    for (auto& q : reqs) t_.wait(q, d);
  }

 private:
  Tr& t_;
};

}  // namespace gradsync::transport
