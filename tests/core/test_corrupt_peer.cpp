// SPDX-License-Identifier: Apache-2.0
// The corrupting peer (tests/testbed/corrupting.hpp) on transport::local: ranks are
// threads, one harms one message of its own per trial; then the same under
// transport::checksummed, where no harmed message may change a result silently.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include <gradsync/gradsync.hpp>
#include <gradsync/transport/checksummed.hpp>

#include "corrupting.hpp"
#include "watchdog.hpp"

namespace gs = gradsync;
namespace tb = gradsync::testbed;
using local = gs::transport::local;

TEST_CASE("a corrupting peer: every rank errs or every rank holds the same results") {
  gs::testbed::watchdog wd(600, "corrupting peer");
  tb::corrupting_trials("local", 3, tb::corrupt_trials(1000),
                        [](std::size_t bad, std::size_t victim, tb::harm h, std::uint64_t seed) {
                          std::vector<tb::trial_outcome> out(3);
                          gs::transport::run_local(3, [&](local& lt) {
                            const std::size_t r = lt.rank();
                            tb::corrupting<local> t(lt, r == bad ? victim : ~std::size_t{0}, h,
                                                    seed);
                            tb::run_program(t, out[r]);
                          });
                          return out;
                        });
}

TEST_CASE("a corrupting peer under transport::checksummed: an error or the clean results") {
  gs::testbed::watchdog wd(600, "corrupting peer, checksummed");
  tb::corrupting_trials(
      "local, checksummed", 3, tb::corrupt_trials(1000),
      [](std::size_t bad, std::size_t victim, tb::harm h, std::uint64_t seed) {
        std::vector<tb::trial_outcome> out(3);
        gs::transport::run_local(3, [&](local& lt) {
          const std::size_t r = lt.rank();
          tb::corrupting<local> c(lt, r == bad ? victim : ~std::size_t{0}, h, seed);
          gs::transport::checksummed<tb::corrupting<local>> t(c);
          tb::run_program(c, t, out[r]);
        });
        return out;
      },
      /*checked=*/true);
}
