// SPDX-License-Identifier: Apache-2.0
// Memory spaces at compile time: a std::span is host memory, a gradsync::device_span is
// device memory, and each transport states which one it moves (Tr::memory). Mixing them
// fails to compile with a message naming the transport to use:
//   - host transport (local, shm, mpi) + device_span  -> "use transport::nccl or cuda_ipc"
//   - device transport (nccl, cuda_ipc) + std::span   -> "wrap the buffer in device_span"
// The device entry point is stream-ordered: it enqueues the allreduce on the transport's
// stream and returns; t.synchronize(deadline) waits for it (with the deadline).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>

#include "gradsync/algorithm/concept.hpp"
#include "gradsync/core/consistency.hpp"
#include "gradsync/core/deadline.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/transport/concept.hpp"

namespace gradsync {

/// A contiguous range of T in device memory (cudaMalloc'd, or from a framework tensor).
/// T: the element type (float, double, half, bfloat16, int32_t, int64_t).
template <class T>
class device_span {
 public:
  device_span() = default;
  device_span(T* data, std::size_t count) : data_(data), size_(count) {}
  T* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::size_t size_bytes() const { return size_ * sizeof(T); }
  bool empty() const { return size_ == 0; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

/// A transport whose buffers live in device memory and whose work is stream-ordered
/// (transport::nccl, transport::cuda_ipc).
template <class Tr>
concept device_transport = requires(Tr& t, const Tr& ct, deadline d) {
  { Tr::name } -> std::convertible_to<std::string_view>;  // for logs and errors
  requires Tr::memory == memory_space::device;            // buffers are device memory
  { ct.rank() } -> std::same_as<std::size_t>;             // this rank
  { ct.size() } -> std::same_as<std::size_t>;             // ranks in the group
  { t.next_seq() } -> std::same_as<std::uint64_t>;        // per-call sequence number
  t.synchronize(d);                                       // wait for enqueued work by d
};

/// An algorithm that runs on device memory over transport Tr: it has a static
/// run_device(Tr&, device_span<T>, Op, const call_context&) (e.g. algo::nccl_ring).
template <class A, class Tr>
concept device_algorithm_for = requires(Tr& t, device_span<float> d, const call_context& c) {
  A::run_device(t, d, op::sum, c);
};

template <class T>
inline constexpr bool memory_space_error_v = false;  // dependent false for static_asserts

/// Device transports refuse std::span: it is taken to be host memory.
template <class A, class Tr, class T, class Op>
requires device_transport<Tr>
void allreduce(Tr&, std::span<T>, Op, const call_options& = {}) {
  static_assert(memory_space_error_v<T>,
                "gradsync: this transport (transport::nccl or transport::cuda_ipc) moves device "
                "memory and a std::span means host memory; wrap the GPU buffer in "
                "gradsync::device_span<T>{ptr, count}, or use transport::local, shm or mpi for "
                "host buffers");
}

/// In-place allreduce of device memory, enqueued on t's stream (returns without waiting;
/// t.synchronize(deadline) waits). Every rank ends with bitwise-identical contents.
/// A: algo::native (ncclAllReduce; cuda_ipc one-shot/two-shot kernels) or an algorithm
/// with run_device (algo::nccl_ring).
template <class A, class Tr, class T, class Op>
void allreduce(Tr& t, device_span<T> data, Op op, const call_options& opt = {}) {
  static_assert(device_transport<Tr>,
                "gradsync: device memory (gradsync::device_span) given to a host transport; "
                "use transport::nccl (GPUs anywhere) or transport::cuda_ipc (GPUs of one host) "
                "for device buffers, or copy to host memory and pass a std::span");
  check_element_type<std::remove_const_t<T>>();
  check_op_for<std::remove_const_t<T>, Op>();
  static_assert(!std::is_const_v<T>,
                "gradsync: the in-place allreduce writes its buffer; pass "
                "a device_span of non-const elements");
  constexpr bool native = requires {
    requires A::needs_native;
  };  // algo::native
  static_assert(native || device_algorithm_for<A, Tr>,
                "gradsync: this algorithm is written for host memory (it reduces on the host "
                "and uses host scratch); on device memory use algo::native (transport::nccl, "
                "transport::cuda_ipc) or algo::nccl_ring (transport::nccl)");
  if constexpr (device_transport<Tr>) {
    if (opt.verify) {
      throw error(errc::invalid_argument, {t.rank(), error_site::npos, ~std::uint64_t{0}},
                  "call_options::verify (GRADSYNC_VERIFY=1) hashes results in host memory and "
                  "this transport's buffers are device memory; unset it for device calls");
    }
    const std::uint64_t seq = t.next_seq();
    const call_context ctx{opt.make_deadline(), seq, data_tag(seq)};
    if constexpr (native) {
      static_assert(Tr::native_allreduce,
                    "gradsync: algo::native needs a transport with its own allreduce");
      if (!data.empty()) t.allreduce_native(data.data(), data.size(), op, ctx);
    } else if constexpr (device_algorithm_for<A, Tr>) {
      A::run_device(t, data, op, ctx);
    }
  }
}

}  // namespace gradsync
