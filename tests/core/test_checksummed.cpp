// SPDX-License-Identifier: Apache-2.0
// transport::checksummed: the generic algorithms give exact sums over it, bit for bit what
// they give without it, and a message damaged on its way is errc::mismatch naming its
// sender (the corrupting peer's 1000 trials are in test_corrupt_peer).
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <gradsync/gradsync.hpp>
#include <gradsync/testing/exact_inputs.hpp>
#include <gradsync/transport/checksummed.hpp>

#include "corrupting.hpp"
#include "watchdog.hpp"

namespace gs = gradsync;
namespace tb = gradsync::testbed;
using local = gs::transport::local;

namespace {

// Rank r's result of A over `count` exact inputs, wrapped or not; counts wrong elements.
template <class A, class T, class Tr>
std::vector<T> reduce(Tr& t, std::size_t count, std::size_t& wrong) {
  std::vector<T> v(count);
  gs::testing::fill_inputs(std::span<T>(v), gs::reduce_op::sum, t.rank(), t.size());
  gs::allreduce<A>(t, std::span<T>(v), gs::op::sum);
  wrong += gs::testing::count_wrong(std::span<const T>(v), gs::reduce_op::sum, t.size());
  return v;
}

template <class A, class T>
void same_as_unwrapped(std::size_t ranks) {
  for (std::size_t count :
       {std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{70001}}) {
    CAPTURE(count);
    std::vector<std::size_t> wrong(ranks);
    std::vector<int> same(ranks);
    gs::transport::run_local(ranks, [&](local& lt) {
      const std::size_t r = lt.rank();
      const std::vector<T> plain = reduce<A, T>(lt, count, wrong[r]);
      gs::transport::checksummed<local> t(lt);
      const std::vector<T> checked = reduce<A, T>(t, count, wrong[r]);
      same[r] = plain == checked;
    });
    for (std::size_t r = 0; r < ranks; ++r) {
      CAPTURE(r);
      CHECK(wrong[r] == 0);
      CHECK(same[r] == 1);
    }
  }
}

}  // namespace

TEST_CASE("checksummed: ring, tree and halving-doubling sum exactly, as without it") {
  gs::testbed::watchdog wd(120, "checksummed sums");
  for (std::size_t n : {2, 3, 4}) {
    CAPTURE(n);
    same_as_unwrapped<gs::algo::ring, float>(n);
    same_as_unwrapped<gs::algo::tree, double>(n);
    same_as_unwrapped<gs::algo::halving_doubling, std::int32_t>(n);
    same_as_unwrapped<gs::algo::auto_select, float>(n);
  }
}

TEST_CASE("checksummed: a damaged message is a mismatch naming its sender") {
  gs::testbed::watchdog wd(60, "checksummed damage");
  std::vector<std::string> why(3);
  std::vector<int> code(3, -1);
  gs::transport::run_local(3, [&](local& lt) {
    const std::size_t r = lt.rank();
    // Rank 1 flips a byte of its first message (not its trailer).
    tb::corrupting<local> c(lt, r == 1 ? 0 : ~std::size_t{0}, tb::harm::flip, 7);
    gs::transport::checksummed<tb::corrupting<local>> t(c);
    std::vector<float> v(1000, float(r + 1));
    gs::call_options o;
    o.timeout = gs::seconds_d(2);
    try {
      gs::allreduce<gs::algo::ring>(t, std::span<float>(v), gs::op::sum, o);
    } catch (const gs::error& e) {
      code[r] = static_cast<int>(e.code());
      why[r] = e.what();
    }
  });
  // Rank 1's first message is its call header, to rank 0 (the header agreement's).
  INFO(why[0] << " / " << why[1] << " / " << why[2]);
  CHECK(code[0] == static_cast<int>(gs::errc::mismatch));
  CHECK(why[0].find("gradsync mismatch on rank 0 (peer 1): transport::checksummed: the message "
                    "of tag ") != std::string::npos);
  CHECK(why[0].find(" from rank 1 arrived damaged (its 48 bytes do not hash to the sender's "
                    "hash)") != std::string::npos);
  for (std::size_t r = 1; r < 3; ++r) CHECK(code[r] != -1);  // nobody finishes with a result
}
