// SPDX-License-Identifier: Apache-2.0
// The corrupting peer (tests/testbed/corrupting.hpp) on transport::shm: ranks are threads,
// each with its own mapping of a fresh job's segment, one harms one message of its own
// per trial. The wrapper hides shm's peer access, so every call goes through shm's
// messages (isend/irecv), which are what a broken peer could garble. Then the same under
// transport::checksummed, where no harmed message may change a result silently.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gradsync/gradsync.hpp>
#include <gradsync/transport/checksummed.hpp>
#include <gradsync/transport/shm.hpp>

#include "corrupting.hpp"
#include "watchdog.hpp"

namespace gs = gradsync;
namespace tb = gradsync::testbed;
using gs::transport::shm;

namespace {

// One trial's ranks (threads, each mapping a fresh job's segment); Checked: the corrupting
// wrapper under transport::checksummed.
template <bool Checked>
std::vector<tb::trial_outcome> trial(std::size_t& job, std::size_t bad, std::size_t victim,
                                     tb::harm h, std::uint64_t seed) {
  std::vector<tb::trial_outcome> out(3);
  const std::string id = "corrupt-" + std::to_string(::getpid()) + "-" + std::to_string(job++);
  std::vector<std::thread> ranks;
  for (std::size_t r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      try {
        gs::transport::shm_options o;
        o.rank = r;
        o.size = 3;
        o.job = id;
        // The program's messages are a few KiB; a small segment keeps the 2000 trials'
        // fresh segments cheap (each is reserved, zeroed, mapped three times and unmapped).
        o.slot_bytes = 4 << 10;
        o.ring_bytes = 16 << 10;
        o.exchange_bytes = 64 << 10;
        shm s(o);
        tb::corrupting<shm> c(s, r == bad ? victim : ~std::size_t{0}, h, seed);
        if constexpr (Checked) {
          gs::transport::checksummed<tb::corrupting<shm>> t(c);
          tb::run_program(c, t, out[r]);
        } else {
          tb::run_program(c, out[r]);
        }
      } catch (const std::exception& e) {  // the bootstrap itself failed
        out[r].failed = true;
        out[r].error = e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  return out;
}

}  // namespace

TEST_CASE("shm: a corrupting peer: every rank errs or every rank holds the same results") {
  gs::testbed::watchdog wd(900, "corrupting peer on shm");
  std::size_t job = 0;
  tb::corrupting_trials("shm", 3, tb::corrupt_trials(1000),
                        [&](std::size_t bad, std::size_t victim, tb::harm h, std::uint64_t seed) {
                          return trial<false>(job, bad, victim, h, seed);
                        });
}

TEST_CASE("shm: a corrupting peer under transport::checksummed: an error or the clean results") {
  gs::testbed::watchdog wd(900, "corrupting peer on shm, checksummed");
  std::size_t job = 0;
  tb::corrupting_trials(
      "shm, checksummed", 3, tb::corrupt_trials(1000),
      [&](std::size_t bad, std::size_t victim, tb::harm h, std::uint64_t seed) {
        return trial<true>(job, bad, victim, h, seed);
      },
      /*checked=*/true);
}
