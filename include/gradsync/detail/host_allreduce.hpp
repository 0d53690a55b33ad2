// SPDX-License-Identifier: Apache-2.0
// The in-place allreduce of host memory over one flat transport, inside its call frame
// (check/call_frame.hpp): what gradsync::allreduce runs once it has checked its
// arguments, and what an allreducer's bucket runs (allreducer/bucket_runner.hpp), so
// that a bucket does not go back up through the public entry point.
#pragma once

#include <span>

#include "gradsync/algo/concept.hpp"
#include "gradsync/check/call_frame.hpp"
#include "gradsync/core/call.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/function_ref.hpp"
#include "gradsync/kernels/finite.hpp"

namespace gradsync::detail {

/// What an in-place host allreduce does around its algorithm `run`, through the call's
/// frame: the header agreement (unless the algorithm checks headers itself), the
/// non-finite check, the flight recorder's phases and the result check. It depends on
/// neither the algorithm nor the op, so it is compiled once per transport and element
/// type.
template <class Tr, class T>
void checked_allreduce(call_frame<Tr>& f, std::span<T> data, bool self_checked,
                       function_ref<void()> run) {
  const call_context& ctx = f.context();
  // ctx.check_finite: the algorithm checks in its own pass (it also sets the header flag).
  const bool finite =
      kernels::can_be_non_finite_v<T> && f.options().check_finite && !ctx.check_finite;
  f.run([&] {
    if (!self_checked) {
      f.agree(f.header(finite || ctx.check_finite ? call_header::finite_checked : 0));
    }
    if (finite) f.check_finite(data.data(), data.size());
    f.mark_checked();
    run();
    f.verify(data.data(), data.size_bytes());
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
  checked_allreduce(f, data, caps.checks_headers, [&] { A::run(t, data, op, ctx); });
}

}  // namespace gradsync::detail
