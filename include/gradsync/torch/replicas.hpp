// SPDX-License-Identifier: Apache-2.0
// Whether every rank still holds the same model: a hash of the parameters' bytes
// (kernels/hash.hpp) allgathered across ranks. Bitwise-identical results are gradsync's
// promise; this catches what breaks it outside gradsync (a rank's own bug, a bad DIMM)
// before it is trained on for days.
#pragma once

#include <ATen/core/Tensor.h>  // at::Tensor alone: torch/torch.h takes 5x as long to parse

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "gradsync/allgather.hpp"
#include "gradsync/core/call.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/kernels/hash.hpp"

namespace gradsync::torch::replicas {

/// One hash of every tensor's bytes, in order.
inline std::uint64_t hash(const std::vector<at::Tensor>& tensors) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const auto& x : tensors) {
    const at::Tensor c = x.contiguous();
    h = (h ^ kernels::buffer_hash(c.data_ptr(), c.nbytes())) * 0x100000001b3ull;
  }
  return h;
}

/// Allgathers every rank's hash of `tensors`; errc::diverged on every rank, naming the
/// ranks whose hash differs from rank 0's, when any does. `step` names the moment.
/// Collective; the transport must be idle (no step in flight).
template <class Tr>
void check(Tr& t, const std::vector<at::Tensor>& tensors, std::size_t step,
           const call_options& opt) {
  const std::int64_t mine = std::bit_cast<std::int64_t>(hash(tensors));
  std::vector<std::int64_t> all(t.size());
  gradsync::allgather(t, std::span<const std::int64_t>(&mine, 1), std::span<std::int64_t>(all),
                      opt);
  std::string bad, detail;
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (all[r] != all[0]) bad += (bad.empty() ? "" : ", ") + std::to_string(r);
    char b[40];
    std::snprintf(b, sizeof b, "%016llx",
                  static_cast<unsigned long long>(std::bit_cast<std::uint64_t>(all[r])));
    detail += "\n  rank " + std::to_string(r) + ": " + b;
  }
  if (!bad.empty()) {
    throw error(errc::diverged, error_site{t.rank()},
                "replica check after step " + std::to_string(step) +
                    ": the parameters of rank(s) " + bad + " differ from rank 0's" + detail);
  }
}

}  // namespace gradsync::torch::replicas
