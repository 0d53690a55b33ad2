// SPDX-License-Identifier: Apache-2.0
// The fault half of suite 'cluster': every rank allreduces over two_level (shm inside a
// host, mpi across) in a loop until tests/cluster/link_down.sh takes one host's link
// down. Each rank then writes what it saw to $OUT/rank<R>.txt (the simulated hosts share
// the file system, not the network) and ends with transport::abort_job, so the job ends
// even though the launcher cannot reach the other host.
//   link_down OUT_DIR [seconds_between_calls]
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <gradsync/algo/hierarchical.hpp>
#include <gradsync/allreduce.hpp>
#include <gradsync/transport/mpi/exit.hpp>
#include <gradsync/transport/two_level/from_mpi.hpp>

namespace gs = gradsync;

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world);
  const std::string out = argc > 1 ? argv[1] : ".";
  const double pause = argc > 2 ? std::atof(argv[2]) : 0.05;
  const char* host = std::getenv("GS_NETNS");
  const std::string file = out + "/rank" + std::to_string(world) + ".txt";
  auto note = [&](const std::string& line) { std::ofstream(file, std::ios::app) << line << "\n"; };
  auto now = [] {  // wall clock: the script compares it with when the link went down
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  std::size_t calls = 0;
  try {
    auto t = gs::transport::two_level_from_mpi(MPI_COMM_WORLD);
    std::vector<float> v(std::size_t{1} << 20, 1.0f);  // 4 MiB
    for (;; ++calls) {
      gs::allreduce<gs::algo::hierarchical<>>(t, std::span<float>(v), gs::op::avg);
      if (calls == 2) note("started host=" + std::string(host ? host : "?"));
      std::this_thread::sleep_for(std::chrono::duration<double>(pause));
    }
  } catch (const gs::error& e) {
    char when[64];
    std::snprintf(when, sizeof when, "%.3f", now());
    note(std::string("error code=") + std::string(gs::errc_name(e.code())) +
         " after_calls=" + std::to_string(calls) + " t=" + when + " what=" + e.what());
    std::fprintf(stderr, "link_down: rank %d: %s\n", world, e.what());
    // Lets the ranks of this host record their own errors before the launcher, told by
    // the first abort, kills them (the test reads every rank's record).
    std::this_thread::sleep_for(std::chrono::seconds(1));
    gs::transport::abort_job(MPI_COMM_WORLD, 3, std::chrono::seconds(5));
  }
}
