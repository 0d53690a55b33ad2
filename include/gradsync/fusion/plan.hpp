// SPDX-License-Identifier: Apache-2.0
// The static bucket plan: computed once from the registered tensor list (counts and
// types only, never pointers), so it is identical on every rank that registered the
// same list. Buckets are launched in plan order; tensors sit at fixed offsets of one
// flat layout (the zero-copy arena, or the staging buffer of packed buckets).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gradsync/core/dtype.hpp"
#include "gradsync/fusion/concept.hpp"
#include "gradsync/fusion/tensor.hpp"

namespace gradsync::fusion {

/// Byte alignment of every bucket in the flat layout (a cache line).
inline constexpr std::size_t bucket_alignment = 64;

/// One bucket: tensors of one element type, contiguous in the flat layout.
struct bucket_desc {
  dtype type = dtype::f32;
  std::size_t offset = 0;            // bytes from the start of the layout
  std::size_t count = 0;             // elements
  std::vector<std::size_t> tensors;  // registration indices, in layout order

  std::size_t bytes() const { return count * dtype_size(type); }
};

/// The plan: buckets in launch order and where each tensor lives.
struct plan {
  std::vector<bucket_desc> buckets;        // launch order
  std::vector<std::size_t> tensor_bucket;  // registration index -> bucket
  std::vector<std::size_t> tensor_offset;  // registration index -> byte offset in the layout
  std::vector<std::size_t> tensor_bytes;   // registration index -> bytes
  std::size_t layout_bytes = 0;            // size of the flat layout
  std::size_t payload_bytes = 0;           // sum of the tensors' bytes
  std::uint64_t digest = 0;                // hash of everything the plan was computed from

  /// "12 buckets for 161 tensors (97.5 MiB): [0] float32 1.0 MiB x 3 tensors, ..."
  std::string describe(std::size_t max_buckets = 8) const {
    std::string s = std::to_string(buckets.size()) + " bucket(s) for " +
                    std::to_string(tensor_bucket.size()) + " tensor(s), " +
                    std::to_string(payload_bytes) + " bytes:";
    for (std::size_t b = 0; b < buckets.size() && b < max_buckets; ++b) {
      const auto& k = buckets[b];
      s += " [" + std::to_string(b) + "] " + std::string(dtype_name(k.type)) + " " +
           std::to_string(k.bytes()) + " B x " + std::to_string(k.tensors.size()) + " tensor(s)";
    }
    if (buckets.size() > max_buckets) s += " ...";
    return s;
  }
};

namespace detail {
inline std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 0x100000001b3ull;
  }
  return h;
}
}  // namespace detail

/// Digest of a tensor list and plan parameters (equal lists and parameters, equal digest).
inline std::uint64_t plan_digest(std::span<const tensor_desc> tensors, std::size_t cap,
                                 std::size_t first_cap, order o, storage st) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  h = detail::mix(h, tensors.size());
  for (const auto& t : tensors) {
    h = detail::mix(detail::mix(h, t.count), static_cast<unsigned>(t.type));
    if (t.shape.rows) h = detail::mix(detail::mix(h, t.shape.rows), t.shape.cols);
  }
  h = detail::mix(h, cap);
  h = detail::mix(h, first_cap);
  h = detail::mix(h, static_cast<unsigned>(o));
  return detail::mix(h, static_cast<unsigned>(st));
}

/// Computes the plan. Tensors are taken in `o` order; each goes into the open bucket of
/// its element type, which is closed when the tensor would push it past its cap
/// (`first_cap` for bucket 0, `cap` after). cap == 0 means one bucket per tensor. A
/// tensor larger than the cap gets a bucket of its own. Buckets launch in the order
/// they were opened, so bucket 0 holds the first gradients a backward pass produces.
inline plan make_plan(std::span<const tensor_desc> tensors, std::size_t cap, std::size_t first_cap,
                      order o, storage st = storage::packed) {
  plan p;
  const std::size_t n = tensors.size();
  p.tensor_bucket.assign(n, 0);
  p.tensor_offset.assign(n, 0);
  p.tensor_bytes.assign(n, 0);
  p.digest = plan_digest(tensors, cap, first_cap, o, st);
  constexpr std::size_t none = static_cast<std::size_t>(-1);
  std::vector<std::size_t> open(8, none);  // dtype -> open bucket
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t i = o == order::reverse ? n - 1 - k : k;
    const auto& t = tensors[i];
    const std::size_t ti = static_cast<std::size_t>(t.type) % open.size();
    std::size_t b = open[ti];
    if (b != none) {
      const std::size_t lim = b == 0 ? first_cap : cap;
      if (cap == 0 || p.buckets[b].bytes() + t.bytes() > lim) b = none;
    }
    if (b == none) {
      b = p.buckets.size();
      p.buckets.push_back(bucket_desc{t.type, 0, 0, {}});
      open[ti] = b;
    }
    p.buckets[b].tensors.push_back(i);
    p.buckets[b].count += t.count;
    p.tensor_bucket[i] = b;
  }
  std::size_t off = 0;
  for (auto& b : p.buckets) {
    off = (off + bucket_alignment - 1) / bucket_alignment * bucket_alignment;
    b.offset = off;
    for (std::size_t i : b.tensors) {
      p.tensor_offset[i] = off;
      p.tensor_bytes[i] = tensors[i].bytes();
      off += tensors[i].bytes();
      p.payload_bytes += tensors[i].bytes();
    }
  }
  p.layout_bytes = (off + bucket_alignment - 1) / bucket_alignment * bucket_alignment;
  return p;
}

}  // namespace gradsync::fusion
