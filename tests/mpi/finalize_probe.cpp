// SPDX-License-Identifier: Apache-2.0
// transport::finalize_job's two bounds, run by finalize.sh on 2 ranks:
//   late   rank 1 reaches finalize_job 1.5 s after rank 0: rank 0 waits for it in the
//          barrier, saying so every doubling of 0.5 s, and both exit 0.
//   absent rank 1 never reaches it: rank 0 exits with its own status after `grace`
//          (1 s here) and says that not every rank reached the end of the job.
// Rank 0 prints how long its finalize_job took ("rank 0 finalize_job ... s").
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include <gradsync/transport/mpi/exit.hpp>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const bool absent = argc > 1 && std::strcmp(argv[1], "absent") == 0;
  if (rank == 1) {
    std::this_thread::sleep_for(absent ? std::chrono::seconds(60)
                                       : std::chrono::milliseconds(1500));
    return gradsync::transport::finalize_job(0);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = absent ? gradsync::transport::finalize_job(5, std::chrono::seconds(1))
                        : gradsync::transport::finalize_job(0, std::chrono::seconds(10),
                                                            std::chrono::seconds(3),
                                                            std::chrono::milliseconds(500));
  std::printf("rank 0 finalize_job %.2f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return rc;
}
