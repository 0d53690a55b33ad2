// SPDX-License-Identifier: Apache-2.0
// Feeds the argument agreement call headers from the fuzz input: a table given directly to
// detail::check_agreement (and describe / first_difference), or the peers' side of agree().
// Must hold: no crash or sanitizer report; the call passes exactly when every header is
// rank 0's, byte for byte, else errc::mismatch counting the ranks that differ.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gradsync/check/consistency.hpp>

#include "fuzz_support.hpp"

namespace gs = gradsync;
namespace fz = gradsync::fuzz;

namespace {

// How many entries differ from rank 0's (table[i] holds rank (r + i) % n): every field
// counts, and the header has no padding, so a byte compare is the reference.
std::size_t differing(const std::vector<gs::call_header>& table, std::size_t r) {
  const std::size_t n = table.size();
  const gs::call_header& ref = table[(n - r) % n];
  std::size_t d = 0;
  for (const auto& h : table) d += std::memcmp(&h, &ref, sizeof h) != 0;
  return d;
}

void expect_verdict(const std::vector<gs::call_header>& table, std::size_t r, bool threw,
                    const std::string& what) {
  const std::size_t d = differing(table, r);
  fz::require(threw == (d != 0), "the call fails exactly when some header differs");
  if (threw) {
    fz::require(
        what.find("(" + std::to_string(d) + " rank(s) differ from rank 0)") != std::string::npos,
        "the message counts the ranks that differ");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fz::byte_source in(data, size);
  const bool exchange = in.take<std::uint8_t>() & 1;
  const std::size_t n = in.in_range(1, 16), r = in.in_range(0, n - 1);
  const auto mine = in.take<gs::call_header>();
  std::vector<gs::call_header> table;
  bool threw = false;
  std::string what;
  if (exchange) {
    fz::fuzz_transport t(in, r, n);
    try {
      gs::agree(t, mine, gs::deadline::after(gs::seconds_d{10}), table);
    } catch (const gs::error& e) {
      if (e.code() == gs::errc::timeout) return 0;  // the input ended before the table
      fz::require(e.code() == gs::errc::mismatch && e.site().rank == r,
                  "a disagreement is errc::mismatch on this rank");
      threw = true;
      what = e.what();
    }
    fz::require(table.size() == n && std::memcmp(&table[0], &mine, sizeof mine) == 0,
                "the table holds this rank's header first");
  } else {
    table.assign(n, mine);
    for (std::size_t i = 1; i < n; ++i) table[i] = in.take<gs::call_header>();
    try {
      gs::detail::check_agreement(table, r, mine, gs::same_rank{}, "allreduce");
    } catch (const gs::error& e) {
      fz::require(e.code() == gs::errc::mismatch && e.site().rank == r,
                  "a disagreement is errc::mismatch on this rank");
      threw = true;
      what = e.what();
    }
  }
  expect_verdict(table, r, threw, what);
  // The message helpers read every field of a peer's header, the name without its NUL too.
  for (const auto& h : table) {
    fz::require(!gs::detail::describe(h).empty(), "a header is described");
    fz::require(gs::detail::first_difference(h, h).empty(), "a header equals itself");
    // At most the field's bytes, each printed as itself or as 4 characters (\xHH), and
    // printable ASCII only: a peer's bytes go into messages and logs.
    const std::string name = h.algo_name();
    fz::require(name.size() <= 4 * h.algo.size(), "the name ends inside its field");
    for (const char c : name) {
      fz::require(c >= 0x20 && c < 0x7f, "the name is printable ASCII");
    }
    fz::require(gs::detail::first_difference(table[0], h).empty() ==
                    (std::memcmp(&table[0], &h, sizeof h) == 0),
                "first_difference names a field exactly when the headers differ");
  }
  return 0;
}
