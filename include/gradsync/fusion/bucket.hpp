// SPDX-License-Identifier: Apache-2.0
// fusion::bucket<Bytes> — DDP-style static buckets: registered tensors are grouped, in
// reverse registration order, into buckets of at most Bytes (the first one smaller so
// communication starts early), and a bucket is launched once all its tensors are ready.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string_view>

#include "gradsync/fusion/concept.hpp"

namespace gradsync::fusion {

/// Default cap of the first bucket: 1 MiB (PyTorch DDP's choice), or Bytes if smaller.
inline constexpr std::size_t default_first_bucket(std::size_t bytes) {
  return std::min<std::size_t>(bytes, std::size_t{1} << 20);
}

template <std::size_t Bytes,                                  ///< cap of every bucket but the first
          fusion::storage Storage = fusion::storage::packed,  ///< packed, or arena (zero-copy)
          fusion::order Order = fusion::order::reverse,       ///< plan order of the tensors
          std::size_t FirstBytes = default_first_bucket(Bytes)>  ///< cap of bucket 0
struct bucket {
  static_assert(Bytes > 0,
                "gradsync::fusion::bucket<Bytes>: Bytes must be > 0 (e.g. bucket<25 << 20>); "
                "use fusion::none for no fusion");
  static_assert(FirstBytes > 0 && FirstBytes <= Bytes,
                "gradsync::fusion::bucket: the first bucket cap must be in (0, Bytes]");
  static constexpr std::string_view name =
      Storage == fusion::storage::arena ? "zero_copy" : "bucket";
  static constexpr std::size_t bucket_bytes = Bytes;
  static constexpr std::size_t first_bucket_bytes = FirstBytes;
  static constexpr fusion::storage storage = Storage;
  static constexpr fusion::order order = Order;
};

/// Zero-copy buckets: gradients live in one flat arena owned by the allreducer (get
/// them with allreducer::view<T>(i)); buckets are views, nothing is packed.
template <std::size_t Bytes, fusion::order Order = fusion::order::reverse,
          std::size_t FirstBytes = default_first_bucket(Bytes)>
using zero_copy = bucket<Bytes, fusion::storage::arena, Order, FirstBytes>;

static_assert(fusion_policy<bucket<25 << 20>>);
static_assert(fusion_policy<zero_copy<25 << 20>>);

}  // namespace gradsync::fusion
