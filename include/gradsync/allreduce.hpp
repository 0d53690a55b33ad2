// SPDX-License-Identifier: Apache-2.0
// Every free entry point of gradsync: the in-place allreduce<Algorithm>(transport, data, op)
// and the out-of-place one on host memory, over a flat transport or a group with levels
// (transport/levels.hpp: algo::hierarchical), and the stream-ordered one on device memory
// (device_span, over transport::nccl / cuda_ipc / mpi_device). Each opens its call through a frame
// (check/call_frame.hpp); the host one's body is detail/host_allreduce.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

#include "gradsync/algo/composition.hpp"
#include "gradsync/algo/concept.hpp"
#include "gradsync/algo/hierarchical.hpp"
#include "gradsync/algo/runs_on.hpp"
#include "gradsync/check/call_frame.hpp"
#include "gradsync/core/call.hpp"
#include "gradsync/core/device_memory.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/detail/host_allreduce.hpp"
#include "gradsync/detail/native_collectives.hpp"
#include "gradsync/transport/concept.hpp"
#include "gradsync/transport/levels.hpp"

namespace gradsync {

namespace detail {
/// The invalid_argument of an out-of-place call whose spans differ in length (or, of the
/// same length, partly overlap). The checks stay in the caller, where the compiler sees
/// that the copy after them only runs on valid spans.
[[noreturn]] inline void throw_out_of_place(std::size_t rank, std::size_t in_count,
                                            std::size_t out_count) {
  if (in_count != out_count) {
    throw error(errc::invalid_argument, {rank, error_site::npos, ~std::uint64_t{0}},
                "input has " + std::to_string(in_count) + " elements but output has " +
                    std::to_string(out_count));
  }
  throw error(errc::invalid_argument, {rank, error_site::npos, ~std::uint64_t{0}},
              "input and output partly overlap; pass the same span for in-place or disjoint "
              "spans");
}
}  // namespace detail

/// In-place allreduce of `data` across the ranks of `t` with algorithm A. Every rank
/// ends with bitwise-identical contents. Throws gradsync::error (timeout, peer_lost,
/// mismatch, invalid_argument, transport) instead of hanging; with opt.verify the ranks
/// then compare hashes of their results (diverged if any differs).
template <class A, class Tr, class T, class Op>
void allreduce(Tr& t, std::span<T> data, Op op, const call_options& opt = {}) {
  check_composition<A, Tr, std::remove_const_t<T>, Op>();
  static_assert(!std::is_const_v<T>,
                "gradsync: the in-place allreduce writes its buffer; pass a std::span of "
                "non-const elements (or use the overload with a separate output span)");
  if constexpr (!std::is_const_v<T>) detail::host_allreduce<A>(t, data, op, opt);
}

/// Out-of-place allreduce: `out` receives the reduction of every rank's `in`; `in` is
/// left untouched. The spans must have the same length and must not partly overlap.
template <class A, class Tr, class TIn, class T, class Op>
requires std::is_same_v<std::remove_const_t<TIn>, T>
void allreduce(Tr& t, std::span<TIn> in, std::span<T> out, Op op, const call_options& opt = {}) {
  check_composition<A, Tr, T, Op>();
  const auto* ib = reinterpret_cast<const std::byte*>(in.data());
  const auto* ob = reinterpret_cast<const std::byte*>(out.data());
  const std::size_t bytes = in.size_bytes();
  if (in.size() != out.size() || (ib != ob && bytes && ib < ob + bytes && ob < ib + bytes)) {
    detail::throw_out_of_place(t.rank(), in.size(), out.size());
  }
  t.executor().copy(out.data(), in.data(), in.size_bytes());
  allreduce<A>(t, out, op, opt);
}

/// In-place allreduce over a group with levels; A must be algo::hierarchical<...>, which
/// opens the call's frame over every level itself.
template <class A, transport::leveled Tr, class T, class Op>
void allreduce(Tr& t, std::span<T> data, Op op, const call_options& opt = {}) {
  check_composition<A, Tr, std::remove_const_t<T>, Op>();
  static_assert(!std::is_const_v<T>,
                "gradsync: the in-place allreduce writes its buffer; pass a std::span of "
                "non-const elements");
  if constexpr (detail::is_hierarchical<A>) A::run(t, data, op, opt);
}

/// Always false, but dependent on T: a static_assert on it fires only when instantiated.
template <class T>
inline constexpr bool memory_space_error_v = false;

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
  static_assert(!std::is_const_v<T>,
                "gradsync: the in-place allreduce writes its buffer; pass "
                "a device_span of non-const elements");
  if constexpr (device_transport<Tr>) {
    check_composition<A, Tr, std::remove_const_t<T>, Op>();
    const detail::call_frame<Tr> f(
        t, opt, {"allreduce", A::name, dtype_of<T>::value, Op::id, data.size(), {}},
        detail::on_device);
    const call_context& ctx = f.context();
    if constexpr (A::traits.needs_native) {
      if (!data.empty()) t.allreduce_native(data.data(), data.size(), op, ctx);
    } else if constexpr (runs_on_v<A, Tr>) {
      A::run_device(t, data, op, ctx);
    }
  }
}

}  // namespace gradsync
