// SPDX-License-Identifier: Apache-2.0
// The in-place allreduce of host memory over one flat transport, inside its call frame
// (check/call_frame.hpp): what gradsync::allreduce runs once it has checked its
// arguments, and what an allreducer's bucket runs (allreducer/bucket_runner.hpp), so
// that a bucket does not go back up through the public entry point. A bucket whose
// algorithm runs on bytes comes with its element type already erased
// (algo/detail/erased_op.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "gradsync/algo/concept.hpp"
#include "gradsync/algo/detail/erased_op.hpp"
#include "gradsync/check/call_frame.hpp"
#include "gradsync/core/call.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/function_ref.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/kernels/finite.hpp"

namespace gradsync::detail {

/// What an in-place host allreduce does around its algorithm `run`, through the call's
/// frame: the header agreement (unless the algorithm checks headers itself), the
/// non-finite check `scan` (when `finite`), the flight recorder's phases and the result
/// check of the `bytes` bytes at `data`. It depends on neither the algorithm, the
/// element type nor the op, so it is compiled once per transport.
template <class Tr>
void checked_allreduce(call_frame<Tr>& f, const void* data, std::size_t bytes, bool self_checked,
                       bool finite, function_ref<void()> scan, function_ref<void()> run) {
  const call_context& ctx = f.context();
  f.run([&] {
    // ctx.check_finite: the algorithm checks in its own pass (it also sets the header flag).
    if (!self_checked) {
      f.agree(f.header(finite || ctx.check_finite ? call_header::finite_checked : 0));
    }
    if (finite) scan();
    f.mark_checked();
    run();
    f.verify(data, bytes);
  });
}

/// The in-place allreduce of `data` over the flat transport `t` (or a wrapper of it) with
/// algorithm A: one call, numbered and checked as call_options `opt` ask. The caller has
/// checked the composition (check_composition) and the span.
template <class A,   ///< the algorithm (algo/concept.hpp)
          class Tr,  ///< the transport, or a wrapper that forwards to it
          class T,   ///< the element type
          class Op>  ///< the reduction (core/op.hpp)
void host_allreduce(Tr& t, std::span<T> data, Op op, const call_options& opt) {
  call_frame<Tr> f(t, opt, {"allreduce", A::name, dtype_of<T>::value, Op::id, data.size(), {}});
  call_context& ctx = f.context();
  // Algorithms that compare call headers in their own first exchange (algo::direct_*)
  // skip this round trip; those that look for NaN and Inf in their own first read of the
  // input skip the separate pass over it (their traits say so: algo/concept.hpp).
  constexpr algorithm_traits caps = traits_of<A, Tr>();
  ctx.check_finite = caps.checks_finite && opt.check_finite && kernels::can_be_non_finite_v<T>;
  const bool finite = kernels::can_be_non_finite_v<T> && opt.check_finite && !ctx.check_finite;
  checked_allreduce(
      f, data.data(), data.size_bytes(), caps.checks_headers, finite,
      [&] { f.check_finite(data.data(), data.size()); }, [&] { A::run(t, data, op, ctx); });
}

/// The in-place allreduce of `count` elements at `data` of the type and op `ops` erased,
/// with an algorithm that runs on bytes: what an allreducer's bucket runs, the element type
/// having been erased once, when the allreducer was committed. Without a finite check:
/// the allreducer checks its tensors in its own pack pass, and its `opt` asks for none.
template <class A,   ///< the algorithm; its traits on Tr say on_bytes
          class Tr,  ///< the transport, or a wrapper that forwards to it
          class Ex>  ///< Tr's executor type
void host_allreduce_bytes(Tr& t, std::byte* data, std::size_t count,
                          const algo::detail::erased_op<Ex>& ops, const call_options& opt) {
  static_assert(traits_of<A, Tr>().on_bytes,
                "gradsync: host_allreduce_bytes runs algorithms whose traits say on_bytes");
  call_frame<Tr> f(t, opt, {"allreduce", A::name, ops.type, ops.id, count, {}});
  const call_context& ctx = f.context();
  checked_allreduce(
      f, data, count * ops.elem, traits_of<A, Tr>().checks_headers, false, [] {},
      [&] { A::run_bytes(t, data, count, ops, ctx); });
}

}  // namespace gradsync::detail
