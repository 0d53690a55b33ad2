// SPDX-License-Identifier: Apache-2.0
// Feeds the non-finite check (agree_finite) the peers' findings from the fuzz input, for a
// rank of up to 16 in a call of up to 8 tensors, with a finding of its own or none.
// Must hold: no crash or sanitizer report; a finding without its NULs or naming no tensor
// is errc::mismatch; a sound one is errc::non_finite naming a tensor of the call.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gradsync/check/finite.hpp>

#include "fuzz_support.hpp"

namespace gs = gradsync;
namespace fz = gradsync::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fz::byte_source in(data, size);
  const std::size_t n = in.in_range(2, 16), r = in.in_range(0, n - 1);
  const std::size_t tensors = in.in_range(1, 8);
  // This rank's own finding, as make_finding writes it: none, or a NaN in a tensor of the call.
  gs::finite_finding mine;
  const std::size_t at = in.in_range(0, tensors);
  const std::string who = "rank " + std::to_string(r);
  if (at < tensors) {
    const float nan = NAN;
    mine = gs::detail::make_finding(at, in.take<std::uint16_t>(), &nan, r, who);
  } else {
    mine = gs::detail::make_finding(0, 0, static_cast<const float*>(nullptr), r, who);
  }
  fz::fuzz_transport t(in, r, n);
  bool named = false;
  try {
    gs::agree_finite(
        t, mine, gs::deadline::after(gs::seconds_d{10}),
        [&](std::size_t i) {
          fz::require(i < tensors, "a finding names a tensor of the call");
          named = true;
          return "tensor #" + std::to_string(i);
        },
        gs::detail::nothing_reduced, tensors);
  } catch (const gs::error& e) {
    switch (e.code()) {
      case gs::errc::timeout:  // the input ended before every finding
        return 0;
      case gs::errc::mismatch:
        fz::require(e.site().peer < n && e.site().peer != r, "a bad finding names its peer");
        fz::require(
            std::string(e.what()).find("sent a non-finite finding naming") != std::string::npos,
            "the message says what was wrong with it");
        return 0;
      case gs::errc::non_finite:
        fz::require(named, "a non-finite error names the tensor");
        fz::require(std::string(e.what()).find("non-finite input: ") != std::string::npos,
                    "the message is the finding's");
        return 0;
      default:
        fz::require(false, "only timeout, mismatch or non_finite");
    }
  }
  fz::require(!mine.found(), "a rank that found a NaN never passes the check");
  return 0;
}
