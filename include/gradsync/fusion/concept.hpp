// SPDX-License-Identifier: Apache-2.0
// What a fusion policy is: compile-time parameters of the static bucket plan. The
// planning itself (fusion/plan.hpp) and the execution (allreducer.hpp) are shared.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace gradsync::fusion {

/// Where the registered gradients live.
enum class storage : std::uint8_t {
  packed,  ///< in the caller's tensors; each bucket is packed into staging and unpacked
  arena,   ///< zero-copy: in one flat arena owned by gradsync; buckets are views of it
};

/// The order in which registered tensors are laid out in buckets and launched.
enum class order : std::uint8_t {
  reverse,       ///< last registered first: the order a backward pass produces gradients
  registration,  ///< as registered (for grouped calls and forward-ordered producers)
};

/// A fusion policy: how many tensors go into one message and where they live.
template <class F>
concept fusion_policy = requires {
  { F::name } -> std::convertible_to<std::string_view>;           // for logs and stats
  { F::bucket_bytes } -> std::convertible_to<std::size_t>;        // bucket cap; 0: no fusion
  { F::first_bucket_bytes } -> std::convertible_to<std::size_t>;  // cap of bucket 0
  { F::storage } -> std::convertible_to<fusion::storage>;         // packed or zero-copy arena
  { F::order } -> std::convertible_to<fusion::order>;             // plan order
};

/// True when F fuses tensors into buckets (bucket_bytes > 0).
template <class F>
inline constexpr bool is_fused_v = F::bucket_bytes > 0;

/// True when F keeps the gradients in a gradsync-owned arena (zero-copy buckets).
template <class F>
inline constexpr bool is_zero_copy_v = F::storage == storage::arena;

/// A fusion policy's parameters as values, for the parts of the allreducer that are
/// compiled once for every policy (allreducer/tensor_registry.hpp).
struct policy_values {
  std::string_view name;
  std::size_t bucket_bytes = 0, first_bucket_bytes = 0;
  fusion::storage storage = storage::packed;
  fusion::order order = order::reverse;
  bool fused() const { return bucket_bytes > 0; }               ///< is_fused_v
  bool zero_copy() const { return storage == storage::arena; }  ///< is_zero_copy_v
};

/// F's parameters as values.
template <fusion_policy F>
constexpr policy_values values_of() {
  return {F::name, F::bucket_bytes, F::first_bucket_bytes, F::storage, F::order};
}

}  // namespace gradsync::fusion
