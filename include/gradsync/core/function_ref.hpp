// SPDX-License-Identifier: Apache-2.0
// A non-owning reference to a callable. The code every call runs around its algorithm
// (argument agreement, checks, flight recorder) takes the algorithm as one, so that code
// is compiled once per transport and element type instead of once per algorithm and op
// (docs/build-time.md).
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace gradsync::detail {

template <class Signature>
class function_ref;

/// A callable F that a function_ref of Self (returning R from Args) can refer to: not
/// another Self (copies stay copies).
template <class F, class Self, class R, class... Args>
concept ref_target =
    !std::is_same_v<std::remove_cvref_t<F>, Self> && std::is_invocable_r_v<R, F&, Args...>;

/// Calls a callable it does not own; the callable must outlive the reference (pass a
/// lambda as an argument, do not store the reference).
template <class R, class... Args>
class function_ref<R(Args...)> {
 public:
  /// Refers to f. Implicit, so that a lambda converts where it is passed.
  template <ref_target<function_ref, R, Args...> F>
  // NOLINTNEXTLINE(bugprone-forwarding-reference-overload): ref_target excludes function_ref
  function_ref(F&& f) noexcept
      : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* o, Args... a) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<Args>(a)...);
        }) {}

  R operator()(Args... a) const { return call_(obj_, std::forward<Args>(a)...); }

 private:
  void* obj_;
  R (*call_)(void*, Args...);
};

}  // namespace gradsync::detail
