// SPDX-License-Identifier: Apache-2.0
// The corrupting peer (tests/testbed/corrupting.hpp) on transport::mpi: 3 processes under
// mpirun, a fresh transport (a duplicate of MPI_COMM_WORLD) per trial, one rank harming
// one message of its own. Each rank runs the program; the ranks then share what they
// ended with (MPI_Allgather on the world communicator, outside the transport under test),
// so every rank judges every trial alike and the next trial starts together. The second
// case puts transport::checksummed over the corrupting wrapper: no result may change.
//
//   mpirun -n 3 build/tests/mpi/test_mpi_corrupt_peer_openmpi   (GRADSYNC_CORRUPT_TRIALS=N)
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <vector>

#include <gradsync/gradsync.hpp>
#include <gradsync/testing/exact_inputs.hpp>
#include <gradsync/transport/checksummed.hpp>
#include <gradsync/transport/mpi.hpp>

#include "corrupting.hpp"
#include "watchdog.hpp"

namespace gs = gradsync;
namespace tb = gradsync::testbed;
using gs::transport::mpi;

namespace {

// What a rank's outcome comes to for the judgement: its digests as one hash (equal
// digests, equal hashes), and whether its error names a cause.
void share(const tb::trial_outcome& mine, std::vector<tb::trial_outcome>& all) {
  const std::uint64_t digest = gs::testing::fnv1a64(
      mine.digests.data(), mine.digests.size() * sizeof(std::uint64_t), 0xcbf29ce484222325ull);
  const std::array<std::uint64_t, 7> rec = {mine.failed, !mine.error.empty(), digest,   mine.wrong,
                                            mine.hit,    mine.header,         mine.sent};
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  std::vector<std::uint64_t> got(rec.size() * static_cast<std::size_t>(n));
  // Nonblocking and paced: a blocking MPI_Allgather busy-polls (sched_yield under
  // mpi_yield_when_idle) while the ranks still in the trial wait out its deadline.
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_Iallgather(rec.data(), static_cast<int>(rec.size()), MPI_UINT64_T, got.data(),
                 static_cast<int>(rec.size()), MPI_UINT64_T, MPI_COMM_WORLD, &req);
  MPI_Status st;
  REQUIRE(gs::transport::detail::mpi_poll(req, st, gs::deadline::after(gs::seconds_d(60))) ==
          MPI_SUCCESS);
  all.assign(static_cast<std::size_t>(n), {});
  for (std::size_t r = 0; r < all.size(); ++r) {
    const std::uint64_t* g = got.data() + r * rec.size();
    all[r].failed = g[0] != 0;
    if (g[1]) all[r].error = "(its error)";
    all[r].digests = {g[2]};
    all[r].wrong = g[3];
    all[r].hit = g[4] != 0;
    all[r].header = g[5] != 0;
    all[r].sent = g[6];
  }
}

}  // namespace

// Runs `trials` trials, every rank making a fresh transport per trial (Checked: the
// corrupting wrapper under transport::checksummed).
template <bool Checked>
void mpi_trials(const char* what, std::size_t trials) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  REQUIRE(size == 3);
  tb::corrupting_trials(
      what, 3, trials,
      [&](std::size_t bad, std::size_t victim, tb::harm h, std::uint64_t seed) {
        tb::trial_outcome mine;
        try {
          mpi m(MPI_COMM_WORLD);
          tb::corrupting<mpi> c(m, static_cast<std::size_t>(rank) == bad ? victim : ~std::size_t{0},
                                h, seed);
          if constexpr (Checked) {
            gs::transport::checksummed<tb::corrupting<mpi>> t(c);
            tb::run_program(c, t, mine);
          } else {
            tb::run_program(c, mine);
          }
        } catch (const std::exception& e) {  // the transport itself could not be made
          mine.failed = true;
          mine.error = e.what();
        }
        std::vector<tb::trial_outcome> all;
        share(mine, all);
        return all;
      },
      Checked);
}

TEST_CASE("mpi: a corrupting peer: every rank errs or every rank holds the same results") {
  gs::testbed::watchdog wd(900, "corrupting peer on mpi");
  mpi_trials<false>("mpi", tb::corrupt_trials(1000));
}

TEST_CASE("mpi: a corrupting peer under transport::checksummed: an error or the clean results") {
  gs::testbed::watchdog wd(900, "corrupting peer on mpi, checksummed");
  mpi_trials<true>("mpi, checksummed", tb::corrupt_trials(1000));
}

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  doctest::Context ctx(argc, argv);
  if (rank != 0) ctx.setOption("out", "/dev/null");  // one report, rank 0's
  int failed = ctx.run();
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return failed;
}
