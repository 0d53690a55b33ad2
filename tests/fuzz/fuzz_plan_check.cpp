// SPDX-License-Identifier: Apache-2.0
// Feeds the bucket-plan check (fusion::detail::check_plan_on) the peers' summaries, rank 0's
// tensor list and the diff reports from the fuzz input (a rank of up to 8, its 0-24 tensors).
// Must hold: no crash or sanitizer report, no allocation sized by a peer's claim; it passes
// only when every summary is this rank's, else errc::mismatch (or a timeout).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <gradsync/fusion/plan_check.hpp>

#include "fuzz_support.hpp"

namespace gs = gradsync;
namespace fz = gradsync::fuzz;
namespace fd = gradsync::fusion::detail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fz::byte_source in(data, size);
  const bool poisoned = in.take<std::uint8_t>() & 1;
  const std::size_t n = in.in_range(2, 8), r = in.in_range(0, n - 1);
  std::vector<gs::fusion::tensor_desc> mine(in.in_range(0, 24));
  for (std::size_t i = 0; i < mine.size(); ++i) {
    mine[i].count = in.take<std::uint16_t>();
    mine[i].type = static_cast<gs::dtype>(in.in_range(1, 7));
    if (i % 3) mine[i].name = "t" + std::to_string(i);  // some unnamed, as registered
  }
  gs::fusion::plan p;
  p.digest = in.take<std::uint8_t>();  // small: a peer's summary can match it
  fz::fuzz_transport t(in, r, n);
  try {
    fd::check_plan_on(t, std::span<const gs::fusion::tensor_desc>(mine), p,
                      gs::deadline::after(gs::seconds_d{10}), poisoned, gs::same_rank{});
  } catch (const gs::error& e) {
    fz::require(e.code() == gs::errc::mismatch || e.code() == gs::errc::timeout,
                "a plan that differs is errc::mismatch (a peer that never sent: a timeout)");
    fz::require(e.site().rank == r, "the error is this rank's");
    return 0;
  }
  if (poisoned) return 0;  // a rank whose node disagrees returns to raise its own error
  // Passing means every rank stated this rank's summary.
  const fd::plan_summary own{0x67734650, mine.size(), p.digest};
  fz::require(t.received.size() >= (n - 1) * sizeof own, "every peer's summary was received");
  for (std::size_t q = 0; q + 1 < n; ++q) {
    fz::require(std::memcmp(t.received.data() + q * sizeof own, &own, sizeof own) == 0,
                "the check passes only when every summary is this rank's");
  }
  return 0;
}
